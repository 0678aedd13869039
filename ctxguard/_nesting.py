"""How deep JSON text nests, read off the text before any parser recurses into it.

Python's own JSON reader gives up at a depth that depends on the version (a little under 1,000
levels on 3.10 and 3.11, 1,500 on 3.12, 10,000 on 3.13), and what it returns is then walked by
recursive code that stops near 1,000 on all of them. A reader that must answer the same on every
Python refuses what nests deeper than a fixed bound first (``MAX_NESTING``), below all of these.
"""

from __future__ import annotations

import re

__all__ = ["MAX_NESTING", "deeper_than"]

#: Levels of arrays and objects a reader of untrusted JSON accepts: far beyond any request body
#: (a tool's schema nests tens deep), far below where any Python's reader or walkers give up.
MAX_NESTING = 500

# A JSON string (its brackets are text, not structure); then what is left that is not a bracket.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def deeper_than(text: str, limit: int = MAX_NESTING) -> bool:
    """Whether the arrays and objects of JSON ``text`` nest more than ``limit`` levels deep.

    >>> deeper_than('[{"a": "[[[["}]', 2), deeper_than("[[[1]]]", 2)
    (False, True)
    """
    if text.count("[") + text.count("{") <= limit:  # most texts: too few brackets to nest that deep
        return False
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            return True
    return False
