"""The fenced code blocks of README.md and docs/*.md, with the snippet marker before each (the
convention is in docs/testing.md, "Snippets in these docs"). Not tests: ``test_docs.py`` runs
the blocks, and a test that mirrors one reads it from here (``block``)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*$")
_MARKER = re.compile(r"^[ \t]*<!-- snippet: (?P<marker>.+?) -->[ \t]*$")
_HEADING = re.compile(r"^#+ (?P<title>.+)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text (dedented), and its marker."""

    path: Path
    line: int  # of the opening fence, 1-based
    section: str  # the nearest heading above it
    lang: str
    text: str
    marker: str | None  # what the ``<!-- snippet: ... -->`` line right above the fence says

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    section = ""
    i = 0
    while i < len(lines):
        heading = _HEADING.match(lines[i])
        if heading:
            section = heading["title"]
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent = fence["indent"]
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"
                   and lines[j].startswith(indent))
        marker = _MARKER.match(lines[i - 1]) if i else None
        text = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
        found.append(Block(path, i + 1, section, fence["lang"], text, marker["marker"] if marker else None))
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in DOCS for b in blocks(path)]


def block(doc: str, section: str, lang: str, nth: int = 0) -> Block:
    """The ``nth`` block of language ``lang`` under the heading ``section`` of ``doc`` (``docs/budget.md``)."""
    found = [b for b in blocks(ROOT / doc) if b.section == section and b.lang == lang]
    return found[nth]
