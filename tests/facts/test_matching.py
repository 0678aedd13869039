"""How a value is recognised in text (ctxguard/facts/matching.py): grouped numbers in any grouping,
and what is never read as one. The checks that use it are tested end to end in test_fact_checks.py."""

from __future__ import annotations

import itertools
import random
import unicodedata

import pytest

from ctxguard.facts import matching
from ctxguard.facts.matching import LARGE_TEXT, Chunked, match_key, normalise, number_key, numbers

FULL_WIDTH = "".join(chr(0xFF10 + int(ch)) if ch.isdigit() else ch for ch in "06 12 34 56 78")
FAMILIES = {
    "phone": ["+33612345678", "+33 6 12 34 56 78", "+33.6.12.34.56.78", "+33-6-12-34-56-78", "+33 6 12  34 56 78"],
    "national": ["0612345678", "06 12 34 56 78", "06.12.34.56.78", "06-12-34-56-78", FULL_WIDTH],
    "us": ["(415) 555-0132", "(415)555-0132", "415-555-0132", "415.555.0132", "415 555 0132", "4155550132"],
    "india": ["+91 98200 12345", "+919820012345", "+91-98200-12345"],
    "iban": ["FR76 3000 6000 0112 3456 7890 189", "FR7630006000011234567890189", "fr76 3000 6000 0112 3456 7890 189"],
    "iban_letters": ["GB29 NWBK 6016 1331 9268 19", "GB29NWBK60161331926819", "gb29nwbk60161331926819"],
    "card": ["4111 1111 1111 1111", "4111-1111-1111-1111", "4111111111111111", "4111.1111.1111.1111"],
    "account": ["1234567", "123 4567", "12-34-567"],
}


@pytest.mark.parametrize(("recorded", "written"), [
    pair for forms in FAMILIES.values() for pair in itertools.permutations(forms, 2)])
def test_a_grouped_number_is_found_whatever_grouping_either_side_uses(recorded: str, written: str):
    key = number_key(recorded)
    assert key is not None
    assert key in numbers(f"Hello, it is {written}.\nThanks") and key in numbers(written)
    assert match_key(recorded) == match_key(written)


@pytest.mark.parametrize("value", [
    "2026-12-03", "03.12.2026", "2026.12.03", "03-12-2026",  # dates: years, months and days are not one number
    "2026", "12 34 56", "123456", "+1 234",  # fewer than 7 digits
    "ACC-7731-0042", "Flat 14, 221B Baker Street", "tel 0612345678",  # text around digits: matched as written
    "1.234.567,89", "06 12 34 56 78.", "x0612345678",
])
def test_what_is_not_a_grouped_number(value: str):
    assert number_key(value) is None
    assert match_key(value) == normalise(value)


@pytest.mark.parametrize(("number", "text"), [
    ("0612345678", "ref 106 12 34 56 78"),  # inside a longer number
    ("0612345678", "ref 06 12 34 56 789"),
    ("0612345678", "06 12 34 56 78 9"),
    ("0612345678", "x06 12 34 56 78"),  # the end of a word
    ("0612345678", "06 12 34 56 78x"),
    ("0612345678", "ACC-06-12-34-56-78"),  # the end of an identifier
    ("20261203", "on 2026-12-03"), ("03122026", "on 03.12.2026"),  # dates
    ("1234567", "1.234.567,89 EUR"), ("1234567", "0,1234567"), ("1234567", "1234567,5"),  # decimals
    ("1234567", "1,234,567"),  # a comma never groups
    ("0612345678", "06 - 12 - 34 - 56 - 78"),  # a dash with spaces is not a grouping
    ("0612345678", "06\n12 34 56 78"),  # nor a line break
    ("0612345678", "06   12 34 56 78"),  # nor three spaces (a table's columns)
])
def test_a_number_is_not_found_where_its_digits_are_part_of_something_else(number: str, text: str):
    assert number not in numbers(text)


def test_a_date_is_not_swallowed_by_the_number_before_or_after_it():
    assert numbers("call 06 12 34 56 78 2026-12-03 14:30") == {"0612345678"}
    assert numbers("2026-12-03 06 12 34 56 78") == {"0612345678"}


def test_a_run_of_digit_groups_longer_than_any_number_is_none():
    assert numbers(" ".join(["1234"] * 12)) == frozenset()  # 59 characters: a list, not one number


def test_the_numbers_of_a_large_text_are_those_of_the_whole_text():
    filler = "lorem ipsum dolor 12 34 sit amet, " * (LARGE_TEXT // 30)
    text = filler + "call 06 12 34 56 78 now " + filler + "IBAN FR76 3000 6000 0112 3456 7890 189"
    large = Chunked(text)
    assert large.has_number("0612345678") and large.has_number("fr7630006000011234567890189")
    assert not large.has_number("1234567") and not large.has_number("06123456")
    cut = Chunked(text.replace("06 12 34 56 78", "06 12 34 56 78 9"))
    assert not cut.has_number("0612345678")


def _read_whole(text: str) -> frozenset[str]:
    """``numbers`` without its shortcuts: every run the number pattern matches, read."""
    return frozenset(found for _, _, found in matching._numbers_in(unicodedata.normalize("NFKC", text)))


def test_the_shortcut_past_texts_without_a_number_loses_no_number():
    # Texts built of what numbers are made of (digit groups, separators, parentheses, letters that
    # begin an IBAN) around and between every family's forms: the shortcut's answer is the whole read's.
    rng = random.Random(43)
    pieces = [*(form for forms in FAMILIES.values() for form in forms), "A-01234", "c17", "FR7", "(4", "12 34",
              "2026-12-03", " ", "-", ".", "(", ")", "ab", "GB", "7", "123456", "x",
              "XK05 ABCD EF12 GH34 IJ56"]  # an IBAN with no seven characters of a chain
    found = 0
    for _ in range(3_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 6)))
        assert numbers(text) == _read_whole(text), text
        found += bool(numbers(text))
    assert found > 500  # the generated texts hold numbers, not only near misses


def test_a_message_with_digits_but_no_number_start_is_not_read(monkeypatch):
    # An order number, a turn and a conversation's number: seven digits, none of them a number's start.
    text = "about order A-01234: where is it? (turn 3 of conversation c17)"
    monkeypatch.setattr(matching, "_numbers_in", lambda *args: pytest.fail("read"))
    assert numbers(text) == frozenset()
