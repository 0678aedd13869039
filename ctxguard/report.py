"""The fact-survival report: one self-contained HTML page per capture (``ctxguard report``).

For each conversation: a grid of facts by turns (``leaked``, ``stale``, ``missing``,
``present``, ``deleted``, ``unjudged``), the head role and the failed checks of each turn, and an
inline SVG chart of payload tokens per turn against the budget line. Flip points,
the turns where something goes wrong, are highlighted and carry ``data-flip="true"``.
No script, no network: inline CSS and SVG only.

Privacy: the page names facts by id and never shows their values, nor any message
content or violation detail (which may quote a value). A capture holds raw content
and stays on the machine that wrote it; a report is meant to be passed around, so
whoever needs the values reads them in the capture itself.

Bounded: the first ``MAX_CONVERSATIONS`` conversations and their first ``MAX_TURNS``
turns are drawn; the summary counts everything and says what was left out.

>>> report = Report()                                  # doctest: +SKIP
>>> for line, result in Checker().judge(lines): report.add(line, result)  # doctest: +SKIP
>>> page = report.render("capture.jsonl")              # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

from .capture import RequestLine, printable
from .offline import FACT_STATUSES, NO_CONVERSATION, TurnResult, conversation_line
from .payload import SYSTEM_ROLES

__all__ = ["MAX_CONVERSATIONS", "MAX_TURNS", "Report"]

MAX_CONVERSATIONS = 500
MAX_TURNS = 1000


#: Statuses that mean a fact went wrong in that turn.
_BAD = frozenset({"leaked", "stale", "missing"})

#: The letter shown in a grid cell; the word is in its ``title`` and ``data-status``.
_LETTER = {status: status[0].upper() for status in FACT_STATUSES}

_CHART_HEIGHT = 160
_BAR = 24  # px per turn in the chart


@dataclass
class _Reported:
    name: str
    requests: int = 0
    unread: int = 0  # requests not read offline
    first: TurnResult | None = None
    drawn: bool = False
    #: (turn, result) of the drawn turns; result None: a body the provider module cannot read
    columns: list[tuple[int, TurnResult | None]] = field(default_factory=list)


class Report:
    """Collects the results of one capture, in file order, then renders the page."""

    def __init__(self, max_conversations: int = MAX_CONVERSATIONS, max_turns: int = MAX_TURNS) -> None:
        self.max_conversations = max_conversations
        self.max_turns = max_turns
        self.requests = 0
        self.conversations: dict[str | None, _Reported] = {}

    def add(self, line: RequestLine, result: TurnResult | None) -> None:
        self.requests += 1
        seen = self.conversations.get(line.conversation_id)
        if seen is None:
            cid = line.conversation_id
            name = printable(cid) if cid is not None else NO_CONVERSATION
            seen = _Reported(name, drawn=len(self.conversations) < self.max_conversations)
            self.conversations[line.conversation_id] = seen
        seen.requests += 1
        if result is None:
            seen.unread += 1
        elif result.failed and seen.first is None:
            seen.first = result
        if seen.drawn and len(seen.columns) < self.max_turns:
            seen.columns.append((line.turn, result))

    @property
    def violating(self) -> int:
        return sum(1 for c in self.conversations.values() if c.first is not None)

    @property
    def not_judged(self) -> int:
        """Conversations without a violation of which a request was not read offline."""
        return sum(1 for c in self.conversations.values() if c.first is None and c.unread)

    def render(self, source: str) -> str:
        source = printable(source)
        drawn = [c for c in self.conversations.values() if c.drawn]
        sections = "\n".join(_section(index, c) for index, c in enumerate(drawn))
        return (
            "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>ctxguard report: {escape(source)}</title><style>{_CSS}</style></head>\n<body>\n"
            f"{self._summary(source, drawn)}\n{_LEGEND}\n{sections}\n</body></html>\n"
        )

    def _summary(self, source: str, drawn: list[_Reported]) -> str:
        left_out = len(self.conversations) - len(drawn)
        lines = [
            f"<li data-conversation='{escape(c.name)}' class='{_verdict(c)}'>"
            + escape(conversation_line(c.name, c.first, c.requests, c.unread)) + "</li>"
            for c in drawn
        ]
        note = ""
        if left_out:
            hidden = [_verdict(c) for c in self.conversations.values() if not c.drawn]
            unjudged = hidden.count("not-judged")
            note = (f"<p class='left-out' data-left-out='{left_out}'>{left_out} more conversations left out "
                    f"(the first {len(drawn)} are shown); {hidden.count('violation')} of them with violations"
                    f"{f', {unjudged} not judged' if unjudged else ''}.</p>")
        return (
            f"<header id='summary'><h1>ctxguard report: {escape(source)}</h1>\n<dl>"
            f"<dt>conversations</dt><dd data-summary='conversations'>{len(self.conversations)}</dd>"
            f"<dt>requests</dt><dd data-summary='requests'>{self.requests}</dd>"
            f"<dt>with violations</dt><dd data-summary='violating'>{self.violating}</dd>"
            f"<dt>not judged</dt><dd data-summary='not-judged'>{self.not_judged}</dd></dl>\n{note}"
            f"<ul class='first-violations'>{''.join(lines)}</ul></header>"
        )


def _turns(n: int) -> str:
    return f"{n} turn{'' if n == 1 else 's'}"


def _verdict(conv: _Reported) -> str:
    """``violation``, ``not-judged`` (a request of it not read offline, nothing failed) or ``ok``."""
    return "violation" if conv.first else "not-judged" if conv.unread else "ok"


def _section(index: int, conv: _Reported) -> str:
    hidden = conv.requests - len(conv.columns)
    more = ""
    if hidden:
        more = f"<p class='left-out'>{_turns(hidden)} after the first {len(conv.columns)} not shown.</p>"
    status = "no violations"
    if conv.first or conv.unread:
        status = escape(conversation_line(conv.name, conv.first, conv.requests, conv.unread))
    return (
        f"<section class='conversation' id='c{index}' data-conversation='{escape(conv.name)}' "
        f"data-verdict='{_verdict(conv)}'><h2>{escape(conv.name)}</h2><p class='status'>{status}</p>{more}\n"
        f"{_grid(conv)}\n{_chart(conv)}</section>"
    )


def _flip(flipped: bool) -> str:
    return " data-flip='true'" if flipped else ""


def _grid(conv: _Reported) -> str:
    first_turn = conv.first.turn if conv.first else None
    unread = " class='unread' title='not judged offline (its body format is not read offline)'"
    header = "".join(
        f"<th data-turn='{turn}'{_flip(turn == first_turn)}{unread if r is None else ''}>{turn}</th>"
        for turn, r in conv.columns
    )
    rows = [f"<tr><th class='label'>turn</th>{header}</tr>", _head_row(conv), _checks_row(conv)]
    fact_ids = list(dict.fromkeys(f for _, r in conv.columns if r is not None for f in r.facts))
    rows.extend(_fact_row(conv, fact_id) for fact_id in fact_ids)
    return f"<table class='grid'>{''.join(rows)}</table>"


def _head_row(conv: _Reported) -> str:
    cells, before = [], None
    for turn, r in conv.columns:
        head = printable(r.head_role) if r is not None and r.head_role is not None else None
        kind = "none" if head is None else "system" if head in SYSTEM_ROLES else "other"
        flip = _flip(before in SYSTEM_ROLES and head not in SYSTEM_ROLES and r is not None)
        cells.append(f"<td class='head {kind}' data-turn='{turn}' data-head='{escape(head or '')}'{flip} "
                     f"title='turn {turn}: head {escape(head or 'unknown')}'>{escape(head or '-')}</td>")
        before = head
    return f"<tr class='heads'><th class='label'>head role</th>{''.join(cells)}</tr>"


def _checks_row(conv: _Reported) -> str:
    cells = []
    for turn, r in conv.columns:
        failed = r.failed if r is not None else []
        names = escape(", ".join(failed))
        cells.append(f"<td class='checks{' failed' if failed else ''}' data-turn='{turn}' "
                     f"data-failed='{escape(' '.join(failed))}' title='{names or 'all checks pass'}'>"
                     f"{len(failed) or ''}</td>")
    return f"<tr class='failed-checks'><th class='label'>failed checks</th>{''.join(cells)}</tr>"


def _fact_row(conv: _Reported, fact_id: str) -> str:
    fid = escape(printable(fact_id))
    cells, before = [], None
    for turn, r in conv.columns:
        status = r.facts.get(fact_id) if r is not None else None
        word = status or "none"
        cells.append(f"<td class='fact {word}' data-fact='{fid}' data-turn='{turn}' data-status='{word}'"
                     f"{_flip(status in _BAD and status != before)} title='{fid}, turn {turn}: {word}'>"
                     f"{_LETTER.get(word, '')}</td>")
        before = status
    return f"<tr class='fact-row' data-fact='{fid}'><th class='label'>{fid}</th>{''.join(cells)}</tr>"


def _chart(conv: _Reported) -> str:
    """Tokens per turn as bars, the budget line as steps; bars over the line are red."""
    measured = [(i, turn, r) for i, (turn, r) in enumerate(conv.columns) if r is not None]
    limits = [r.input_limit for _, _, r in measured if r.input_limit is not None]
    peak = max([1, *(r.tokens for _, _, r in measured)])
    # A payload far below its window would be an invisible bar under a line at the top:
    # the line is drawn only when it is within 4x of the peak, else the caption says where it is.
    drawn = bool(limits) and max(limits) <= 4 * peak
    top = max(peak, max(limits) if drawn else 0) * 11 // 10 + 1
    width = max(1, len(conv.columns)) * _BAR + 140

    def y(tokens: int) -> float:
        return round(10 + _CHART_HEIGHT * (1 - tokens / top), 1)

    parts = [f"<text x='{i * _BAR + _BAR // 2}' y='{_CHART_HEIGHT + 24}' text-anchor='middle'>{turn}</text>"
             for i, (turn, _) in enumerate(conv.columns)]
    for i, turn, r in measured:
        over = r.input_limit is not None and r.tokens > r.input_limit
        limit = "" if r.input_limit is None else str(r.input_limit)
        parts.append(f"<rect class='tokens{' over' if over else ''}' x='{i * _BAR + 2}' y='{y(r.tokens)}' "
                     f"width='{_BAR - 4}' height='{round(_CHART_HEIGHT + 10 - y(r.tokens), 1)}' data-turn='{turn}' "
                     f"data-tokens='{r.tokens}' data-limit='{limit}' data-over='{str(over).lower()}'>"
                     f"<title>turn {turn}: {r.tokens} tokens, budget line {limit or 'unknown'}</title></rect>")
        if r.input_limit is not None and drawn:
            parts.append(f"<line class='budget' x1='{i * _BAR}' x2='{(i + 1) * _BAR}' y1='{y(r.input_limit)}' "
                         f"y2='{y(r.input_limit)}' data-turn='{turn}' data-limit='{r.input_limit}'/>")
    right = len(conv.columns) * _BAR + 6
    if drawn:
        parts.append(f"<text x='{right}' y='{y(limits[-1]) + 4}'>budget {limits[-1]:,}</text>")
    if not limits:
        note = "<p class='note'>budget line unknown: no window for this model (set [budget] window)</p>"
    elif not drawn:
        note = (f"<p class='note' data-off-scale='{limits[-1]}'>budget line at {limits[-1]:,} tokens, above the "
                f"chart: the largest payload used {peak / limits[-1]:.2%} of it</p>")
    else:
        note = ""
    return (
        "<figure class='chart'><figcaption>payload tokens per turn (bars) against the budget line "
        f"(dashed: window minus reservations); chart height {top:,} tokens</figcaption>\n"
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{_CHART_HEIGHT + 30}' role='img'>"
        f"<line class='axis' x1='0' x2='{right - 6}' y1='{_CHART_HEIGHT + 10}' y2='{_CHART_HEIGHT + 10}'/>"
        f"{''.join(parts)}</svg>{note}</figure>"
    )


_LEGEND = (
    "<p class='legend'>"
    + " ".join(f"<span class='fact {s}'>{_LETTER[s]}</span> {s}" for s in FACT_STATUSES)
    + " &nbsp; <span data-flip='true'>⚑</span> flip point: the turn a fact, the head or the checks went wrong"
    + "</p>"
)

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.4em}h2{font-size:1.15em;margin:1.6em 0 .2em}
dl{display:flex;gap:.4em 1.2em;flex-wrap:wrap}dt{font-weight:600}dd{margin:0 1em 0 0}
ul.first-violations li.violation{color:#a40000}ul.first-violations li.not-judged{color:#7a4b00}
.left-out{color:#7a4b00;font-style:italic}
table.grid{border-collapse:collapse;margin:.4em 0}
table.grid th,table.grid td{border:1px solid #ccc;min-width:1.6em;height:1.5em;text-align:center;font-size:12px;
padding:0 2px}
table.grid th.label{text-align:left;padding-right:.6em;white-space:nowrap;font-weight:600}
.fact.present{background:#4caf50;color:#fff}.fact.stale{background:#ffb300}.fact.missing{background:#9e9e9e;color:#fff}
.fact.leaked{background:#d32f2f;color:#fff}.fact.deleted{background:#e3f2fd;color:#555}.fact.none{background:#fafafa}
.fact.unjudged{background:#fff;color:#555;border-style:dashed}
.head.system{background:#c8e6c9}.head.other{background:#ffcdd2;font-weight:600}.head.none{background:#eee}
.checks.failed{background:#ffebee;color:#b71c1c;font-weight:600}
th.unread{background:#eee;color:#888}
[data-flip="true"]{outline:3px solid #7b1fa2;outline-offset:-3px}
th[data-flip="true"]{background:#7b1fa2;color:#fff}
th[data-flip="true"]::after,td[data-flip="true"]::after{content:"⚑";font-size:9px;vertical-align:super}
.legend span{display:inline-block;min-width:1.4em;text-align:center;border:1px solid #ccc}
figure.chart{margin:.6em 0}figcaption{font-size:12px;color:#555}
svg rect.tokens{fill:#1976d2}svg rect.tokens.over{fill:#e65100}
svg line.axis{stroke:#999}
svg line.budget{stroke:#111;stroke-width:2;stroke-dasharray:4 2}svg text{font-size:10px;fill:#555}
.note{font-size:12px;color:#7a4b00}
"""
