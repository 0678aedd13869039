"""How a fact value is recognised in text: normalised substring search, and grouped numbers.

Both sides are normalised the same way (Unicode NFKC, case-folded, whitespace
collapsed), so "Pune", "PUNE" and "pune " match and a full-width digit matches
its ASCII twin. Values shorter than ``MIN_MATCH_CHARS`` after normalisation are
never matched: "No" or "5" would be found everywhere, and a guard that cries
wolf is switched off.

A value that is a grouped number (a phone, card or account number, an IBAN: digit groups
joined by spaces, dots or dashes) is also found written in any other grouping: "06 12 34 56
78", "06.12.34.56.78" and "0612345678" are one number. A text's numbers are read whole
(``numbers``), so a number is never found inside a longer one, and dates, decimals and
short numbers are never read as one (``number_key``).
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal
from typing import Any

__all__ = [
    "LARGE_TEXT", "MIN_MATCH_CHARS", "NUMBER_MAX_CHARS", "NUMBER_MIN_DIGITS", "SEPARATOR", "Chunked", "distinctive",
    "match_key", "normalise", "number_key", "numbers", "searchable", "strings_in", "value_text", "written",
]

MIN_MATCH_CHARS = 3
#: Joins the texts of separate messages: no value can match across a boundary.
SEPARATOR = "\x00"


def normalise(text: str) -> str:
    """Text as fact values are matched in it: NFKC (ligatures and full-width forms spelt
    out), case-folded, every run of whitespace one space.

    >>> normalise("Ship to  ZÜRICH,\\tﬁle A-1041")
    'ship to zürich, file a-1041'
    """
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


#: A grouped number has at least this many digits: fewer would make years, prices and counts
#: numbers that other conversations' values could be confused with.
NUMBER_MIN_DIGITS = 7
#: ... and at most this many characters as written (the longest IBAN, 34 characters, in groups
#: of four is 42): a longer run of digit groups (a table row, a list of codes) is not one number.
NUMBER_MAX_CHARS = 48

# What a grouped number is, read on NFKC text before case folding (so that an IBAN's bank code is
# told from a word by its capitals). A date (2026-12-03, 03.12.2026) is read first and is never a
# number, nor part of one; a chain of digit groups never runs into a date.
_DATE = (r"(?:[0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{4}\.[0-9]{2}\.[0-9]{2}|[0-9]{2}-[0-9]{2}-[0-9]{4}"
         r"|[0-9]{2}\.[0-9]{2}\.[0-9]{4})(?![-.]?[0-9])")
_GROUP = r"(?:\([0-9]+\)|[0-9]+)"  # "(415)": an area code in parentheses is a group
# Between groups: one or two spaces, a dot or a dash; nothing next to a parenthesis: "(415)555".
_GAP = r"(?: {1,2}|[.\-]|(?<=\))|(?=\())"
# Every match starts with a digit or "(" (an IBAN at its check digits, its letters behind it), so
# that the regex engine skips the rest of a text at once. What follows that first character:
_DATE_REST = (r"(?<=[0-9])(?:[0-9]{3}-[0-9]{2}-[0-9]{2}|[0-9]{3}\.[0-9]{2}\.[0-9]{2}|[0-9]-[0-9]{2}-[0-9]{4}"
              r"|[0-9]\.[0-9]{2}\.[0-9]{4})(?![-.]?[0-9])")
# An IBAN: country and check digits, then groups of four (a bank code of four capitals may come
# first: GB29 NWBK ...), the last group shorter; or the same without spaces.
_IBAN_REST = (r"(?<=[A-Za-z]{2}[0-9])[0-9](?: [A-Z]{4})?(?: (?=[A-Z]{0,3}[0-9])[0-9A-Z]{4})+"
              r"(?: (?=[A-Z]{0,2}[0-9])[0-9A-Z]{1,3})?|(?<=[A-Za-z]{2}[0-9])[0-9][0-9A-Za-z]{11,30}")
# A chain of fewer than 7 characters cannot hold 7 digits: not matched at all, which spares reading
# every short number of a text (matched or not, a run is read the same way: see ``_numbers_in``).
_CHAIN_REST = (rf"(?<=[0-9(])(?=[0-9() .\-]{{{NUMBER_MIN_DIGITS - 1}}})(?:(?<=\()[0-9]+\)|(?<=[0-9])[0-9]*)"
               rf"(?:{_GAP}(?!{_DATE}){_GROUP})*")
_NUMBER = re.compile(rf"[0-9(](?:(?P<date>{_DATE_REST})|(?P<iban>{_IBAN_REST})|{_CHAIN_REST})")
_ANY_DIGIT = re.compile(r"\d")
#: A text of fewer digits than a grouped number has holds none (most chat messages).
_ENOUGH_DIGITS = re.compile(rf"(?:[^0-9]*[0-9]){{{NUMBER_MIN_DIGITS}}}")
#: Nor does a text without the first seven characters of a chain (a digit or "(", then digits,
#: parentheses, spaces, dots or dashes: ``_CHAIN_REST``'s look-ahead) or an IBAN's country and check
#: digits (``_IBAN_REST``'s look-behind): a message whose digits are an order number and a turn count
#: is not read by ``_NUMBER``. Written to start with one character set, which the engine skips to.
_MAY_HOLD = re.compile(rf"[0-9(](?:[0-9() .\-]{{{NUMBER_MIN_DIGITS - 1}}}|(?<=[A-Za-z]{{2}}[0-9])[0-9])")
_NOT_ALNUM = re.compile(r"[^0-9A-Za-z]")


def _numbers_in(text: str, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, str]]:
    """(start, end, digits and letters, lower-cased) of each grouped number of an NFKC ``text`` lying
    within ``[start, end)``. Every run the pattern matches is read, whole, whether or not it is a
    number: what follows it is then read as in any other text it is part of (``Chunked``)."""
    stop = len(text) if end is None else end
    for m in _NUMBER.finditer(text):
        kind = m.lastgroup
        if kind == "date":
            continue
        at, to = m.span()
        if kind == "iban":
            at -= 2  # its country code, before the check digits the match starts at
        if not NUMBER_MIN_DIGITS <= to - at <= NUMBER_MAX_CHARS or at < start or to > stop:
            continue
        # As itself: not the end or the start of a word ("x0612345678"), of an identifier
        # ("ACC-7731-0042"), or of a decimal number ("0,1234567"; "1.234.567,89" is a price).
        if _joined(text[max(0, at - 2) : at][::-1]) or _joined(text[to : to + 2]):
            continue
        found = _NOT_ALNUM.sub("", text[at:to]).lower()
        if kind == "iban":
            if not 15 <= len(found) <= 34 or sum(ch.isdigit() for ch in found) < NUMBER_MIN_DIGITS:
                continue
        elif len(found) < NUMBER_MIN_DIGITS:  # a chain is digits only
            continue
        yield at, to, found


def _joined(beside: str) -> bool:
    """Whether the characters beside a number (nearest first) make it part of something longer."""
    if not beside:
        return False
    near, far = beside[0], beside[1:2]
    return (near.isalnum() or near == "_" or (near in ".," and far.isdigit())
            or (near in ".-" and (far.isalnum() or far == "_")))


def numbers(text: str) -> frozenset[str]:
    """The grouped numbers of ``text``, each as its digits (and an IBAN's letters), lower-cased:
    what a value's ``number_key`` is looked for in.

    >>> sorted(numbers("Call +33 6 12 34 56 78 or 06.12.34.56.78, not on 2026-12-03"))
    ['0612345678', '33612345678']
    """
    if not _ANY_DIGIT.search(text):
        return frozenset()
    text = unicodedata.normalize("NFKC", text)
    if not _ENOUGH_DIGITS.match(text) or not _MAY_HOLD.search(text):
        return frozenset()
    return frozenset(found for _, _, found in _numbers_in(text))


def number_key(value: str) -> str | None:
    """The grouped number ``value`` is, as ``numbers`` reads it in a text; None when it is not one
    (a leading ``+`` is allowed; a date, a short or decimal number, or text around it is not).

    >>> number_key("+33 6 12 34 56 78"), number_key("FR76 3000 6000 0112 3456 7890 189")
    ('33612345678', 'fr7630006000011234567890189')
    >>> number_key("2026-12-03"), number_key("12 34 56"), number_key("ACC-7731-0042")
    (None, None, None)
    """
    if len(value) > _NUMBER_VALUE_CHARS and len(value.strip()) > _NUMBER_VALUE_CHARS:
        return None  # too long to be one (and not worth remembering)
    return _number_key(value) if _ANY_DIGIT.search(value) else None


#: A value of more characters than this is never a grouped number (its leading "+" aside).
_NUMBER_VALUE_CHARS = NUMBER_MAX_CHARS + 1


# A fact's value is read again on every call whose ledger is reduced afresh (RedisLedger): its
# number is remembered, for short values only, so 8,192 of them take about 1 MiB.
@functools.lru_cache(maxsize=8_192)
def _number_key(value: str) -> str | None:
    text = unicodedata.normalize("NFKC", value).strip()
    text = text[1:] if text.startswith("+") else text
    found = list(_numbers_in(text))
    if len(found) == 1 and found[0][:2] == (0, len(text)):
        return found[0][2]
    return None


def written(norm_text: str, key: str) -> str:
    """How the grouped number ``key`` is written in a normalised text (its leading ``+`` included),
    for a message that stays in the process; ``key`` itself if it is not written there as one."""
    for at, to, found in _numbers_in(norm_text):
        if found == key:
            return norm_text[at - 1 : to] if at and norm_text[at - 1] == "+" else norm_text[at:to]
    return key


def match_key(value: str) -> str:
    """How a value is matched: its number, if it is a grouped number, else its normalised text."""
    return number_key(value) or normalise(value)


def distinctive(norm: str) -> bool:
    """Only values unlikely to be typed independently count as leaks (no false alarms on "pune"):
    8 characters or more, or a digit."""
    return len(norm) >= 8 or any(ch.isdigit() for ch in norm)


#: Texts longer than this (characters) are never normalised whole, which would copy them three
#: times over and cost seconds at 100 MB: they are searched a chunk at a time (``Chunked``).
LARGE_TEXT = 1 << 20
_CHUNK = 1 << 20
_OVERLAP = 4_096  # a match spanning a chunk boundary is found if it spans at most this much text
# How far from a cut a chunk may read a number otherwise than the whole text does: a run of digit
# groups cut in two, or a date cut short. The overlap holds a number and both edges.
_EDGE = 16


class Chunked:
    """A text too large to normalise whole, searched a chunk at a time in bounded memory:
    ``value in Chunked(text)`` is ``value in normalise(text)`` for any normalised value whose
    match spans at most 4 KiB of the text, and ``has_number(key)`` is ``key in numbers(text)``.
    An ASCII chunk is only lower-cased (NFKC and case folding do nothing else to ASCII), and a
    value's spaces match any run of whitespace, as normalising would have collapsed it; other
    chunks are normalised. A number is taken only from where its chunk reads it as the whole
    text does: not within ``_EDGE`` characters of a cut, which the chunks' overlap covers.
    Results are kept."""

    __slots__ = ("_known", "_numbers", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self._known: dict[str, bool] = {}
        self._numbers: dict[str, bool] = {}

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        known = self._known.get(value)
        if known is None:
            self.search((value,))
            known = self._known[value]
        return known

    def has_number(self, key: str) -> bool:
        """Whether the text holds the grouped number ``key`` (a ``number_key``)."""
        known = self._numbers.get(key)
        if known is None:
            self.search((), (key,))
            known = self._numbers[key]
        return known

    def search(self, values: Iterable[str], keys: Iterable[str] = ()) -> None:
        """Look for every one of ``values`` and of the grouped numbers ``keys`` in one pass over the
        text (each then known)."""
        pending = [v for v in dict.fromkeys(values) if v not in self._known]
        wanted = {k for k in keys if k not in self._numbers}
        if not pending and not wanted:
            return
        spaced = {v: re.compile(r"\s+".join(map(re.escape, v.split(" ")))) for v in pending if " " in v}
        found: set[str] = set()
        numbers_found: set[str] = set()
        text = self.text
        for start in range(0, len(text), _CHUNK):
            begin, end = max(0, start - _OVERLAP), start + _CHUNK
            piece = text[begin:end]
            if piece.isascii():
                hay = piece.lower()
                found.update(v for v in pending if v not in found and (
                    spaced[v].search(hay) is not None if v in spaced else v in hay))
            else:
                hay = normalise(piece)
                found.update(v for v in pending if v not in found and v in hay)
                if wanted:
                    piece = unicodedata.normalize("NFKC", piece)
            if wanted and any(digit in piece for digit in "0123456789"):  # memchr: no regex over prose
                stop = len(piece) if end >= len(text) else len(piece) - _EDGE
                within = _numbers_in(piece, _EDGE if begin else 0, stop)
                numbers_found.update(key for _, _, key in within if key in wanted)
            if len(found) == len(pending) and len(numbers_found) == len(wanted):
                break
        for v in pending:
            self._known[v] = v in found
        for key in wanted:
            self._numbers[key] = key in numbers_found


def searchable(text: str) -> str | Chunked:
    """``text`` normalised for fact matching, or ``Chunked`` when it is too large for that."""
    return Chunked(text) if len(text) > LARGE_TEXT else normalise(text)


def value_text(value: object) -> str:
    """A fact value as text, deterministically (numbers, dates, booleans included)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    raise TypeError(f"fact values must be str, int, float, Decimal, bool or a date/time, not {type(value).__name__}")


def strings_in(content: Any) -> str:
    """Every string inside a checkpoint's content (text, message list, dict), joined."""
    parts: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, str):
            parts.append(node)
        elif isinstance(node, Mapping):
            for item in node.values():
                walk(item)
        elif isinstance(node, (list, tuple)):
            for item in node:
                walk(item)
        else:
            content = getattr(node, "content", None)
            if content is not None:
                walk(content)

    walk(content)
    return SEPARATOR.join(parts)
