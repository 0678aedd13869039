"""Observing answers as they are read, without changing what the app gets.

Two mechanisms, one per kind of result:

- An SDK that hands the app an object holding the HTTP response (the Stainless SDKs,
  openai and anthropic: a ``Stream``, a ``with_raw_response`` / ``with_streaming_response``
  response) keeps its exact object: the response's byte stream is tapped instead
  (``tap_response``). The body is read as it passes (server-sent events fed to the
  provider's stream reader, or the JSON body at its end), whichever way the app reads it:
  iterating the stream, ``.parse()``, ``.read()``, ``.iter_lines()``. The call ends with
  the body (its last event, its end, an error), or when the response is closed or
  collected before that: the app abandoned it.
- Any other stream (google-genai's generators, LiteLLM's wrapper) is returned through a
  ``wrapt.ObjectProxy``, so ``isinstance`` and every attribute behave as before; only
  iteration and closing are observed. A proxy collected before its end ends the call too.
- A result that holds its answer still to be read (``Pending``: botocore's ``EventStream``
  in the result dict, the raw body beneath its ``StreamingBody``) has that part replaced by such
  a proxy (``observe_pending``), the rest of the result the SDK's own.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, MutableMapping
from time import perf_counter
from typing import Any

import wrapt

from .._isolation import guarded, report_internal_error
from ..payload import ANSWER_LIMIT, UNREAD, Answer
from ..providers.base import Pending, StreamReader
from .frames import transparent
from .inflight import IN_FLIGHT
from .protocol import Observed

__all__ = [
    "HTTP_RESULTS",
    "forget_http_results",
    "http_response_of",
    "observe_pending",
    "tap_response",
    "wrap_manager",
    "wrap_stream",
]

#: SDK result type -> the attribute holding its HTTP response (registered by ``providers``
#: when an SDK is patched, from each provider module's ``HTTP_RESULTS`` declaration).
HTTP_RESULTS: dict[type, str] = {}
#: Every result type seen, resolved once through its MRO (bounded: result types are few).
_resolved: dict[type, str | None] = {}


def forget_http_results() -> None:
    HTTP_RESULTS.clear()
    _resolved.clear()


def http_response_of(result: Any) -> Any | None:
    """The httpx / httpx2 ``Response`` inside ``result`` if it is one of the SDKs' HTTP-holding
    types (a stream, a raw response), else None. One dict look-up per call for a new answer."""
    cls = type(result)
    name = _resolved.get(cls, "") if HTTP_RESULTS else None
    if name == "":
        name = next((HTTP_RESULTS[base] for base in cls.__mro__ if base in HTTP_RESULTS), None)
        if len(_resolved) < 1024:
            _resolved[cls] = name
    return getattr(result, name, None) if name is not None else None


class _Events:
    """A server-sent event body, each event's JSON ``data`` fed to a provider's stream reader.
    ``complete`` once OpenAI's ``[DONE]`` or an error event arrives (the end of the body also
    completes it). However long the body, what is held is the event arriving and what the reader
    keeps (``AnswerText``); an event longer than ``ANSWER_LIMIT`` ends the reading, the answer so far
    ``unread``."""

    __slots__ = ("_buffer", "_data", "_held", "_reader", "complete", "unread")

    def __init__(self, reader: StreamReader) -> None:
        self._reader = reader
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._held = 0  # bytes of ``_data``'s objects and slots
        self.complete = False
        self.unread = False

    def feed(self, chunk: bytes) -> None:
        if self.unread:
            return
        buffer = self._buffer
        buffer += chunk
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buffer[start:end]).rstrip(b"\r")
            start = end + 1
            if not line:
                self._dispatch()
            elif line.startswith(b"data:"):
                data = line[6:] if line[5:6] == b" " else line[5:]
                self._data.append(data)
                self._held += sys.getsizeof(data) + 8
        del buffer[:start]
        if self._held + len(buffer) > ANSWER_LIMIT:
            self.unread = True
            self._buffer, self._data = bytearray(), []

    def _dispatch(self) -> None:
        data, self._data, self._held = b"\n".join(self._data), [], 0
        if not data:
            return
        if data.startswith(b"[DONE]"):
            self.complete = True
            return
        try:
            event = json.loads(data)
        except ValueError:
            return  # not JSON: not an event a reader knows
        self._reader.feed(event)
        if type(event) is dict and (event.get("type") == "error" or type(event.get("error")) is dict):
            self.complete = True  # the service failed midway (Anthropic, Responses, Chat): nothing follows

    def reply(self) -> Answer | None:
        if self.unread:
            reply = self._reader.reply()
            reply.text, reply.unread = "", UNREAD
            return reply
        self._dispatch()  # a last event without its blank line
        return self._reader.reply()


class _Document:
    """A JSON body, read once it has all arrived; one longer than ``ANSWER_LIMIT`` is not kept, its
    answer ``unread``."""

    __slots__ = ("_parts", "_read", "complete", "size")

    def __init__(self, read: Callable[[Any], Answer | None]) -> None:
        self._read = read
        self._parts: list[bytes] = []
        self.complete = False
        self.size = 0

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size <= ANSWER_LIMIT:
            self._parts.append(chunk)
        else:
            self._parts.clear()

    def reply(self) -> Answer | None:
        if self.size > ANSWER_LIMIT:
            return Answer(unread=UNREAD)
        if not self._parts:
            return None
        try:
            document = json.loads(b"".join(self._parts))
        except ValueError:
            return None  # not JSON: not an answer a provider module reads
        return self._read(document)


#: How a body that ended is settled: ``settle(reply, exc, early=..., streamed=...)``, where ``exc`` is
#: the transport's error and ``early`` means closed or collected before its end.
Settle = Callable[..., None]


class _Tap:
    """What both byte-stream taps share: feeding the body, and settling it once."""

    def _self_setup(
        self, inner: Any, call: Observed, body: _Events | _Document, streamed: bool, settle: Settle
    ) -> None:
        self.__dict__.update(_inner=inner, _call=call, _body=body, _streamed=streamed, _settle=settle, _ended=False)

    def __getattr__(self, name: str) -> Any:  # ``elapsed`` and whatever else the client reads off its stream
        inner = self.__dict__.get("_inner")
        if inner is None:
            raise AttributeError(name)
        return getattr(inner, name)

    def _self_chunk(self, chunk: bytes) -> None:
        call = self._call
        started = perf_counter()
        with guarded("stream"):
            self._body.feed(chunk)
        call.elapsed += perf_counter() - started
        if self._body.complete:
            self._self_end()

    def _self_end(self, exc: BaseException | None = None, *, early: bool = False) -> None:
        if self.__dict__.get("_ended", True):
            return
        self._ended = True
        reply = None
        if not early or self._streamed:  # what a stream said before it ended is its answer so far
            with guarded("stream"):
                reply = self._body.reply()
        self._settle(reply, exc, early=early, streamed=self._streamed)

    def __del__(self) -> None:
        try:
            self._self_end(early=True)
        except Exception as exc:  # pragma: no cover - a finaliser must not raise
            report_internal_error("stream", exc)


def _sync_tap(base: type) -> type:
    class SyncTap(_Tap, base):  # type: ignore[misc,valid-type]
        @transparent
        def __iter__(self) -> Any:
            try:
                for chunk in self._inner:
                    self._self_chunk(chunk)
                    yield chunk
            except GeneratorExit:
                raise
            except BaseException as exc:
                self._self_end(exc)
                raise
            self._self_end()

        @transparent
        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._self_end(early=True)

    return SyncTap


def _async_tap(base: type) -> type:
    class AsyncTap(_Tap, base):  # type: ignore[misc,valid-type]
        @transparent
        async def __aiter__(self) -> Any:
            try:
                async for chunk in self._inner:
                    self._self_chunk(chunk)
                    yield chunk
            except GeneratorExit:
                raise
            except BaseException as exc:
                self._self_end(exc)
                raise
            self._self_end()

        @transparent
        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                self._self_end(early=True)

    return AsyncTap


#: (httpx module name, asynchronous) -> tap class subclassing that module's byte stream
#: (httpx checks ``isinstance(response.stream, SyncByteStream)`` before iterating it).
_taps: dict[tuple[str, bool], type] = {}


def _tap_class(response: Any) -> type | None:
    http = sys.modules.get(type(response).__module__.partition(".")[0])
    stream = response.stream
    for asynchronous, base_name, make in ((False, "SyncByteStream", _sync_tap), (True, "AsyncByteStream", _async_tap)):
        base = getattr(http, base_name, None)
        if isinstance(base, type) and isinstance(stream, base):
            key = (http.__name__, asynchronous)  # type: ignore[union-attr]
            if key not in _taps:
                _taps[key] = make(base)
            return _taps[key]
    return None


def tap_response(
    response: Any,
    call: Observed,
    reader: StreamReader,
    read: Callable[[Any], Answer | None],
    settle: Settle | None = None,
) -> None:
    """Read ``response``'s body for ``call`` as it passes (``reader`` for events, ``read`` for a
    JSON document); a body already read is read now. ``settle`` (by default the call's own: the
    call ends with the body) is told the answer once the body ended."""
    settle = _ending(call) if settle is None else settle
    streamed = response.headers.get("content-type", "").startswith("text/event-stream")
    body: _Events | _Document = _Events(reader) if streamed else _Document(read)
    if response.is_stream_consumed:
        try:
            content = response.content
        except Exception:  # consumed without being kept (iterated raw): nothing left to read
            settle(None, None, early=False, streamed=streamed)
            return
        body.feed(content)
        settle(body.reply(), None, early=False, streamed=streamed)
        return
    cls = _tap_class(response)
    if cls is None:  # a transport stream of a kind we do not know: the body is not read
        settle(None, None, early=False, streamed=streamed)
        return
    tap = cls()
    tap._self_setup(response.stream, call, body, streamed, settle)
    response.stream = tap


def _ending(call: Observed) -> Settle:
    """How a body that ended ends ``call``: in a transport error, before its end, or complete."""

    def settle(reply: Answer | None, exc: BaseException | None, *, early: bool, streamed: bool) -> None:
        if exc is not None:
            call.failed(exc, reply)
        elif early:
            call.ended_early(reply, streamed=streamed)
        else:
            call.answer(reply)

    return settle


def _feed(call: Observed, reader: StreamReader, chunk: Any) -> None:
    started = perf_counter()
    with guarded("stream"):
        reader.feed(chunk)
    call.elapsed += perf_counter() - started


class _Observed(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    def __init__(self, wrapped: Any, call: Observed, reader: StreamReader) -> None:
        super().__init__(wrapped)
        self._self_call = call
        self._self_reader = reader
        self._self_done = False

    def _self_finish(self, exc: BaseException | None = None, *, early: bool = False) -> None:
        if self._self_done:
            return
        self._self_done = True
        call = self._self_call
        if exc is not None:
            call.failed(exc)
            return
        reply = None
        with guarded("stream"):
            reply = self._self_reader.reply()
        if early:
            call.ended_early(reply, streamed=True)
        else:
            call.answer(reply)

    def _self_exited(self, exc: tuple[Any, ...]) -> None:
        """Leaving ``with stream:``: an exception inside the block ended it in error; else the
        stream was left before its end unless it was read to the end."""
        error = exc[1] if len(exc) > 1 and isinstance(exc[1], BaseException) else None
        if error is not None:
            self._self_finish(error)
        else:
            self._self_finish(early=True)

    def __del__(self) -> None:
        try:
            if not getattr(self, "_self_done", True):
                self._self_finish(early=True)
        except Exception as exc:  # pragma: no cover - a finaliser must not raise
            report_internal_error("stream", exc)


class _SyncStream(_Observed):
    def __iter__(self) -> _SyncStream:
        return self

    @transparent
    def __next__(self) -> Any:
        # A generator (google-genai) sends its request on the first chunk: until the
        # transport has seen the body, the call stays in flight.
        call = self._self_call
        token = IN_FLIGHT.set(call) if call.wire_hash is None else None
        try:
            chunk = self.__wrapped__.__next__()
        except StopIteration:
            self._self_finish()
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        finally:
            if token is not None:
                IN_FLIGHT.reset(token)
        _feed(call, self._self_reader, chunk)
        return chunk

    @transparent
    def __enter__(self) -> _SyncStream:
        self.__wrapped__.__enter__()
        return self

    @transparent
    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(*exc)
        finally:
            self._self_exited(exc)

    @transparent
    def close(self) -> Any:
        try:
            return self.__wrapped__.close()
        finally:
            self._self_finish(early=True)


class _AsyncStream(_Observed):
    def __aiter__(self) -> _AsyncStream:
        return self

    @transparent
    async def __anext__(self) -> Any:
        call = self._self_call
        token = IN_FLIGHT.set(call) if call.wire_hash is None else None
        try:
            chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_finish()
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        finally:
            if token is not None:
                IN_FLIGHT.reset(token)
        _feed(call, self._self_reader, chunk)
        return chunk

    @transparent
    async def __aenter__(self) -> _AsyncStream:
        await self.__wrapped__.__aenter__()
        return self

    @transparent
    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc)
        finally:
            self._self_exited(exc)

    @transparent
    async def close(self) -> Any:
        try:
            return await self.__wrapped__.close()
        finally:
            self._self_finish(early=True)


class _AsyncClosable(_AsyncStream):
    """A stream closed with ``aclose`` (an async generator: cohere's ``chat_stream``); only such
    streams get the method, so the proxy has it exactly when the stream has it."""

    @transparent
    async def aclose(self) -> Any:
        try:
            return await self.__wrapped__.aclose()
        finally:
            self._self_finish(early=True)


class _Manager(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """A stream helper's context manager (``messages.stream(...)``): the request is sent on
    enter (with the call in flight, so its body is judged); the answer is read from the
    helper's own accumulated snapshot on exit."""

    def __init__(self, wrapped: Any, call: Observed, final: Callable[[Any], Answer | None]) -> None:
        super().__init__(wrapped)
        self._self_call = call
        self._self_final = final
        self._self_stream: Any = None
        self._self_done = False

    def _self_finish(self, exc: BaseException | None) -> None:
        if self._self_done:
            return
        self._self_done = True
        if exc is not None:
            self._self_call.failed(exc)
            return
        reply = None
        with guarded("stream"):
            if self._self_stream is not None:
                reply = self._self_final(self._self_stream)
        if reply is None or not reply.finish_reasons:  # left before the message's end: abandoned
            self._self_call.ended_early(reply, streamed=True)
        else:
            self._self_call.answer(reply)

    @transparent
    def __enter__(self) -> Any:
        token = IN_FLIGHT.set(self._self_call)  # the request leaves here: its body is judged
        try:
            self._self_stream = self.__wrapped__.__enter__()
        except BaseException as exc:
            self._self_finish(exc)
            raise
        finally:
            IN_FLIGHT.reset(token)
        return self._self_stream

    @transparent
    def __exit__(self, *exc: Any) -> Any:
        try:
            return self.__wrapped__.__exit__(*exc)
        finally:
            self._self_finish(exc[1] if len(exc) > 1 and isinstance(exc[1], BaseException) else None)

    @transparent
    async def __aenter__(self) -> Any:
        token = IN_FLIGHT.set(self._self_call)
        try:
            self._self_stream = await self.__wrapped__.__aenter__()
        except BaseException as exc:
            self._self_finish(exc)
            raise
        finally:
            IN_FLIGHT.reset(token)
        return self._self_stream

    @transparent
    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self.__wrapped__.__aexit__(*exc)
        finally:
            self._self_finish(exc[1] if len(exc) > 1 and isinstance(exc[1], BaseException) else None)


def wrap_manager(manager: Any, call: Observed, final: Callable[[Any], Answer | None]) -> Any:
    return _Manager(manager, call, final)


def wrap_stream(stream: Any, call: Observed, reader: StreamReader, *, asynchronous: bool) -> Any:
    # Some streams iterate both ways (LiteLLM's CustomStreamWrapper): the call site decides.
    cls = type(stream)
    if hasattr(cls, "__anext__") and (asynchronous or not hasattr(cls, "__next__")):
        return (_AsyncClosable if hasattr(cls, "aclose") else _AsyncStream)(stream, call, reader)
    return _SyncStream(stream, call, reader)


class _SyncEvents(_Observed):
    """An iterable of events that is not an iterator (botocore's ``EventStream``: ``__iter__``,
    no ``__next__``): each event fed as the app's loop takes it, the events the SDK's own."""

    @transparent
    def __iter__(self) -> Any:
        call, reader = self._self_call, self._self_reader
        try:
            for event in self.__wrapped__:
                _feed(call, reader, event)
                yield event
        except GeneratorExit:  # the app's loop was left; it may iterate again, or drop the stream
            raise
        except BaseException as exc:
            self._self_finish(exc)
            raise
        self._self_finish()

    @transparent
    def close(self) -> Any:
        try:
            return self.__wrapped__.close()
        finally:
            self._self_finish(early=True)


class _Body(wrapt.ObjectProxy):  # type: ignore[misc,type-arg]
    """A raw body the SDK's reader reads (beneath botocore's ``StreamingBody``, whose ``read``,
    ``readinto``, iteration and ``with`` all come down to it): what passes is kept, and the answer
    read once the body has all passed (a read of everything, an empty read, nothing left)."""

    def __init__(self, wrapped: Any, call: Observed, body: _Document) -> None:
        super().__init__(wrapped)
        self._self_call = call
        self._self_body = body
        self._self_done = False

    def _self_fed(self, data: Any, *, ended: bool) -> None:
        call = self._self_call
        started = perf_counter()
        with guarded("stream"):
            if data:
                self._self_body.feed(bytes(data))
        call.elapsed += perf_counter() - started
        if ended or getattr(self.__wrapped__, "length_remaining", None) == 0:
            self._self_end()

    def _self_end(self, exc: BaseException | None = None, *, early: bool = False) -> None:
        if self._self_done:
            return
        self._self_done = True
        call = self._self_call
        if exc is not None:
            call.failed(exc)
        elif early:
            call.ended_early(None, streamed=False)
        else:
            reply = None
            with guarded("stream"):
                reply = self._self_body.reply()
            call.answer(reply)

    @transparent
    def read(self, *args: Any, **kwargs: Any) -> Any:
        try:
            data = self.__wrapped__.read(*args, **kwargs)
        except BaseException as exc:
            self._self_end(exc)
            raise
        amount = args[0] if args else kwargs.get("amt")
        self._self_fed(data, ended=amount is None or not data)
        return data

    @transparent
    def readinto(self, buffer: Any) -> Any:
        try:
            count = self.__wrapped__.readinto(buffer)
        except BaseException as exc:
            self._self_end(exc)
            raise
        self._self_fed(memoryview(buffer)[:count], ended=count == 0)
        return count

    @transparent
    def close(self) -> Any:
        try:
            return self.__wrapped__.close()
        finally:
            self._self_end(early=True)

    def __del__(self) -> None:
        try:
            if not getattr(self, "_self_done", True):
                self._self_end(early=True)
        except Exception as exc:  # pragma: no cover - a finaliser must not raise
            report_internal_error("stream", exc)


def observe_pending(pending: Pending, call: Observed, reader: StreamReader) -> None:
    """Replace the part of a result that holds its answer (``Pending``) by a proxy that observes it."""
    holder, name = pending.holder, pending.name
    mapping = isinstance(holder, MutableMapping)
    inner = holder[name] if mapping else getattr(holder, name)
    if pending.kind == "events":
        proxy: Any = _SyncEvents(inner, call, reader)
    else:
        proxy = _Body(inner, call, _Document(pending.read or (lambda document: None)))
    if mapping:
        holder[name] = proxy
    else:
        setattr(holder, name, proxy)
