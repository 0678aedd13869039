"""Hostile capture files and payloads: every input ``check``, ``report`` or ``diff`` cannot use
exits 2 with one line naming it, and nothing read from a file can forge, break or crash the
output (issue 21, point 11)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxguard._nesting import MAX_NESTING
from ctxguard.cli import diff as diff_cli
from ctxguard.cli import main
from ctxguard.providers import openai as openai_provider

SYSTEM = {"role": "system", "content": "You are the order assistant."}
GOOD = json.dumps({"conversation_id": "c", "body": {"model": "gpt-4o", "messages": [SYSTEM]}}).encode() + b"\n"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real entry point, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "ctxguard.cli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def run_main(*args: str) -> tuple[int, str, str]:
    """``main()`` in process, its stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(list(args))
    return status, out.getvalue(), err.getvalue()


def request(cid: Any, *messages: dict[str, Any], **extra: Any) -> bytes:
    line = {"conversation_id": cid, "body": {"model": "gpt-4o", "messages": list(messages) or [SYSTEM]}, **extra}
    return json.dumps(line).encode() + b"\n"


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


HOSTILE = {
    "nested JSON": (b'{"body": ' + nested(100_000) + b"}\n", 1, "not readable JSON (nested too deeply)"),
    "nested body": (GOOD + b'{"body": {"messages": ' + nested(5_000) + b"}}\n", 2, "nested too deeply"),
    "5,000-digit turn": (b'{"turn": ' + b"9" * 5000 + b', "body": {}}\n', 1, "an integer of more than"),
    "5,000-digit number in the body": (b'{"body": {"max_tokens": ' + b"9" * 5000 + b"}}\n", 1, "an integer of more"),
    "duplicate body": (b'{"body": {"messages": []}, "body": {"messages": [1]}}\n', 1, "duplicate key 'body'"),
    "duplicate key in a message": (
        b'{"body": {"messages": [{"role": "system", "content": "a", "content": "b"}]}}\n', 1,
        "duplicate key 'content'"),
    "NUL byte": (GOOD + b'{"body": {}}\x00\n', 2, "a NUL byte"),
    "invalid UTF-8": (GOOD + b'{"body": {"messages": "\xff\xfe"}}\n', 2, "not UTF-8"),
    "BOM after the first line": (GOOD + b"\xef\xbb\xbf" + GOOD, 2, "BOM"),
    "JSON null": (b"null\n", 1, "expected a JSON object, got NoneType"),
    "body a list": (b'{"body": [{"role": "user"}]}\n', 1, "'body' must be an object"),
    "provider a list": (b'{"provider": ["openai"], "body": {}}\n', 1, "'provider' must be a string, got list"),
    "provider unknown, with escapes": (b'{"provider": "x\\u001b[2J\\n", "body": {}}\n', 1,
                                       "unknown provider 'x\\x1b[2J\\n'"),
    "turn a string": (b'{"turn": "3", "body": {}}\n', 1, "'turn' must be a non-negative integer"),
    "turn NaN": (b'{"turn": NaN, "body": {}}\n', 1, "'turn' must be a non-negative integer"),
    "conversation id empty": (request(""), 1, "'conversation_id' must be a non-empty string or null"),
    "conversation id a number": (request(41), 1, "'conversation_id' must be a string or null, got int"),
    "fact without id": (b'{"conversation_id": "c", "fact": {"value": "Pune"}}\n', 1, "'fact.id' must be"),
    "fact a list": (b'{"conversation_id": "c", "fact": ["city", "Pune"]}\n', 1, "'fact' must be an object"),
    "fact expiry a number": (b'{"conversation_id": "c", "fact": {"id": "a", "value": "Pune", "expires_at": 5}}\n',
                             1, "'fact.expires_at' must be an ISO-8601 timestamp string"),
    "fact required a string": (b'{"conversation_id": "c", "fact": {"id": "a", "value": "Pune", "required": "no"}}\n',
                               1, "'fact.required' must be true or false"),
}


def one_line_naming(err: str, path: Path, line: int, reason: str) -> None:
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith(f"ctxguard: {path}: line {line}: ") and reason in err, err
    assert "\x1b" not in err and "Traceback" not in err


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_check_and_report_refuse_hostile_lines_with_one_line_naming_them(tmp_path: Path, case: str):
    content, line, reason = HOSTILE[case]
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(content)
    status, out, err = run_main("check", str(path))
    assert status == 2 and out == ""
    one_line_naming(err, path, line, reason)
    page = tmp_path / "report.html"
    status, out, err = run_main("report", str(path), "-o", str(page))
    assert status == 2 and out == "" and not page.exists()
    one_line_naming(err, path, line, reason)


