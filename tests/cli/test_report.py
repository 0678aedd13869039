"""``ctxguard report``: the page a user opens, rendered by a real browser (headless Chromium).

Chromium is skipped when absent, unless ``CTXGUARD_REQUIRE_CHROMIUM=1`` as root (the
test command sets it after installing the Debian package); the HTML itself is also
checked without a browser.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ctxguard.capture import read_capture
from ctxguard.cli import main
from ctxguard.offline import CAPTURED_PROVIDERS, Checker
from ctxguard.report import Report

REQUIRE_CHROMIUM = os.environ.get("CTXGUARD_REQUIRE_CHROMIUM") == "1" and os.geteuid() == 0
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")
WINDOW = (1000, 900)

SYSTEM = {"role": "system", "content": "You are the order assistant. Always confirm the shipping address."}
FIRST = {"role": "user", "content": "Ship to Lyon, coupon SAVE2024X, card note Happy birthday Marie, call 0612345678"}
#: Values recorded as facts: the page must never show them.
VALUES = ("Lyon", "Paris", "SAVE2024X", "Happy birthday Marie", "0612345678")
ODD_ID = "<b>\"x\"&'y'</b>"
POLICY = "[budget]\nwindow = 200\nreserved_output = 50\n"  # the budget line: 150 tokens


def request(cid: str, turn: int, *messages: dict[str, str]) -> dict[str, Any]:
    return {"conversation_id": cid, "turn": turn, "provider": "openai",
            "body": {"model": "gpt-4o", "messages": list(messages)}}


def fact(cid: str, fact_id: str, value: str | None) -> dict[str, Any]:
    return {"conversation_id": cid, "fact": {"id": fact_id, "value": value}}


def scenario() -> list[dict[str, Any]]:
    """order-41: all present at turn 1; turn 2 sends the corrected city's old value (stale) and a
    forgotten coupon (leaked); turn 3 evicts the system prompt, drops the card note (missing) and
    goes over the budget line. A second conversation with an id that needs escaping."""
    cid = "order-41"
    return [
        fact(cid, "shipping_city", "Lyon"), fact(cid, "coupon_code", "SAVE2024X"),
        fact(cid, "gift_note", "Happy birthday Marie"), fact(cid, "phone", "0612345678"),
        request(cid, 1, SYSTEM, FIRST),
        request(ODD_ID, 1, SYSTEM, {"role": "user", "content": "hello"}),
        fact(cid, "shipping_city", "Paris"), fact(cid, "coupon_code", None),
        request(cid, 2, SYSTEM, FIRST, {"role": "user", "content": "Actually, Paris."}),
        request(cid, 3, {"role": "user", "content": "Paris, coupon SAVE2024X, call 0612345678. " + "more " * 400}),
    ]


def write_capture(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The scenario's report, written by the real CLI entry point in-process."""
    capture = write_capture(tmp_path / "capture.jsonl", scenario())
    (tmp_path / "policy.toml").write_text(POLICY)
    out = tmp_path / "report.html"
    assert main(["report", str(capture), "-o", str(out), "--policy", str(tmp_path / "policy.toml")]) == 0
    assert capsys.readouterr().out == f"wrote {out} (2 conversations, 4 requests)\n"
    return out


# -- reading the page ---------------------------------------------------------------


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))
        self.inside = True

    def handle_endtag(self, tag: str) -> None:
        self.inside = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.inside:  # the text between a start tag and the next tag, as "#text"
            attrs = self.elements[-1][1]
            attrs["#text"] = attrs.get("#text", "") + data


def parse(html: str) -> _Elements:
    parser = _Elements()
    parser.feed(html)
    return parser


def one(doc: _Elements, tag: str, **attrs: str) -> dict[str, str]:
    wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
    found = [a for t, a in doc.elements if t == tag and all(a.get(k) == v for k, v in wanted.items())]
    assert len(found) == 1, f"{len(found)} <{tag}> with {wanted}"
    return found[0]


