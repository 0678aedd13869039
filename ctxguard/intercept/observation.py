"""One observation of a call's answer: fed as the answer arrives, ended exactly once.

Whatever carries the answer (the bytes of an HTTP response, an SDK's stream of objects, a stream
helper's snapshot, a raw body the SDK reads), it comes down to two events, and this is the one
place that handles them:

- ``feed(chunk)``: a piece of the answer arrived (bytes, or an SDK's chunk object); it goes to
  the reader, timed into the call's own time. Ignored once the observation has ended.
- ``end(how, error=...)``: the answer ended. ``how`` is ``"complete"`` (its last piece arrived),
  ``"failed"`` (the transport or the SDK raised ``error``), ``"abandoned"`` (the app closed or
  dropped it before its end) or ``"refused"`` (the server answered with an HTTP error status).
  The first end wins; later ones, from another carrier or another thread, do nothing.

Neither raises into the app: a reader that fails is counted (``where="stream"``) and the answer
is then unknown. The carriers (``intercept.carriers``) are thin adapters that turn their own
events (a chunk iterated, ``StopIteration``, ``close()``, ``__exit__``, collection) into these two.

>>> from ctxguard.payload import Answer
>>> class Reader:
...     def feed(self, chunk): self.said = chunk
...     def reply(self): return Answer(text=self.said)
>>> class Call:
...     elapsed, first_chunk = 0.0, None
...     def end(self, how, reply=None, *, error=None, status=None): print(how, reply.text)
>>> seen = Observation(Call(), Reader())
>>> seen.feed("Lyon")
>>> seen.end("complete")
complete Lyon
>>> seen.end("abandoned")  # the first end won
"""

from __future__ import annotations

import threading
from time import perf_counter
from typing import Any, Literal, Protocol

from .._isolation import report_internal_error
from ..payload import Answer

__all__ = ["How", "Observation", "Reader", "Sink"]

#: How an answer ended.
How = Literal["complete", "failed", "abandoned", "refused"]


class Reader(Protocol):
    """Reads an answer piece by piece (a provider's stream reader, a body decoder)."""

    def feed(self, chunk: Any) -> None: ...

    def reply(self) -> Answer | None: ...


class Sink(Protocol):
    """Where an observation's end goes: the call (``ctxguard.call.Call``)."""

    elapsed: float
    #: perf_counter() when the answer's first piece arrived (set here, once).
    first_chunk: float | None

    def end(
        self, how: How, reply: Answer | None = None, *, error: BaseException | None = None, status: int | None = None
    ) -> None: ...


class Observation:
    """See the module docstring. ``complete``: set by a reader that knows its answer is whole before
    the transport ends (a server-sent ``[DONE]``, an error event): the observation then ends at once."""

    __slots__ = ("_once", "_reader", "ended", "sink")

    def __init__(self, sink: Sink, reader: Reader) -> None:
        self.sink = sink
        self._reader = reader
        # Acquired by the first end and never released: exactly once, whichever thread gets there.
        self._once = threading.Lock()
        self.ended = False

    def feed(self, chunk: Any) -> None:
        """A piece of the answer arrived (never raises)."""
        if self.ended:
            return
        started = perf_counter()
        sink = self.sink
        if sink.first_chunk is None:
            sink.first_chunk = started
        reader = self._reader
        try:
            reader.feed(chunk)
        except Exception as exc:
            report_internal_error("stream", exc)
        sink.elapsed += perf_counter() - started
        if getattr(reader, "complete", False):
            self.end("complete")

    def end(self, how: How, *, error: BaseException | None = None, status: int | None = None) -> None:
        """The answer ended (never raises; only the first end counts)."""
        if not self._once.acquire(blocking=False):
            return
        self.ended = True
        reply = None
        if how != "refused":
            try:
                reply = self._reader.reply()
            except Exception as exc:
                report_internal_error("stream", exc)
        try:
            self.sink.end(how, reply, error=error, status=status)
        except Exception as exc:  # the sink is ctxguard's own: counted, never raised
            report_internal_error("telemetry", exc)