@pytest.mark.parametrize(("content", "reason"), [
    (b'{"body": ' + nested(100_000) + b"}\n", "nested too deeply"),
    (b'{"turn": ' + b"9" * 5000 + b', "body": {}}\n', "an integer of more than"),
])
def test_the_real_command_exits_2_not_1_on_what_used_to_be_a_traceback(tmp_path: Path, content: bytes, reason: str):
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(content)
    for verb in (("check", str(path)), ("report", str(path), "-o", str(tmp_path / "r.html"))):
        proc = cli(*verb)
        assert proc.returncode == 2 and proc.stdout == ""
        one_line_naming(proc.stderr, path, 1, reason)


@pytest.mark.parametrize("opening", ["[", '{"k": '])
def test_a_line_is_read_up_to_max_nesting_and_refused_past_it_on_every_python(tmp_path: Path, opening: str):
    """The bound is ctxguard's, not Python's: 3.11's reader gives up near 1,000 levels, 3.13's near
    10,000, and a line between would be judged on one and refused on the other."""
    closing = "}" if opening.startswith("{") else "]"

    def line(depth: int) -> bytes:  # the line, its body and messages, the message, ``extra`` reach ``depth``
        extra = opening * (depth - 4) + "1" + closing * (depth - 4)
        return (f'{{"conversation_id": "c", "body": {{"model": "gpt-4o", "messages": '
                f'[{{"role": "system", "content": "You are the order assistant.", "extra": {extra}}}]}}}}\n').encode()

    path = tmp_path / "deep.jsonl"
    path.write_bytes(line(MAX_NESTING))
    assert run_main("check", str(path))[:2] == (0, "c: ok (1 turn)\nchecked 1 requests in 1 conversations: 0 with "
                                                   "violations\n")
    path.write_bytes(line(MAX_NESTING + 1))
    status, out, err = run_main("check", str(path))
    assert status == 2 and out == ""
    one_line_naming(err, path, 1, "not readable JSON (nested too deeply)")


def test_a_byte_order_mark_on_the_first_line_is_read(tmp_path: Path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD)
    assert run_main("check", str(path))[:2] == (0, "c: ok (1 turn)\nchecked 1 requests in 1 conversations: 0 with "
                                                   "violations\n")


def test_nan_and_infinity_in_a_body_are_read_as_the_sdks_write_them(tmp_path: Path):
    path = tmp_path / "nan.jsonl"
    path.write_bytes(b'{"body": {"model": "gpt-4o", "temperature": NaN, "top_p": Infinity, "messages": '
                     + json.dumps([SYSTEM]).encode() + b"}}\n")
    assert run_main("check", str(path))[0] == 0


# -- ids from the file cannot forge or break the output ----------------------------------------

FORGING = {
    "x: ok (1 turn)\nforged: ok (3 turns)": "x: ok (1 turn)\\nforged: ok (3 turns)",
    "\x1b[31mred\x1b[0m\rcarriage": "\\x1b[31mred\\x1b[0m\\rcarriage",
    "lone \ud800 surrogate": "lone \\ud800 surrogate",
    "line\u2028separator, \u202eRTL, back\\slash": "line\\u2028separator, \\u202eRTL, back\\\\slash",
}


def capture_of(path: Path, ids: list[str]) -> Path:
    """One request per id, each without a system message (so each conversation has a line to print)."""
    path.write_bytes(b"".join(request(cid, {"role": "user", "content": "hi"}) for cid in ids))
    return path


def test_check_prints_ids_escaped_one_line_per_conversation(tmp_path: Path):
    path = capture_of(tmp_path / "ids.jsonl", list(FORGING))
    proc = cli("check", str(path))
    assert proc.returncode == 1 and proc.stderr == ""
    lines = proc.stdout.split("\n")
    assert lines[-1] == "" and len(lines) == len(FORGING) + 2  # one per conversation, the summary, the end
    assert lines[:-2] == [f"{shown}: first violation at turn 1: system_at_head" for shown in FORGING.values()]
    assert not any(ch in proc.stdout for ch in "\x1b\r\u2028\u202e")


def test_check_json_keeps_the_ids_exact(tmp_path: Path):
    path = capture_of(tmp_path / "ids.jsonl", list(FORGING))
    proc = cli("check", str(path), "--json")
    assert proc.returncode == 1
    assert [c["conversation_id"] for c in json.loads(proc.stdout)["conversations"]] == list(FORGING)