def assert_page(html: str) -> None:
    """The promises of the page, as its DOM shows them."""
    doc = parse(html)
    text = " ".join(doc.text)
    summary = {key: one(doc, "dd", data_summary=key)["#text"] for key in ("conversations", "requests", "violating")}
    assert summary == {"conversations": "2", "requests": "4", "violating": "1"}
    assert "order-41: first violation at turn 2: fact_forgotten" in text
    assert f"{ODD_ID}: ok (1 turn)" in text

    grid = {(a["data-fact"], a["data-turn"]): a for t, a in doc.elements if t == "td" and "data-status" in a}
    statuses = {key: a["data-status"] for key, a in grid.items() if key[0] != ""}
    assert statuses == {
        ("shipping_city", "1"): "present", ("shipping_city", "2"): "stale", ("shipping_city", "3"): "present",
        ("coupon_code", "1"): "present", ("coupon_code", "2"): "leaked", ("coupon_code", "3"): "leaked",
        ("gift_note", "1"): "present", ("gift_note", "2"): "present", ("gift_note", "3"): "missing",
        ("phone", "1"): "present", ("phone", "2"): "present", ("phone", "3"): "present",
    }
    flips = {key for key, a in grid.items() if a.get("data-flip") == "true"}
    assert flips == {("shipping_city", "2"), ("coupon_code", "2"), ("gift_note", "3")}
    assert "stale" in grid["shipping_city", "2"]["class"].split()

    heads = [a for t, a in doc.elements if t == "td" and "data-head" in a]
    assert [(a["data-head"], a.get("data-flip")) for a in heads] == [
        ("system", None), ("system", None), ("user", "true"),  # order-41: the system prompt evicted at turn 3
        ("system", None),
    ]
    assert "other" in heads[2]["class"].split() and "system" in heads[0]["class"].split()
    assert one(doc, "th", data_turn="2", data_flip="true") is not None  # order-41's first violation
    failed = one(doc, "td", data_turn="3", data_failed="system_at_head payload_under_budget fact_present "
                                                      "fact_forgotten")
    assert "failed" in failed["class"].split()

    bars = [a for t, a in doc.elements if t == "rect"]
    assert [(a["data-turn"], a["data-over"], a["data-limit"]) for a in bars] == [
        ("1", "false", "150"), ("2", "false", "150"), ("3", "true", "150"), ("1", "false", "150")]
    assert int(bars[2]["data-tokens"]) > 150 > int(bars[1]["data-tokens"])
    assert {a["data-limit"] for t, a in doc.elements if t == "line" and "budget" in a.get("class", "")} == {"150"}

    sections = [a["data-conversation"] for t, a in doc.elements if t == "section"]
    assert sections == ["order-41", ODD_ID]  # the odd id is an attribute value, never markup
    assert "b" not in {t for t, _ in doc.elements}
    assert not {"script", "link", "img", "iframe"} & {t for t, _ in doc.elements}  # self-contained
    for value in VALUES:
        assert value not in html, f"fact value {value!r} in the report"


def test_page_content_without_a_browser(page: Path) -> None:
    assert_page(page.read_text(encoding="utf-8"))


def test_cells_appear_in_the_order_they_are_read(page: Path) -> None:
    doc = parse(page.read_text(encoding="utf-8"))
    rows = [a["data-fact"] for t, a in doc.elements if t == "tr" and "data-fact" in a]
    assert rows == ["shipping_city", "coupon_code", "gift_note", "phone"]


# -- in a real browser -----------------------------------------------------------------


def chromium_binary() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found is None:
        reason = "chromium not installed (Debian package chromium): the report is not rendered in a browser"
        if REQUIRE_CHROMIUM:
            pytest.fail(f"{reason} (CTXGUARD_REQUIRE_CHROMIUM=1, running as root)")
        pytest.skip(reason)
    return found


