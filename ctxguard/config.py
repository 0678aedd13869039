"""Configuration and the ``CTXGUARD_*`` environment variables.

Environment variables override the arguments given in code, so an operator can
switch a deployed app to observe mode, or off, without a release.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "CACHE_BYTES",
    "ENV_CACHE_BYTES",
    "ENV_CAPTURE_CONTENT",
    "ENV_CAPTURE_PATH",
    "ENV_DIGEST_KEY",
    "ENV_DISABLED",
    "ENV_HASH_IDS",
    "ENV_MAX_CONVERSATIONS",
    "ENV_METRICS",
    "ENV_METRICS_PORT",
    "ENV_MODEL_WINDOWS",
    "ENV_MODE",
    "ENV_OLLAMA_NUM_CTX",
    "ENV_SPAN",
    "ENV_TOKENIZER",
    "ENVIRONMENT",
    "MAX_CONVERSATIONS",
    "Config",
    "MetricsChoice",
    "Mode",
    "OLLAMA_NUM_CTX",
    "SpanChoice",
]

#: ``observe`` (default, never raises) or ``enforce`` (raise before sending).
ENV_MODE = "CTXGUARD_MODE"
#: Secret for keyed digests; set the same value in every process whose digests you compare.
ENV_DIGEST_KEY = "CTXGUARD_DIGEST_KEY"
#: ``1``/``true``/``yes``/``on`` puts raw message content on spans (off by default); any other value
#: keeps it off.
ENV_CAPTURE_CONTENT = "CTXGUARD_CAPTURE_CONTENT"
#: Port for a Prometheus ``/metrics`` endpoint on 127.0.0.1.
ENV_METRICS_PORT = "CTXGUARD_METRICS_PORT"
#: Where the metrics go: ``prometheus`` (default), ``otel`` (an OpenTelemetry meter, and no
#: Prometheus series at all) or ``both``.
ENV_METRICS = "CTXGUARD_METRICS"
#: When tiktoken is loaded: ``lazy`` (default: when a verdict needs an exact count, which the byte
#: bounds decide for most requests) or ``eager`` (at ``instrument()``).
ENV_TOKENIZER = "CTXGUARD_TOKENIZER"
#: ``1``/``true`` exports conversation and fact ids as keyed digests (spans, span events, logs).
ENV_HASH_IDS = "CTXGUARD_HASH_IDS"
#: ``1`` (or ``true``/``yes``/``on``) makes ``instrument()`` a no-op.
ENV_DISABLED = "CTXGUARD_DISABLED"
#: Append every request body (as sent) and fact event to this JSON Lines file (opt-in; raw content).
ENV_CAPTURE_PATH = "CTXGUARD_CAPTURE_PATH"
#: How many conversations are remembered for eviction detection (LRU; default 10000, also for 0 or less).
ENV_MAX_CONVERSATIONS = "CTXGUARD_MAX_CONVERSATIONS"
MAX_CONVERSATIONS = 10_000
#: Bytes of memory for ctxguard's caches and memories together (default ``CACHE_BYTES``, also for 0
#: or less); docs/operations.md, "Memory", says how they share it.
ENV_CACHE_BYTES = "CTXGUARD_CACHE_BYTES"
#: 16 MiB: a fleet worker levels off within ~16 MiB of the same worker without ctxguard, and the
#: caches still find what a call resends (docs/operations.md, "What a worker costs").
CACHE_BYTES = 16 * 1024 * 1024
#: A TOML or JSON file of model context windows, added to the shipped table and winning over it
#: (docs/budget.md, "Adding or overriding windows"); read by ``instrument()``.
ENV_MODEL_WINDOWS = "CTXGUARD_MODEL_WINDOWS"
#: ``auto`` (default): ctxguard's attributes go on another instrumentation's span of the same
#: call when there is one; ``own``: ctxguard always records a span of its own.
ENV_SPAN = "CTXGUARD_SPAN"
#: The context window, in tokens, an Ollama server gives a request that sets no ``options.num_ctx``
#: (its ``OLLAMA_CONTEXT_LENGTH``, or a Modelfile's ``num_ctx``); default ``OLLAMA_NUM_CTX``.
ENV_OLLAMA_NUM_CTX = "CTXGUARD_OLLAMA_NUM_CTX"
#: Ollama's own default since 0.15.5 on a machine with less than 24 GiB of VRAM (32768 from 24 GiB,
#: 262144 from 48 GiB): the smallest of its defaults, so a prompt over it is never passed as fitting.
OLLAMA_NUM_CTX = 4096

#: Every variable ctxguard reads, in one place (docs/operations.md lists them; tests hold each one to
#: "never makes ``instrument()`` raise or wait").
ENVIRONMENT = (
    ENV_MODE,
    ENV_DIGEST_KEY,
    ENV_CAPTURE_CONTENT,
    ENV_METRICS_PORT,
    ENV_METRICS,
    ENV_TOKENIZER,
    ENV_HASH_IDS,
    ENV_DISABLED,
    ENV_CAPTURE_PATH,
    ENV_MAX_CONVERSATIONS,
    ENV_CACHE_BYTES,
    ENV_MODEL_WINDOWS,
    ENV_SPAN,
    ENV_OLLAMA_NUM_CTX,
)

logger = logging.getLogger("ctxguard")

Mode = Literal["observe", "enforce"]
SpanChoice = Literal["auto", "own"]
MetricsChoice = Literal["prometheus", "otel", "both"]
TokenizerChoice = Literal["lazy", "eager"]
METRICS_CHOICES = ("prometheus", "otel", "both")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _ignored(name: str, raw: str, expected: str) -> None:
    """A variable the operator set wrong: one warning naming it; the code's value stands. The
    environment never makes ``instrument()`` raise into the app. The value is shown cut to 80
    characters (a megabyte of garbage is not logged whole)."""
    shown = repr(raw[:80]) + ("..." if len(raw) > 80 else "")
    logger.warning("ctxguard: %s=%s ignored: %s expected; using the value given in code", name, shown, expected)


def _flag(name: str) -> bool | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    word = raw.strip().lower()
    if word not in _TRUE | _FALSE:
        _ignored(name, raw, "1/true/yes/on or 0/false/no/off")
        return None
    return word in _TRUE


def _int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        _ignored(name, raw, "an integer")
        return None


def _choice(name: str, choices: tuple[str, ...]) -> str | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if raw.lower() not in choices:
        _ignored(name, raw, " or ".join(choices))
        return None
    return raw.lower()


def _digest_key(given: str | bytes | None) -> bytes | None:
    """The digest key: ``CTXGUARD_DIGEST_KEY``, else ``given``. An empty key would make the
    digests unkeyed (guessable): refused in code, ignored with a warning from the environment.
    The variable's bytes are the key, whatever they are (``$(head -c 32 /dev/urandom)`` holds no
    UTF-8): the same bytes in every process make the same key."""
    if given is not None and not given:
        raise ValueError("digest_key must not be empty (it would leave digests unkeyed): pass a secret, "
                         "or None for a random per-process key")
    raw = os.environ.get(ENV_DIGEST_KEY)
    if raw is None:
        return given.encode() if isinstance(given, str) else given
    if raw.strip():
        return os.fsencode(raw)  # the bytes as set: Python decoded them with surrogateescape
    # Set but blank: a deployment whose secret did not arrive. Ignored, as if unset, with one warning
    # (a random key made here, so that the Digester does not add its own "no key" warning).
    logger.warning("ctxguard: %s is set but empty, which would leave digests unkeyed; ignored, using %s",
                   ENV_DIGEST_KEY, "digest_key= as given in code" if given is not None
                   else "a random per-process key (digests are not comparable across processes)")
    if given is not None:
        return given.encode() if isinstance(given, str) else given
    return os.urandom(32)


def _chosen(name: str, value: str, choices: tuple[str, ...], env: str) -> str:
    """``value`` checked against ``choices`` (``ValueError`` naming them), then the environment's
    choice if it makes one (``_choice``)."""
    if value not in choices:
        named = ", ".join(map(repr, choices[:-1])) + f" or {choices[-1]!r}"
        raise ValueError(f"{name} must be {named}, got {value!r}")
    return _choice(env, choices) or value


@dataclass(frozen=True)
class Config:
    """Resolved settings: ``Config.resolve(mode="enforce")`` applies env overrides."""

    mode: Mode = "observe"
    digest_key: bytes | None = field(default=None, repr=False)  # a secret: never in a repr, log or message
    capture_content: bool = False
    metrics_port: int | None = None
    max_conversations: int = MAX_CONVERSATIONS
    cache_bytes: int = CACHE_BYTES
    capture_path: str | None = None
    span: SpanChoice = "auto"
    hash_ids: bool = False
    model_windows: str | None = None  # the CTXGUARD_MODEL_WINDOWS file, read by instrument()
    ollama_num_ctx: int = OLLAMA_NUM_CTX
    metrics: MetricsChoice = "prometheus"
    tokenizer: TokenizerChoice = "lazy"

    @property
    def server_windows(self) -> dict[str, int]:
        """``provider`` label -> the window its server holds a request to when the request sets none."""
        return {"ollama": self.ollama_num_ctx}

    @staticmethod
    def disabled() -> bool:
        return bool(_flag(ENV_DISABLED))

    @classmethod
    def resolve(
        cls,
        *,
        mode: str = "observe",
        digest_key: str | bytes | None = None,
        capture_content: bool = False,
        metrics_port: int | None = None,
        capture_path: str | None = None,
        span: str = "auto",
        hash_ids: bool = False,
        ollama_num_ctx: int | None = None,
        metrics: str = "prometheus",
        tokenizer: str = "lazy",
    ) -> Config:
        mode = _chosen("mode", mode, ("observe", "enforce"), ENV_MODE)
        metrics = _chosen("metrics", metrics, METRICS_CHOICES, ENV_METRICS)
        tokenizer = _chosen("tokenizer", tokenizer, ("lazy", "eager"), ENV_TOKENIZER)
        span = _chosen("span", span, ("auto", "own"), ENV_SPAN)
        if ollama_num_ctx is not None and ollama_num_ctx <= 0:
            raise ValueError(f"ollama_num_ctx must be a positive number of tokens, got {ollama_num_ctx!r}")
        key = _digest_key(digest_key)
        capture = _flag(ENV_CAPTURE_CONTENT)
        hashed = _flag(ENV_HASH_IDS)
        if metrics_port is not None and not 0 < metrics_port < 65536:
            raise ValueError(f"metrics_port must be a TCP port (1-65535), got {metrics_port!r}")
        port = _int(ENV_METRICS_PORT)
        if port is not None and not 0 < port < 65536:
            _ignored(ENV_METRICS_PORT, str(port), "a TCP port (1-65535)")
            port = None
        max_conv = _int(ENV_MAX_CONVERSATIONS)
        if max_conv is not None and max_conv <= 0:
            _ignored(ENV_MAX_CONVERSATIONS, str(max_conv), "a positive number of conversations")
            max_conv = None
        cache_bytes = _int(ENV_CACHE_BYTES)
        if cache_bytes is not None and cache_bytes <= 0:
            _ignored(ENV_CACHE_BYTES, str(cache_bytes), "a positive number of bytes")
            cache_bytes = None
        num_ctx = _int(ENV_OLLAMA_NUM_CTX)
        if num_ctx is not None and num_ctx <= 0:
            _ignored(ENV_OLLAMA_NUM_CTX, str(num_ctx), "a positive number of tokens")
            num_ctx = None
        return cls(
            mode="enforce" if mode == "enforce" else "observe",
            digest_key=key,
            capture_content=capture_content if capture is None else capture,
            metrics_port=metrics_port if port is None else port,
            max_conversations=max_conv if max_conv is not None else MAX_CONVERSATIONS,
            cache_bytes=cache_bytes if cache_bytes is not None else CACHE_BYTES,
            capture_path=os.environ.get(ENV_CAPTURE_PATH, "").strip() or capture_path,
            span="own" if span == "own" else "auto",
            hash_ids=bool(hash_ids) if hashed is None else hashed,
            ollama_num_ctx=num_ctx or ollama_num_ctx or OLLAMA_NUM_CTX,
            model_windows=os.environ.get(ENV_MODEL_WINDOWS, "").strip() or None,
            metrics="otel" if metrics == "otel" else "both" if metrics == "both" else "prometheus",
            tokenizer="eager" if tokenizer == "eager" else "lazy",
        )
