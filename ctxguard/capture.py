"""Capture files: one JSON line per request body, for offline checking (SPEC §7).

A request line::

    {"conversation_id": "order-41", "turn": 3, "ts": "2026-11-29T14:03:11.208+00:00",
     "provider": "azure.ai.openai", "sdk": "openai", "body": {...the request body as sent...}}

``provider`` is the call's label (the provider it reached); ``sdk``, the SDK whose request
format the body is in, named as ``instrument(providers=...)`` names SDKs: a label alone does
not say it (``aws.bedrock`` is botocore's Converse, the anthropic SDK's Messages or the openai
SDK's Chat Completions). Lines without ``sdk`` (older captures, hand-written ones) are read by
their label when it is an SDK's own (``openai``, ``anthropic``, ...).

Fact events are captured too, as lines with ``fact`` instead of ``body``, so that
``ctxguard check`` and ``ctxguard report`` can judge the fact checks offline::

    {"conversation_id": "order-41", "ts": "...", "fact": {"id": "shipping_city", "value": "Lyon"}}

(``"value": null`` is a deletion; ``sequence`` and ``required`` are kept when given.)

Writing is opt-in (``instrument(capture_path=...)`` or ``ctxguard.testing.record``):
a capture holds raw content, which is why it is a local file and never telemetry.
A ``redact`` hook sees every line before it is written and may rewrite or drop it.
Reading streams the file line by line in constant memory and names the line of
any input it cannot use; text read from a capture is shown through ``printable``.
"""

from __future__ import annotations

import codecs
import dataclasses
import errno
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Any

from . import forksafe
from ._nesting import deeper_than
from .cache import BoundedLRU
from .conversation import Scope
from .facts.ledger import FactEvent
from .providers import BY_DISTRIBUTION
from .providers._read import SENTINELS, jsonable

__all__ = [
    "MAX_LINE_BYTES",
    "SDKS",
    "CaptureError",
    "CaptureRefused",
    "CaptureWriter",
    "FactLine",
    "Redact",
    "RequestLine",
    "capture_body",
    "loads",
    "printable",
    "read_capture",
]

#: A line longer than this is refused instead of being read into memory.
MAX_LINE_BYTES = 64 * 1024 * 1024

#: ``redact(line) -> line | None``: rewrite a line before it is written, or drop it.
Redact = Callable[[dict[str, Any]], "dict[str, Any] | None"]

_MAX_TURN_COUNTERS = 100_000

#: Every ``sdk`` a capture line may name (``instrument(providers=...)``'s names).
SDKS = frozenset(BY_DISTRIBUTION)


#: Keyword arguments of the SDK call that are HTTP options, not part of the body.
_NOT_BODY = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
#: Keyword arguments that carry credentials or where to send them (LiteLLM's ``api_key``,
#: ``api_base``, ``aws_secret_access_key``, ``vertex_credentials``, ``headers``, ...): never written
#: to a capture file, whose raw content is the app's but whose secrets are not for it.
_CREDENTIALS = re.compile(r"key|secret|password|credential|token$|^aws_|^headers$|^api_base$|^base_url$", re.I)