def run_chromium(tmp_path: Path, *args: str, timeout: float = 60) -> str:
    """Headless Chromium with a fresh profile; killed (its process group) on timeout."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    cmd = [chromium_binary(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {timeout}s")
    assert proc.returncode == 0, err[-2000:]
    return out


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the RGB(A) rows of a non-interlaced 8-bit PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        header = chunk if kind == b"IHDR" else header
        idat += chunk if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, interlace) == (8, 0) and colour in (2, 6)
    step = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * step
    rows: list[bytes] = []
    prior = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - step] if x >= step else 0
            b, c = prior[x], prior[x - step] if x >= step else 0
            if kind == 1:
                line[x] = (line[x] + a) & 0xFF
            elif kind == 2:
                line[x] = (line[x] + b) & 0xFF
            elif kind == 3:
                line[x] = (line[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prior = line
    return width, height, [bytes(r[i:i + 3]) for r in rows for i in range(0, stride, step)]


def test_chromium_renders_the_expected_cells(page: Path, tmp_path: Path) -> None:
    dom = run_chromium(tmp_path, "--dump-dom", page.as_uri())
    assert_page(dom)


def test_chromium_screenshot_shows_the_grid_and_chart(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    run_chromium(tmp_path, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri())
    width, height, pixels = png_pixels(shot.read_bytes())
    assert (width, height) == WINDOW
    colours = set(pixels)
    assert len(colours) > 20, "a near-blank screenshot"
    white = sum(1 for p in pixels if p == b"\xff\xff\xff")
    assert white < 0.97 * len(pixels)
    counts = {name: pixels.count(bytes.fromhex(rgb)) for name, rgb in {
        "present": "4caf50", "stale": "ffb300", "missing": "9e9e9e", "leaked": "d32f2f",
        "flip highlight": "7b1fa2", "tokens bar": "1976d2", "bar over the budget line": "e65100"}.items()}
    assert all(n >= 100 for n in counts.values()), counts  # each drawn, not a stray anti-aliased pixel


# -- the command line --------------------------------------------------------------------


def test_the_installed_script_writes_the_report(tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "capture.jsonl", scenario())
    script = Path(sys.executable).parent / "ctxguard"
    out = subprocess.run([str(script), "report", str(capture), "-o", str(tmp_path / "r.html")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"wrote {tmp_path / 'r.html'} (2 conversations, 4 requests)\n"
    assert "order-41: first violation at turn 2" in (tmp_path / "r.html").read_text(encoding="utf-8")


GOOD = json.dumps(request("c", 1, SYSTEM)).encode() + b"\n"


@pytest.mark.parametrize(("content", "named"), [
    (GOOD + b"{not json\n", "line 2: not valid JSON"),
    (GOOD + GOOD.replace(b'"openai"', b'"mistral"'), "line 2: unknown provider 'mistral'"),
    (GOOD + b"\x89PNG\r\n\x1a\n\x00\xff\xfe garbage\n", "line 2: not UTF-8 text"),
    (GOOD + json.dumps(fact("c", "city", "")).encode() + b"\n", "line 2: 'fact.value' must be"),
    (b"\n", "no request lines"),
])
def test_unreadable_input_exits_2_naming_the_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, named: str
) -> None:
    capture = tmp_path / "bad.jsonl"
    capture.write_bytes(content)
    out = tmp_path / "out" / "report.html"
    out.parent.mkdir()
    out.write_text("the previous report")
    assert main(["report", str(capture), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ctxguard: {capture}: ") and named in err and "Traceback" not in err
    assert out.read_text() == "the previous report"
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.html"]


def test_unwritable_output_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = write_capture(tmp_path / "capture.jsonl", scenario())
    assert main(["report", str(capture), "-o", str(tmp_path / "missing-dir" / "r.html")]) == 2
    assert "missing-dir" in capsys.readouterr().err


def test_conversations_beyond_the_cap_are_counted_and_said_left_out(tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "capture.jsonl", [
        request(f"c{i}", 1, {"role": "user", "content": "hi"} if i == 2 else SYSTEM) for i in range(4)])
    report = Report(max_conversations=2)
    with capture.open("rb") as f:
        for line, result in Checker().judge(read_capture(f, CAPTURED_PROVIDERS)):
            report.add(line, result)
    doc = parse(report.render("capture.jsonl"))
    assert [a["data-conversation"] for t, a in doc.elements if t == "section"] == ["c0", "c1"]
    assert one(doc, "p", data_left_out="2") is not None
    assert "2 more conversations left out (the first 2 are shown); 1 of them with violations." in " ".join(doc.text)
    assert one(doc, "dd", data_summary="violating")["#text"] == "1"


def test_a_budget_line_far_above_the_payloads_is_stated_not_drawn(tmp_path: Path) -> None:
    """A 30-token payload under gpt-4o's 128k window: bars scaled to the payloads, the line in words."""
    capture = tmp_path / "small.jsonl"
    body = {"model": "gpt-4o", "messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "hello"}]}
    capture.write_text(json.dumps({"conversation_id": "c", "body": body}) + "\n")
    out = tmp_path / "r.html"
    assert main(["report", str(capture), "-o", str(out)]) == 0
    html = out.read_text()
    assert "class='budget'" not in html
    assert "data-off-scale='128000'" in html and "budget line at 128,000 tokens, above the chart" in html
    bar = html[html.index("<rect class='tokens'"):]
    height = float(bar.split("height='")[1].split("'")[0])
    assert height > 100  # the bar fills the chart instead of vanishing under a 128k scale


def test_a_value_too_short_to_judge_is_shown_unjudged_not_absent(tmp_path: Path, capsys) -> None:
    capture = write_capture(tmp_path / "capture.jsonl", [
        fact("c", "size", "M"), fact("c", "city", "Pune"), fact("c", "fit", "XL"), fact("c", "fit", None),
        request("c", 1, SYSTEM, {"role": "user", "content": "Pune, size M, fit XL"}),
    ])
    out = tmp_path / "report.html"
    assert main(["report", str(capture), "-o", str(out)]) == 0
    doc = parse(out.read_text())
    statuses = {a["data-fact"]: a["data-status"] for t, a in doc.elements if t == "td" and a.get("data-fact")}
    assert statuses == {"size": "unjudged", "city": "present", "fit": "unjudged"}  # not "deleted": never looked for


def test_a_conversation_with_a_turn_not_read_offline_is_not_presented_as_clean(tmp_path: Path) -> None:
    """A route's label without ``sdk`` (an older capture of an Azure OpenAI call): that turn is not
    judged, so its conversation says so, beside the clean and the violating ones, in the summary
    and in its section."""
    unread = request("azure", 2, {"role": "user", "content": "hello"})
    unread["provider"] = "azure.ai.openai"
    capture = write_capture(tmp_path / "capture.jsonl", [
        request("azure", 1, SYSTEM, {"role": "user", "content": "hi"}), unread,
        request("clean", 1, SYSTEM), request("bad", 1, {"role": "user", "content": "hi"}),
    ])
    out = tmp_path / "report.html"
    assert main(["report", str(capture), "-o", str(out)]) == 0  # written: the report is the product
    doc = parse(out.read_text())
    verdicts = {a["data-conversation"]: (a["class"], a["#text"]) for t, a in doc.elements
                if t == "li" and "data-conversation" in a}
    assert verdicts == {
        "azure": ("not-judged", "azure: not judged (1 of 2 requests not read offline)"),
        "clean": ("ok", "clean: ok (1 turn)"),
        "bad": ("violation", "bad: first violation at turn 1: system_at_head"),
    }
    assert one(doc, "dd", data_summary="not-judged")["#text"] == "1"
    assert one(doc, "dd", data_summary="violating")["#text"] == "1"
    section = one(doc, "section", data_conversation="azure")
    assert section["data-verdict"] == "not-judged"
    status = [a["#text"] for t, a in doc.elements if t == "p" and a.get("class") == "status"]
    assert status == ["azure: not judged (1 of 2 requests not read offline)", "no violations",
                      "bad: first violation at turn 1: system_at_head"]
    assert "unread" in one(doc, "th", data_turn="2")["class"]
