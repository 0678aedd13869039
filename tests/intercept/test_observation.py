"""The observation of a call's answer (ctxguard/intercept/observation.py) and its carriers
(carriers.py), alone: whatever happens to the stream, the call ends exactly once, with what the
answer said, and nothing raises into the app."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pytest

from ctxguard.intercept.carriers import stream_proxy
from ctxguard.intercept.observation import Observation
from ctxguard.payload import Answer, AnswerText


class Reader:
    """A stream reader as the providers write them: text pieces, a finish reason at the end."""

    def __init__(self) -> None:
        self._text = AnswerText()
        self._reply = Answer()

    def feed(self, chunk: Any) -> None:
        if chunk == "<end>":
            self._reply.finish_reasons = ["stop"]
        else:
            self._text.add(chunk)

    def reply(self) -> Answer:
        return self._text.fill(self._reply)


class Call:
    """The sink: records every end it is told of."""

    def __init__(self) -> None:
        self.elapsed = 0.0
        self.first_chunk: float | None = None
        self.ends: list[tuple[str, str | None, BaseException | None]] = []
        self.wire_hash: str | None = "sent"

    def end(self, how: str, reply: Answer | None = None, *, error: BaseException | None = None,
            status: int | None = None) -> None:
        self.ends.append((how, reply.text if reply is not None else None, error))


def test_the_first_end_wins_and_later_feeds_are_ignored():
    call = Call()
    seen = Observation(call, Reader())
    seen.feed("Ly")
    seen.feed("on")
    seen.end("complete")
    seen.feed("Paris")
    seen.end("abandoned")
    seen.end("failed", error=RuntimeError("late"))
    assert call.ends == [("complete", "Lyon", None)]
    assert call.elapsed > 0


def test_a_reader_that_fails_is_counted_and_the_answer_is_unknown(internal_errors):
    class Broken(Reader):
        def reply(self) -> Answer:
            raise ValueError("broken reader")

    call = Call()
    seen = Observation(call, Broken())
    seen.feed("Lyon")
    seen.end("complete")
    assert call.ends == [("complete", None, None)]
    assert [(where, str(exc)) for where, exc in internal_errors] == [("stream", "broken reader")]
    internal_errors.clear()


def test_two_threads_racing_to_end_it_end_it_once():
    for _ in range(200):
        call = Call()
        seen = Observation(call, Reader())
        barrier = threading.Barrier(2)

        def end(how: str, seen: Observation = seen, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            seen.end(how)  # type: ignore[arg-type]

        threads = [threading.Thread(target=end, args=(how,)) for how in ("complete", "abandoned")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(call.ends) == 1


def _chunks(*pieces: str, then: BaseException | None = None) -> Any:
    yield from pieces
    if then is not None:
        raise then


def test_an_exception_mid_iteration_ends_it_failed_with_what_was_said():
    call = Call()
    error = ConnectionError("cut")
    stream = stream_proxy(_chunks("Ly", "on", then=error), call, Reader(), asynchronous=False)
    with pytest.raises(ConnectionError) as raised:
        for _ in stream:
            pass
    assert raised.value is error  # the app gets the SDK's own exception
    assert call.ends == [("failed", "Lyon", error)]


def test_keyboard_interrupt_mid_iteration_ends_it_once_and_propagates():
    call = Call()
    stream = stream_proxy(_chunks("Ly", then=KeyboardInterrupt()), call, Reader(), asynchronous=False)
    with pytest.raises(KeyboardInterrupt):
        list(stream)
    assert [how for how, _, _ in call.ends] == ["failed"]


def test_read_to_its_end_it_completes_and_close_after_changes_nothing():
    call = Call()
    stream = stream_proxy(_chunks("Ly", "on", "<end>"), call, Reader(), asynchronous=False)
    assert list(stream) == ["Ly", "on", "<end>"]
    stream.close()
    assert call.ends == [("complete", "Lyon", None)]


def test_closed_before_its_end_it_is_abandoned_with_what_it_said():
    call = Call()
    stream = stream_proxy(_chunks("Ly", "on", "<end>"), call, Reader(), asynchronous=False)
    assert next(stream) == "Ly"
    stream.close()
    assert call.ends == [("abandoned", "Ly", None)]


def test_a_half_read_stream_collected_is_abandoned():
    call = Call()
    stream = stream_proxy(_chunks("Ly", "on"), call, Reader(), asynchronous=False)
    next(stream)
    del stream
    gc.collect()
    assert call.ends == [("abandoned", "Ly", None)]


def test_a_cancelled_task_reading_an_async_stream_ends_it_failed_and_is_cancelled():
    call = Call()

    async def chunks() -> Any:
        yield "Ly"
        await asyncio.sleep(10)
        yield "on"

    async def read() -> None:
        async for _ in stream_proxy(chunks(), call, Reader(), asynchronous=True):
            pass

    async def main() -> None:
        task = asyncio.create_task(read())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [(how, text) for how, text, _ in call.ends] == [("failed", "Ly")]
    assert isinstance(call.ends[0][2], asyncio.CancelledError)


def test_the_proxy_is_the_stream_to_the_app():
    class SDKStream:
        def __init__(self) -> None:
            self.response = "the SDK's"
            self._it = iter(["Lyon"])

        def __iter__(self) -> Any:
            return self

        def __next__(self) -> str:
            return next(self._it)

    call = Call()
    original = SDKStream()
    stream = stream_proxy(original, call, Reader(), asynchronous=False)
    assert isinstance(stream, SDKStream) and stream.response == "the SDK's"
    assert list(stream) == ["Lyon"]