def capture_body(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The body as the app passed it, when the transport's bytes were not seen:
    sentinels, HTTP options and credentials left out, SDK objects as JSON."""
    body = {k: v for k, v in kwargs.items()
            if k not in _NOT_BODY and not _CREDENTIALS.search(k) and type(v).__name__ not in SENTINELS}
    extra = kwargs.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    loaded: dict[str, Any] = json.loads(json.dumps(body, default=jsonable, ensure_ascii=False))
    return loaded


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class CaptureRefused(OSError):
    """A capture path ctxguard will not append raw content to; ``str()`` says why."""


def _open_for_capture(path: str) -> int:
    """A descriptor appending to ``path``, a regular file only its owner may read or write.

    Created ``0600`` if missing. Never waits (opened non-blocking: a FIFO with no reader is
    refused at once) and never follows a symbolic link at ``path`` (a link planted there would
    send raw content elsewhere). An existing file that its group or others may read or write is
    refused, not tightened: who else reads it is the operator's decision, and appending raw request
    bodies to it silently is not ctxguard's (``chmod 600`` it, or remove it).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CaptureRefused(f"{path} is a symbolic link; ctxguard writes only to the file itself") from None
        if exc.errno == errno.ENXIO:
            raise CaptureRefused(f"{path} is a FIFO with no reader, not a file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CaptureRefused(f"{path} is not a regular file")
        if st.st_mode & 0o077:
            raise CaptureRefused(
                f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: its group or others may read it, and a capture "
                "holds raw content (chmod 600 it, or remove it and ctxguard creates it 0600)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class CaptureWriter:
    """Appends capture lines to ``path``; thread-safe, one ``write(2)`` per line.

    The file is created ``0600`` (it holds raw content) and opened ``O_APPEND``, so
    several processes may share it and lines never interleave; ``{pid}`` in the path
    gives each process a file of its own instead (turn numbers are per process), a forked
    child included. An existing file readable by others, a FIFO, a device or a symbolic link is
    refused (``CaptureRefused``, an ``OSError``): ``instrument()`` logs one warning and
    captures nothing.
    """

    def __init__(self, path: str, *, redact: Redact | None = None) -> None:
        self._template = path
        self.path = path.replace("{pid}", str(os.getpid()))
        self.redact = redact
        self._fd: int | None = _open_for_capture(self.path)
        self._lock = forksafe.lock()
        self._turns: BoundedLRU[Scope | None, int] = BoundedLRU(_MAX_TURN_COUNTERS)
        forksafe.on_fork(self)

    def forked(self) -> None:
        """In a forked child: a path naming the pid becomes the child's own file, its turns counted
        afresh; a shared file stays shared."""
        if "{pid}" not in self._template or self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        self.path = self._template.replace("{pid}", str(os.getpid()))
        self._turns = BoundedLRU(_MAX_TURN_COUNTERS)
        self._fd = _open_for_capture(self.path)

    def request(
        self, scope: Scope | None, provider: str, body: Any, model: str | None = None, sdk: str | None = None
    ) -> None:
        """One request line: ``provider`` is the call's label, ``sdk`` the SDK whose request format
        ``body`` is in."""
        with self._lock:
            turn = self._turns.get(scope, 0) + 1
            self._turns.put(scope, turn)
        line: dict[str, Any] = {"conversation_id": scope[0] if scope is not None else None, "turn": turn,
                                "ts": _now(), "provider": provider}
        if sdk is not None:
            line["sdk"] = sdk
        line["body"] = body
        if scope is not None and scope[1] is not None:
            line["tenant"] = scope[1]
        if model is not None:
            line["model"] = model  # not every body names it (Gemini's is in the URL)
        self._write(line)

    def fact(self, event: FactEvent) -> None:
        fact: dict[str, Any] = {"id": event.fact_id, "value": event.value}
        if event.sequence is not None:
            fact["sequence"] = event.sequence
        if not event.required:
            fact["required"] = False
        if event.expires_at is not None:
            fact["expires_at"] = event.expires_at.isoformat()
        line: dict[str, Any] = {"conversation_id": event.scope[0], "ts": _now(), "fact": fact}
        if event.scope[1] is not None:
            line["tenant"] = event.scope[1]
        self._write(line)

    def _write(self, line: dict[str, Any]) -> None:
        if self.redact is not None:
            redacted = self.redact(line)
            if redacted is None:
                return
            line = redacted
        data = (json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            if self._fd is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view):]

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


class CaptureError(ValueError):
    """A capture line that cannot be used; ``str()`` names the line."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line
        self.reason = reason


@dataclass(frozen=True, slots=True)
class RequestLine:
    line: int
    conversation_id: str | None
    turn: int
    provider: str
    body: Mapping[str, Any]
    ts: str | None
    tenant: str | None = None
    model: str | None = None
    #: The SDK whose request format ``body`` is in; None: the line does not say (read by ``provider``).
    sdk: str | None = None


@dataclass(frozen=True, slots=True)
class FactLine:
    line: int
    event: FactEvent


def printable(text: str, limit: int | None = None) -> str:
    r"""``text`` safe to print as part of one line: a backslash and every character that is not
    printable (newline, carriage return, ANSI escape, NUL, bidi control, lone surrogate) written
    as its Python escape, so an id read from a file can neither forge an output line nor fail to
    encode; cut at ``limit`` characters with ``…``.

    >>> print(printable("order-41\n\x1b[31mok"))
    order-41\n\x1b[31mok
    """
    if limit is not None and len(text) > limit:
        text = text[:limit] + "…"
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(ch if ch.isprintable() and ch != "\\" else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


class _DuplicateKey(ValueError):
    pass


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(f"duplicate key '{printable(key, 80)}'")
            seen.add(key)
    return record


def loads(text: str) -> Any:
    """``json.loads``, refusing what cannot be read or would be read ambiguously, with a
    one-line ``ValueError``: a duplicate key (JSON parsers disagree on which one wins, so the
    provider may have read another body than this one), nesting deeper than ``MAX_NESTING``
    levels (Python's own reader goes deeper on 3.13 than on 3.11: a line reads the same on every
    Python), an integer longer than Python converts. ``NaN`` and ``Infinity`` are read, as the
    SDKs' encoders write them."""
    if deeper_than(text):
        raise ValueError("not readable JSON (nested too deeply)")
    try:
        return json.loads(text, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno} column {exc.colno}"
        raise ValueError(f"not valid JSON ({exc.msg} at {where})") from None
    except _DuplicateKey as exc:
        raise ValueError(str(exc)) from None
    except RecursionError:
        raise ValueError("not readable JSON (nested too deeply)") from None
    except ValueError:  # int(): more digits than sys.get_int_max_str_digits() allows
        limit = getattr(sys, "get_int_max_str_digits", lambda: 4300)()
        raise ValueError(f"not readable JSON (an integer of more than {limit} digits)") from None


def _text_or_none(record: Mapping[str, Any], key: str, line: int) -> str | None:
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise CaptureError(line, f"{key!r} must be a string or null, got {type(value).__name__}")
    return value


def _fact_line(record: Mapping[str, Any], line: int) -> FactLine:
    fact = record["fact"]
    if not isinstance(fact, Mapping):
        raise CaptureError(line, "'fact' must be an object")
    conversation = _text_or_none(record, "conversation_id", line)
    if not conversation:
        raise CaptureError(line, "a fact line needs a conversation_id")
    fact_id, value, sequence = fact.get("id"), fact.get("value"), fact.get("sequence")
    if not isinstance(fact_id, str) or not fact_id.strip():
        raise CaptureError(line, "'fact.id' must be a non-empty string")
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise CaptureError(line, "'fact.value' must be a non-empty string, or null for a deletion")
    if sequence is not None and (not isinstance(sequence, int) or isinstance(sequence, bool)):
        raise CaptureError(line, "'fact.sequence' must be an integer")
    expires_at = None
    if fact.get("expires_at") is not None:
        if not isinstance(fact["expires_at"], str):
            raise CaptureError(line, "'fact.expires_at' must be an ISO-8601 timestamp string")
        written = fact["expires_at"]
        if written[-1:] in ("Z", "z"):  # UTC as JavaScript writes it, which fromisoformat reads only from 3.11
            written = written[:-1] + "+00:00"
        try:
            expires_at = datetime.fromisoformat(written)
        except ValueError:
            raise CaptureError(line, "'fact.expires_at' is not an ISO-8601 timestamp") from None
        if expires_at.tzinfo is None:
            raise CaptureError(line, "'fact.expires_at' needs a time zone")
    required = fact.get("required", True)
    if not isinstance(required, bool):
        raise CaptureError(line, "'fact.required' must be true or false")
    scope: Scope = (conversation, _text_or_none(record, "tenant", line))
    return FactLine(line, FactEvent(scope, fact_id, value, sequence, expires_at, required))


def _parse(raw: bytes, line: int, providers: frozenset[str]) -> RequestLine | FactLine | None:
    if b"\0" in raw:  # never in JSON text (a string escapes it as \u0000)
        raise CaptureError(line, "a NUL byte (is this a capture file?)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CaptureError(line, "not UTF-8 text (is this a capture file?)") from None
    if not text.strip():
        return None
    try:
        record = loads(text)
    except ValueError as exc:
        raise CaptureError(line, str(exc)) from None
    if not isinstance(record, dict):
        raise CaptureError(line, f"expected a JSON object, got {type(record).__name__}")
    if "fact" in record:
        return _fact_line(record, line)
    body = record.get("body")
    if not isinstance(body, dict):
        missing = body is None
        raise CaptureError(line, "missing 'body' (the request body object)" if missing else "'body' must be an object")
    provider = record.get("provider", "openai")
    if not isinstance(provider, str):
        raise CaptureError(line, f"'provider' must be a string, got {type(provider).__name__}")
    if provider not in providers:
        known = ", ".join(sorted(providers))
        raise CaptureError(line, f"unknown provider '{printable(provider, 80)}' (known: {known})")
    sdk = _text_or_none(record, "sdk", line)
    if sdk is not None and sdk not in SDKS:
        raise CaptureError(line, f"unknown sdk '{printable(sdk, 80)}' (known: {', '.join(sorted(SDKS))})")
    turn = record.get("turn")
    if turn is not None and (not isinstance(turn, int) or isinstance(turn, bool) or turn < 0):
        raise CaptureError(line, "'turn' must be a non-negative integer")
    conversation = _text_or_none(record, "conversation_id", line)
    if conversation == "":
        raise CaptureError(line, "'conversation_id' must be a non-empty string or null")
    return RequestLine(
        line=line,
        conversation_id=conversation,
        turn=turn if turn is not None else 0,
        provider=provider,
        body=body,
        ts=_text_or_none(record, "ts", line),
        tenant=_text_or_none(record, "tenant", line),
        model=_text_or_none(record, "model", line),
        sdk=sdk,
    )


def read_capture(
    source: IO[bytes], providers: frozenset[str], *, progress: Callable[[int], None] | None = None
) -> Iterator[RequestLine | FactLine]:
    """Yield the lines of a capture file, streaming; raise ``CaptureError`` naming a bad line.

    ``turn`` 0 means the line had none: the reader numbers such requests per
    conversation in file order. ``progress`` is called with the bytes read so far.
    """
    turns: dict[str | None, int] = {}
    number = 0
    done = 0
    while True:
        raw = source.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        done += len(raw)
        if len(raw) > MAX_LINE_BYTES:
            raise CaptureError(number, f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB")
        if progress is not None:
            progress(done)
        if number == 1 and raw.startswith(codecs.BOM_UTF8):  # an editor's byte order mark
            raw = raw[len(codecs.BOM_UTF8):]
        parsed = _parse(raw, number, providers)
        if parsed is None:
            continue
        if isinstance(parsed, RequestLine):
            seen = turns.get(parsed.conversation_id, 0)
            if parsed.turn == 0:
                parsed = dataclasses.replace(parsed, turn=seen + 1)
            turns[parsed.conversation_id] = max(seen, parsed.turn)
        yield parsed