def test_the_report_shows_ids_escaped_and_is_written(tmp_path: Path):
    path = tmp_path / "ids.jsonl"
    fact = {"conversation_id": "lone \ud800 surrogate", "fact": {"id": "city\x1b[2J\ud800", "value": "Pune city"}}
    path.write_bytes(json.dumps(fact).encode() + b"\n" + capture_of(tmp_path / "c.jsonl", list(FORGING)).read_bytes())
    page = tmp_path / "report.html"
    proc = cli("report", str(path), "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    html = page.read_text(encoding="utf-8")
    assert "lone \\ud800 surrogate" in html and "city\\x1b[2J\\ud800" in html
    assert "x: ok (1 turn)\\nforged" in html
    assert not any(ch in html for ch in "\x1b\r\u2028\u202e")


def test_a_terminal_that_cannot_show_an_id_gets_it_escaped(tmp_path: Path):
    path = capture_of(tmp_path / "ids.jsonl", ["café-41"])
    proc = cli("check", str(path), env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 1 and proc.stderr == ""
    assert proc.stdout.startswith("caf\\xe9-41: first violation at turn 1: system_at_head\n")


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # stdout buffered, as users have it
    path = capture_of(tmp_path / "many.jsonl", [f"conversation-{i}" for i in range(5000)])  # > a pipe's buffer
    proc = subprocess.Popen([sys.executable, "-m", "ctxguard.cli", "check", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"conversation-0: ")
    proc.stdout.close()  # `| head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 2 and err == b""
    small = capture_of(tmp_path / "small.jsonl", ["c"])  # all of it still buffered when the reader is gone
    proc = subprocess.Popen([sys.executable, "-m", "ctxguard.cli", "check", str(small)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 2 and err == b""


# -- what ctxguard itself fails on is named, not passed off as clean -----------------------------


def test_a_body_ctxguard_fails_on_is_named_offline_rather_than_judged_partly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, internal_errors: list
):
    original = openai_provider.ADAPTER.normalise

    def normalise(api: str, kwargs: Any, memo: Any = None) -> Any:
        if kwargs.get("model") == "boom":
            raise RuntimeError("the reader broke")
        return original(api, kwargs, memo)

    monkeypatch.setattr(openai_provider.ADAPTER, "normalise", normalise)
    path = tmp_path / "cap.jsonl"
    path.write_bytes(GOOD + json.dumps({"body": {"model": "boom", "messages": [SYSTEM]}}).encode() + b"\n")
    status, out, err = run_main("check", str(path))
    assert status == 2 and out == ""
    one_line_naming(err, path, 2, "could not be judged (normalise: RuntimeError: the reader broke)")
    assert [where for where, _ in internal_errors] == ["normalise"]  # swallowed live, named offline
    internal_errors.clear()


# -- policy files ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("toml", "reason"), [
    ("a = " + "[" * 5000 + "]" * 5000, "not readable TOML (nested too deeply)"),
    ('system_at_head = "no"', "system_at_head must be true or false"),
    ("require_facts = 0", "require_facts must be true or false"),
    ("pinned = 5", "pinned must be a table"),
    ('budget = "big"', "budget must be a table"),
    ("x = 1" + "0" * 5000, "Exceeds the limit"),
])
def test_a_hostile_policy_file_exits_2_with_one_line(tmp_path: Path, toml: str, reason: str):
    policy = tmp_path / "policy.toml"
    policy.write_text(toml)
    capture = tmp_path / "cap.jsonl"
    capture.write_bytes(GOOD)
    status, out, err = run_main("check", str(capture), "--policy", str(policy))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"ctxguard: {policy}: ") and reason in err


# -- diff ------------------------------------------------------------------------------------------

DIFF_HOSTILE = {
    "nested": (b'{"messages": ' + nested(100_000) + b"}", "not readable JSON (nested too deeply)"),
    "5,000-digit number": (b'{"max_tokens": ' + b"9" * 5000 + b', "messages": []}', "an integer of more than"),
    "duplicate key": (b'{"messages": [], "messages": [{"role": "user", "content": "x"}]}', "duplicate key 'messages'"),
    "pretty JSON, broken on line 3": (b'{\n  "messages": [\n    {"role": }\n  ]\n}', "at line 3 column"),
    "invalid UTF-8": (b'{"messages": "\xff"}', "not UTF-8"),
    "provider a list": (b'{"provider": ["openai"], "body": {"messages": []}}', "unknown provider 'list'"),
    "body a list": (b'{"provider": "openai", "body": [1]}', "'body' must be an object"),
    "model a number": (b'{"model": 4, "body": {"messages": []}}', "'model' must be a string or null"),
}


@pytest.mark.parametrize("case", sorted(DIFF_HOSTILE))
def test_diff_refuses_a_hostile_payload_with_one_line(tmp_path: Path, case: str):
    content, reason = DIFF_HOSTILE[case]
    good, bad = tmp_path / "a.json", tmp_path / "b.json"
    good.write_text(json.dumps({"messages": [SYSTEM]}))
    bad.write_bytes(content)
    status, out, err = run_main("diff", str(good), str(bad))
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"ctxguard: {bad}: ") and reason in err, err


