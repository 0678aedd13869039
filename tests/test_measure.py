"""Measuring a request (ctxguard/measure.py): a growing conversation counts only its new messages."""

from __future__ import annotations

from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.payload import RequestView
from ctxguard.tokens import REPLY_PRIMING, Calibration, EstimateCounter


class CountingCounter(EstimateCounter):
    def __init__(self) -> None:
        self.calls = 0

    def count(self, text: str) -> int:
        self.calls += 1
        return super().count(text)


def test_growing_conversation_counts_only_new_messages():
    counter = CountingCounter()
    measurer = Measurer(Digester(b"k"), counter, Calibration())
    items = [("system", "sys", (), "message", 0)]
    for turn in range(50):
        items = [*items, ("user", f"message {turn}", (), "message", 0)]
        before = counter.calls
        payload = measurer.measure(RequestView("openai", "chat", "gpt-4o", items))
        assert counter.calls - before == (2 if turn == 0 else 1)
        assert payload.tokens == sum(m.tokens for m in payload.messages) + REPLY_PRIMING
