"""``AnswerText``: a streamed answer's text, held within ``ANSWER_LIMIT`` bytes of memory."""

from __future__ import annotations

import pytest

from ctxguard import payload
from ctxguard.payload import UNREAD, Answer, AnswerText
from tests.conftest import traced

LIMIT = 64 * 1024


@pytest.fixture
def small_limit(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(payload, "ANSWER_LIMIT", LIMIT)
    return LIMIT


def _tokens(count: int) -> list[str]:
    """Pieces as a model streams them: a token or so each, some not ASCII, some line ends."""
    return [("Ünïcode " if i % 7 == 0 else "line\r\n" if i % 11 == 0 else f"tok{i} ") for i in range(count)]


def test_the_text_is_the_pieces_joined_in_order() -> None:
    pieces = ["", "😀", *_tokens(1000), ""]  # more than one joined run, and a rest
    text = AnswerText()
    for piece in pieces:
        text.add(piece)
    answer = text.fill(Answer(id="chatcmpl-1"))
    assert answer.text == "".join(pieces)
    assert (answer.unread, answer.id) == (None, "chatcmpl-1")


def test_past_the_limit_no_text_is_kept_and_the_answer_says_why(small_limit: int) -> None:
    text = AnswerText()
    for piece in _tokens(20_000):  # some 200 KB of text
        text.add(piece)
    text.add("more")
    answer = text.fill(Answer(input_tokens=12, output_tokens=20_000))
    assert (answer.text, answer.unread) == ("", UNREAD)
    assert (answer.input_tokens, answer.output_tokens) == (12, 20_000)  # the rest of the answer is its own


def test_a_character_costs_what_python_holds_for_it(small_limit: int) -> None:
    """A string holds 1, 2 or 4 bytes a character: 20,000 characters fit in 64 KiB unless each takes 4."""
    narrow, wide = AnswerText(), AnswerText()
    for _ in range(1000):
        narrow.add("é" * 20)
        wide.add("😀" * 20)
    assert narrow.fill(Answer()).unread is None
    assert wide.fill(Answer()).unread == UNREAD


def test_what_it_holds_stays_within_the_limit_however_long_the_stream(small_limit: int) -> None:
    """80,000 one-token pieces, each dropped by the app once added (the issue's Ollama stream): what
    is still alive never passes the limit by more than a list's slack."""
    text = AnswerText()
    peak = 0
    with traced() as retained:
        for i in range(80_000):
            text.add(f"tok{i} ")
            if i % 10_000 == 0:
                peak = max(peak, retained())
        peak = max(peak, retained())
    assert peak < small_limit + 8 * 1024
    assert text.fill(Answer()).unread == UNREAD


def test_a_long_answer_of_small_pieces_costs_about_its_text() -> None:
    """A piece alone costs some 60 bytes beside its characters; joined, 80,000 tokens cost little more
    than their text."""
    text = AnswerText()
    size = 0
    with traced() as retained:
        for i in range(80_000):
            piece = f"tok{i} "  # the SDK's, dropped by the app: only the text holds it
            text.add(piece)
            size += len(piece)
        del piece
        held = retained()
    assert held < 1.2 * size
    assert text.fill(Answer()).unread is None
