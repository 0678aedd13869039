"""Configuration and the ``CTXGUARD_*`` environment variables.

Environment variables override the arguments given in code, so an operator can
switch a deployed app to observe mode, or off, without a release.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ENV_CAPTURE_CONTENT",
    "ENV_CAPTURE_PATH",
    "ENV_DIGEST_KEY",
    "ENV_DISABLED",
    "ENV_MAX_CONVERSATIONS",
    "ENV_METRICS_PORT",
    "ENV_MODE",
    "ENV_SPAN",
    "Config",
    "Mode",
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
#: ``1`` (or ``true``/``yes``/``on``) makes ``instrument()`` a no-op.
ENV_DISABLED = "CTXGUARD_DISABLED"
#: Append every request body (as sent) and fact event to this JSON Lines file (opt-in; raw content).
ENV_CAPTURE_PATH = "CTXGUARD_CAPTURE_PATH"
#: How many conversations are remembered for eviction detection (LRU; default 10000, also for 0 or less).
ENV_MAX_CONVERSATIONS = "CTXGUARD_MAX_CONVERSATIONS"
#: ``auto`` (default): ctxguard's attributes go on another instrumentation's span of the same
#: call when there is one; ``own``: ctxguard always records a span of its own.
ENV_SPAN = "CTXGUARD_SPAN"

Mode = Literal["observe", "enforce"]
SpanChoice = Literal["auto", "own"]
_TRUE = {"1", "true", "yes", "on"}


def _flag(name: str) -> bool | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    return raw.strip().lower() in _TRUE


def _int(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


@dataclass(frozen=True)
class Config:
    """Resolved settings: ``Config.resolve(mode="enforce")`` applies env overrides."""

    mode: Mode = "observe"
    digest_key: bytes | None = None
    capture_content: bool = False
    metrics_port: int | None = None
    max_conversations: int = 10_000
    capture_path: str | None = None
    span: SpanChoice = "auto"

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
    ) -> Config:
        mode = os.environ.get(ENV_MODE, "").strip().lower() or mode
        if mode not in ("observe", "enforce"):
            raise ValueError(f"mode must be 'observe' or 'enforce', got {mode!r}")
        span = os.environ.get(ENV_SPAN, "").strip().lower() or span
        if span not in ("auto", "own"):
            raise ValueError(f"span must be 'auto' or 'own', got {span!r}")
        key = os.environ.get(ENV_DIGEST_KEY) or digest_key
        capture = _flag(ENV_CAPTURE_CONTENT)
        port = _int(ENV_METRICS_PORT)
        max_conv = _int(ENV_MAX_CONVERSATIONS)
        return cls(
            mode="enforce" if mode == "enforce" else "observe",
            digest_key=key.encode() if isinstance(key, str) else key,
            capture_content=capture_content if capture is None else capture,
            metrics_port=metrics_port if port is None else port,
            max_conversations=max_conv if max_conv and max_conv > 0 else 10_000,
            capture_path=os.environ.get(ENV_CAPTURE_PATH, "").strip() or capture_path,
            span="own" if span == "own" else "auto",
        )