def test_diff_reads_a_byte_order_mark_and_escapes_roles(tmp_path: Path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_bytes(b"\xef\xbb\xbf" + json.dumps({"messages": [SYSTEM]}).encode())
    b.write_text(json.dumps({"messages": [SYSTEM, {"role": "user\x1b[2J\nforged", "content": "hi"}]}))
    proc = cli("diff", str(a), str(b))
    assert proc.returncode == 1 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert len(lines) == 6 and "\x1b" not in proc.stdout
    assert lines[4].split()[:4] == ["-", "1", "user\\x1b[2J\\nforged", "added"]


def test_diff_sets_a_long_common_head_aside_before_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    history = [{"role": "user" if i % 2 else "assistant", "content": f"message {i}"} for i in range(5000)]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"messages": [SYSTEM, *history]}))
    b.write_text(json.dumps({"messages": [SYSTEM, *history, {"role": "user", "content": "new"}]}))
    status, out, _ = run_main("diff", str(a), str(b))  # 5,001 by 5,002 cells without it: over MAX_PAIRS
    assert status == 1 and out.splitlines()[-1].startswith("5001 kept, 0 moved, 0 changed, 1 added, 0 removed")


def test_diff_refuses_payloads_too_different_to_compare_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(diff_cli, "MAX_PAIRS", 100)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"messages": [SYSTEM, *({"role": "user", "content": f"a{i}"} for i in range(11))]}))
    b.write_text(json.dumps({"messages": [SYSTEM, *({"role": "user", "content": f"b{i}"} for i in range(10))]}))
    status, out, err = run_main("diff", str(a), str(b))
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "too different to compare: 11 and 10 messages differ between the common head and tail" in err
    b.write_text(json.dumps({"messages": [SYSTEM, *({"role": "user", "content": f"b{i}"} for i in range(9))]}))
    assert run_main("diff", str(a), str(b))[0] == 1  # 99 pairs


def test_diff_without_a_key_digests_with_one_of_its_own(tmp_path: Path):
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"messages": [SYSTEM]}))
    env = {k: v for k, v in os.environ.items() if k != "CTXGUARD_DIGEST_KEY"}
    runs = [subprocess.run([sys.executable, "-m", "ctxguard.cli", "diff", str(a), str(a), "--json"],
                           capture_output=True, text=True, timeout=120, env=env) for _ in range(2)]
    hashes = [json.loads(r.stdout)["a"]["hash"] for r in runs]
    assert all(r.returncode == 0 for r in runs) and hashes[0] != hashes[1]  # no fixed, public key
    keyed = [json.loads(cli("diff", str(a), str(a), "--json", env={"CTXGUARD_DIGEST_KEY": "k"}).stdout)["a"]["hash"]
             for _ in range(2)]
    assert keyed[0] == keyed[1]  # the app's key: the digests on its spans


# -- any bytes at all --------------------------------------------------------------------------------

FRAGMENTS = [GOOD, request("x\n\x1b[2J"), request("\ud800"), b"\xef\xbb\xbf", b"\x00", b"\xff", b"{", b"}", b"[",
             b"]", b'"', b"\\", b"NaN", b"1e999", b"9" * 4400, b'"body"', b'"fact"', b'"turn"', b'"provider"', b":",
             b",", b"null", b"true", b'{"body": {}}', b'{"conversation_id": "c", "fact": {"id": "a", "value": "b"}}',
             b'{"provider": "groq", "body": {}}', b'{"provider": "groq", "sdk": "openai", "body": {}}', b'"sdk"',
             b'"litellm"', b"\n", b"\r\n", b"\xed\xa0\x80", nested(2000)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.binary(max_size=40)), max_size=12).map(b"".join))
def test_any_bytes_exit_0_1_2_or_3_with_one_line_per_problem_and_no_traceback(content: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "any.jsonl"
        path.write_bytes(content)
        good = Path(tmp) / "good.json"
        good.write_text(json.dumps({"messages": [SYSTEM]}))
        for args in (("check", str(path)), ("check", str(path), "--json"),
                     ("report", str(path), "-o", str(Path(tmp) / "r.html")), ("diff", str(good), str(path))):
            status, out, err = run_main(*args)
            assert status in (0, 1, 2, 3) and "Traceback" not in err
            if status == 2:
                assert err.count("\n") == 1 and err.startswith("ctxguard: ") and out == "", err
            else:
                assert err == ""
            if args[0] == "check" and status == 2:
                assert " line " in err or "no request lines" in err
            if args == ("check", str(path)) and status != 2:
                said = [line for line in out.splitlines() if not line.startswith("not judged offline: ")]
                assert said[-1].startswith("checked ")
                assert ("not judged" in said[-1]) if status == 3 else status == 1 or "not judged" not in out
                assert not any(ch in out for ch in "\x1b\r\x00")
