"""Capture real SDK traffic, then ``ctxguard check`` / ``ctxguard diff`` it offline.

The capture is written by ``ctxguard.testing.record`` while the real openai and
anthropic SDKs talk to the loopback fake; every captured body is compared with
the body that arrived there, and the offline verdict with the live guard's.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from collections import deque
from datetime import datetime, timezone
from pathlib import Path

import anthropic
import openai
import pytest

import ctxguard
from ctxguard.capture import read_capture
from ctxguard.cli import main
from ctxguard.offline import CAPTURED_PROVIDERS, Checker
from ctxguard.testing import FakeLLM, RecordedRequest, Reply, record
from ctxguard.testing.plugin import GuardHarness
from tests.docblocks import block

SYSTEM = {"role": "system", "content": "You are the order assistant of Acme Shop."}


def buggy_turns(client: openai.OpenAI, turns: int, keep: int = 6) -> None:
    """The classic bug: the system prompt lives inside a deque(maxlen=keep)."""
    history: deque[dict[str, str]] = deque([SYSTEM], maxlen=keep)
    for n in range(1, turns + 1):
        history.append({"role": "user", "content": f"question {n} about order A-1041"})
        reply = client.chat.completions.create(model="gpt-4o", messages=list(history))
        history.append({"role": "assistant", "content": reply.choices[0].message.content or ""})


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxguard.cli", *args], capture_output=True, text=True, timeout=120)


def lines_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- capture ---------------------------------------------------------------------------


def test_record_captures_each_body_as_it_arrived_and_the_fact_events(
    tmp_path: Path, llm: FakeLLM, client: openai.OpenAI, harness: GuardHarness
):
    harness.start(mode="observe")
    path = tmp_path / "cap.jsonl"
    with record(str(path)), ctxguard.conversation("order-41"):
        ctxguard.record_fact("shipping_city", "Pune")
        buggy_turns(client, 3)
        ctxguard.forget_fact("shipping_city")
    with ctxguard.conversation("order-41"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM])  # after the block: not captured
    lines = lines_of(path)
    requests = [line for line in lines if "body" in line]
    assert [r["body"] for r in requests] == [r.json for r in llm.requests[:3]]
    assert [(r["conversation_id"], r["turn"], r["provider"], r["sdk"]) for r in requests] == [
        ("order-41", 1, "openai", "openai"), ("order-41", 2, "openai", "openai"), ("order-41", 3, "openai", "openai")]
    assert all(r["ts"].endswith("+00:00") for r in requests)
    facts = [line["fact"] for line in lines if "fact" in line]
    assert facts == [{"id": "shipping_city", "value": "Pune"}, {"id": "shipping_city", "value": None}]
    assert len(llm.requests) == 4


def test_record_applies_the_redaction_hook_before_writing(
    tmp_path: Path, llm: FakeLLM, client: openai.OpenAI, harness: GuardHarness
):
    harness.start(mode="observe")

    def redact(line: dict) -> dict | None:
        if "fact" in line:
            return None  # drop fact lines
        text = json.dumps(line["body"]).replace("+33 6 12 34 56 78", "[phone]")
        return {**line, "body": json.loads(text)}

    path = tmp_path / "cap.jsonl"
    with record(str(path), redact=redact), ctxguard.conversation("c"):
        ctxguard.record_fact("phone", "+33 6 12 34 56 78")
        user = {"role": "user", "content": "call +33 6 12 34 56 78"}
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, user])
    text = path.read_text()
    assert "+33 6 12 34 56 78" not in text and "[phone]" in text
    assert "+33 6 12 34 56 78" in llm.requests[0].body.decode()  # the request itself is untouched


def test_anthropic_stream_helper_is_captured_as_sent(tmp_path: Path, llm: FakeLLM, harness: GuardHarness):
    harness.start(mode="observe")
    path = tmp_path / "cap.jsonl"
    client = anthropic.Anthropic(base_url=llm.base_url, api_key="x", max_retries=0)
    with record(str(path)), ctxguard.conversation("a-1"):
        client.messages.create(model="claude-sonnet-4-20250514", max_tokens=64, system="Be brief.",
                               messages=[{"role": "user", "content": "hello"}])
        with client.messages.stream(model="claude-sonnet-4-20250514", max_tokens=64, system="Be brief.",
                                    messages=[{"role": "user", "content": "again"}]) as stream:
            assert "".join(stream.text_stream)
    requests = [line for line in lines_of(path) if "body" in line]
    assert [(r["provider"], r["sdk"]) for r in requests] == [("anthropic", "anthropic")] * 2
    assert [r["body"] for r in requests] == [r.json for r in llm.requests]


def test_an_unobserved_transport_is_captured_from_the_arguments(tmp_path: Path, llm: FakeLLM, harness: GuardHarness):
    """Another HTTP stack (here: an httpx client whose send path bypasses the observed method)."""
    import openai._base_client as base

    harness.start(mode="observe")
    http = getattr(base, "httpx2", None) or base.httpx
    original = http.Client._send_single_request.__wrapped__  # below ctxguard's wire hook

    class OtherStack(http.Client):  # type: ignore[misc,name-defined]
        def _send_single_request(self, request):  # type: ignore[no-untyped-def]
            return original(self, request)

    path = tmp_path / "cap.jsonl"
    with openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0, http_client=OtherStack()) as client, \
            record(str(path)), ctxguard.conversation("o-1"):
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM], max_tokens=20, temperature=openai.NOT_GIVEN,
                                       extra_headers={"x-trace": "1"})
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="skip") == 1
    (line,) = lines_of(path)
    assert line["body"] == {"model": "gpt-4o", "messages": [SYSTEM], "max_tokens": 20}
    assert line["sdk"] == "openai"  # the call's arguments, as that SDK's call site got them
    assert line["body"] == llm.requests[0].json


def test_instrument_capture_path_writes_until_uninstrument(tmp_path: Path, llm: FakeLLM, client: openai.OpenAI):
    path = tmp_path / "staging.jsonl"
    ctxguard.instrument(capture_path=str(path), registry=GuardHarness().registry, digest_key=b"k",
                        ledger=ctxguard.MemoryLedger())
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM])
    ctxguard.uninstrument()
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM])
    requests = lines_of(path)
    assert len(requests) == 1 and requests[0]["conversation_id"] is None
    assert requests[0]["body"] == llm.requests[0].json


def test_capture_path_from_the_environment(tmp_path: Path, llm: FakeLLM, client: openai.OpenAI, monkeypatch):
    path = tmp_path / "env.jsonl"
    monkeypatch.setenv("CTXGUARD_CAPTURE_PATH", str(path))
    ctxguard.instrument(registry=GuardHarness().registry, digest_key=b"k", ledger=ctxguard.MemoryLedger())
    client.chat.completions.create(model="gpt-4o", messages=[SYSTEM])
    ctxguard.uninstrument()
    assert [line["body"] for line in lines_of(path)] == [llm.requests[0].json]


def test_record_needs_an_active_guard(tmp_path: Path):
    with pytest.raises(RuntimeError, match="instrument"), record(str(tmp_path / "x.jsonl")):
        pass


# -- check -----------------------------------------------------------------------------


def test_check_finds_the_same_flip_point_as_the_live_guard(
    tmp_path: Path, llm: FakeLLM, client: openai.OpenAI, harness: GuardHarness
):
    harness.start(mode="observe")
    path = tmp_path / "cap.jsonl"
    with record(str(path)):
        with ctxguard.conversation("buggy"):
            buggy_turns(client, 6)
        with ctxguard.conversation("fine"):
            buggy_turns(client, 2)
    spans = [s.attributes for s in harness.spans()]
    live = [a.get("ctxguard.violations") for a in spans if a["gen_ai.conversation.id"] == "buggy"]
    live_flip = next(i for i, v in enumerate(live, 1) if v)
    out = run_cli("check", str(path))
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines() == [
        f"buggy: first violation at turn {live_flip}: system_at_head",
        "fine: ok (2 turns)",
        "checked 8 requests in 2 conversations: 1 with violations",
    ]
    assert live_flip == 4  # deque(maxlen=6): the system prompt falls out before the fourth call


def agent_model(request: RecordedRequest) -> Reply | str:
    """The model of ``agent_turns``: it looks the order up when the user asks, answers once it has."""
    if request.json["messages"][-1]["role"] == "user":
        return Reply(tool_calls=[{"function": {"name": "lookup", "arguments": {"order": "A-1041"}}}])
    return "It shipped."


def agent_turns(client: openai.OpenAI, turns: int, keep: int) -> None:
    """An agent loop whose trimmer keeps the last ``keep`` messages, blind to tool exchanges: the
    service refuses a tool result whose call was cut (400), and the agent says so and goes on."""
    history: list[dict] = []
    for n in range(1, turns + 1):
        history.append({"role": "user", "content": f"where is order A-104{n}?"})
        message = client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, *history[-keep:]]).choices[0].message
        history.append(message.model_dump(exclude_none=True))
        history.extend({"role": "tool", "tool_call_id": call.id, "content": "shipped"} for call in message.tool_calls)
        try:
            answer = client.chat.completions.create(model="gpt-4o", messages=[SYSTEM, *history[-keep:]])
        except openai.BadRequestError:
            history.append({"role": "assistant", "content": "Sorry, I could not look that up."})
        else:
            history.append({"role": "assistant", "content": answer.choices[0].message.content})


def test_check_finds_a_trimmed_tool_exchange_where_the_live_guard_did(tmp_path: Path, harness: GuardHarness):
    harness.start(mode="observe")
    path = tmp_path / "cap.jsonl"
    with (FakeLLM(reply=agent_model) as llm, openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0) as client,
          record(str(path)), ctxguard.conversation("agent")):
        agent_turns(client, 3, keep=5)
    live = [tuple(s.attributes.get("ctxguard.violations", ())) for s in harness.spans()]
    # Turn 4 sends [system, tool result, answer, user, call, result]: the first result's call was cut.
    assert live == [(), (), (), ("tool_pairs_intact",), (), ("tool_pairs_intact",)]
    assert [r.status for r in llm.responses] == [200, 200, 200, 400, 200, 400]  # refused, as OpenAI does
    out = run_cli("check", str(path))
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines()[0] == "agent: first violation at turn 4: tool_pairs_intact"
    out = run_cli("check", str(path), "--json")
    first = json.loads(out.stdout)["conversations"][0]["first_violation"]
    call_id = llm.responses[0].tool_call_ids[0]
    assert first["violations"] == [{"check": "tool_pairs_intact", "fact_id": None, "stage": None,
                                    "detail": f"tool result {call_id} (message 1) answers no call right before it"}]
    assert "shipped" not in out.stdout and "A-104" not in out.stdout


def test_check_judges_facts_from_the_captured_fact_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "cap.jsonl"
    body = {"model": "gpt-4o", "messages": [SYSTEM, {"role": "user", "content": "ship it to Pune please"}]}
    path.write_text("\n".join(json.dumps(x) for x in [
        {"conversation_id": "c", "fact": {"id": "city", "value": "Pune"}},
        {"conversation_id": "c", "turn": 1, "provider": "openai", "body": body},
        {"conversation_id": "c", "fact": {"id": "city", "value": "Lyon"}},
        {"conversation_id": "c", "turn": 2, "provider": "openai", "body": body},
    ]) + "\n")
    assert main(["check", str(path), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    first = doc["conversations"][0]["first_violation"]
    assert first["turn"] == 2 and first["line"] == 4
    assert set(first["checks"]) == {"fact_present", "fact_current"}
    assert "Pune" not in json.dumps(doc) and "Lyon" not in json.dumps(doc)


def test_check_uses_the_policy_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = tmp_path / "cap.jsonl"
    messages = [SYSTEM, {"role": "user", "content": "word " * 400}]
    path.write_text(json.dumps({"conversation_id": "c", "body": {"model": "gpt-4o", "messages": messages}}) + "\n")
    assert main(["check", str(path)]) == 0
    policy = tmp_path / "policy.toml"
    policy.write_text('[budget]\nwindow = 300\nreserved_output = 50\n\n[pinned]\nmarker = "Pinned facts"\n')
    assert main(["check", str(path), "--policy", str(policy)]) == 1
    assert "c: first violation at turn 1: pinned_present, payload_under_budget" in capsys.readouterr().out
    policy.write_text("[budget]\nwindw = 300\n")
    assert main(["check", str(path), "--policy", str(policy)]) == 2
    assert "windw" in capsys.readouterr().err


def test_the_documented_capture_lines_and_policy_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """docs/testing.md, "Capture files": its request line and fact lines, and the policy file of the
    ``ctxguard check`` section, read from the doc itself, judged offline as the doc says."""
    request = json.loads(block("docs/testing.md", "Capture files", "json", 0).text)
    facts = [json.loads(line) for line in block("docs/testing.md", "Capture files", "json", 1).text.splitlines()]
    capture = tmp_path / "capture.jsonl"
    capture.write_text("".join(json.dumps(line) + "\n" for line in [*facts, request]), encoding="utf-8")
    policy = tmp_path / "policy.toml"
    section = "`ctxguard check FILE.jsonl [--policy P.toml] [--json] [--progress / --no-progress]`"
    policy.write_text(block("docs/testing.md", section, "toml").text, encoding="utf-8")
    assert main(["check", str(capture), "--policy", str(policy)]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "order-41: first violation at turn 3: system_at_head, pinned_present, fact_present"


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        (b'{"body": {"model": "gpt-4o", "messages": []}}\n{"body": {"model": ', 2, "not valid JSON"),
        (b'{"body": {"messages": []}}\n\n[1, 2]\n', 3, "expected a JSON object"),
        (b'{"conversation_id": "c"}\n', 1, "missing 'body'"),
        (b'{"provider": "acme", "body": {"message": "hi"}}\n', 1, "unknown provider 'acme'"),
        (b'{"body": {"messages": []}}\n\x89PNG\r\n\x1a\n\x00\x00\xff\xfe\n', 2, "not UTF-8"),
        (b'{"conversation_id": "c", "fact": {"id": "x", "value": 5}}\n', 1, "fact.value"),
        (b'{"turn": "two", "body": {"messages": []}}\n', 1, "'turn'"),
        (b"", None, "no request lines"),
    ],
)
def test_check_names_the_line_of_unreadable_input_and_exits_2(tmp_path: Path, content: bytes, line, reason):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    out = run_cli("check", str(path))
    assert out.returncode == 2
    assert reason in out.stderr
    if line is not None:
        assert f"line {line}:" in out.stderr
    assert "Traceback" not in out.stderr


def test_check_refuses_a_line_longer_than_the_limit(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setattr("ctxguard.capture.MAX_LINE_BYTES", 1000)
    path = tmp_path / "long.jsonl"
    path.write_text('{"body": {"messages": []}}\n' + json.dumps({"body": {"x": "y" * 5000}}) + "\n")
    assert main(["check", str(path)]) == 2
    assert "line 2: line longer than" in capsys.readouterr().err


def test_check_missing_file_exits_2():
    out = run_cli("check", "/nonexistent/cap.jsonl")
    assert out.returncode == 2 and "No such file" in out.stderr and "Traceback" not in out.stderr


def test_check_draws_a_progress_bar_when_asked(tmp_path: Path, capsys):
    path = tmp_path / "cap.jsonl"
    body = {"model": "gpt-4o", "messages": [SYSTEM]}
    path.write_text("".join(json.dumps({"conversation_id": f"c{i}", "body": body}) + "\n" for i in range(50)))
    assert main(["check", str(path), "--progress"]) == 0
    err = capsys.readouterr().err
    assert "100%" in err and "\r[" in err
    assert main(["check", str(path)]) == 0  # not a terminal: no bar
    assert capsys.readouterr().err == ""


# -- diff ------------------------------------------------------------------------------


def _write(path: Path, obj: object, text: str | None = None) -> str:
    path.write_text(json.dumps(obj) if text is None else text)
    return str(path)


def test_diff_reports_each_message_and_the_head_roles(tmp_path: Path):
    u1, a1, u2 = ({"role": "user", "content": "ship to Pune"}, {"role": "assistant", "content": "ok"},
                  {"role": "user", "content": "when?"})
    a = _write(tmp_path / "a.json", {"model": "gpt-4o", "messages": [SYSTEM, u1, a1, u2]})
    b = _write(tmp_path / "b.json", {"conversation_id": "c", "provider": "openai", "body": {
        "model": "gpt-4o",
        "messages": [u2, u1, {"role": "assistant", "content": "ok, Lyon"}, {"role": "user", "content": "new"}]}})
    out = run_cli("diff", a, b)
    assert out.returncode == 1, out.stderr
    rows = [line.split()[:4] for line in out.stdout.splitlines()[3:-1]]
    assert rows == [
        ["0", "-", "system", "removed"],
        ["3", "0", "user", "kept"],
        ["1", "1", "user", "moved"],
        ["2", "2", "assistant", "changed"],
        ["-", "3", "user", "added"],
    ]
    assert out.stdout.splitlines()[0].endswith("4 messages, head role system")
    assert out.stdout.splitlines()[1].endswith("4 messages, head role user")
    assert out.stdout.splitlines()[-1] == "1 kept, 1 moved, 1 changed, 1 added, 1 removed; head role system -> user"
    assert "Pune" not in out.stdout and "Lyon" not in out.stdout


def test_diff_of_identical_payloads_exits_0_and_json_is_complete(tmp_path: Path, capsys):
    body = {"model": "claude-sonnet-4-20250514", "max_tokens": 10, "system": "Be brief.",
            "messages": [{"role": "user", "content": "hi"}]}
    a, b = _write(tmp_path / "a.json", body), _write(tmp_path / "b.json", body)
    assert main(["diff", a, b, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["a"]["head_role"] == "system" and doc["a"]["hash"] == doc["b"]["hash"]
    assert [m["status"] for m in doc["messages"]] == ["kept", "kept"]


def test_diff_with_an_empty_digest_key_in_the_environment_still_diffs(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setenv("CTXGUARD_DIGEST_KEY", "")  # set but empty: not a key (an empty key is refused)
    a = _write(tmp_path / "a.json", {"model": "gpt-4o", "messages": [SYSTEM]})
    assert main(["diff", a, a]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("1 kept")


def test_diff_bad_input_exits_2(tmp_path: Path):
    good = _write(tmp_path / "a.json", {"messages": [SYSTEM]})
    (tmp_path / "bad.json").write_bytes(b"\x00\x01garbage")
    for other in (str(tmp_path / "bad.json"), _write(tmp_path / "list.json", [1]), "/nonexistent.json"):
        out = run_cli("diff", good, other)
        assert out.returncode == 2 and other in out.stderr and "Traceback" not in out.stderr
    out = run_cli("diff", good, _write(tmp_path / "p.json", {"provider": "acme", "body": {"messages": []}}))
    assert out.returncode == 2 and "unknown provider 'acme'" in out.stderr


def test_diff_reads_every_label_and_sdk_capture_writes_never_by_a_guess(tmp_path: Path):
    user = {"role": "user", "content": "where is my parcel?"}
    a = _write(tmp_path / "a.json", {"provider": "azure.ai.openai", "sdk": "openai",
                                     "body": {"model": "gpt-4o", "messages": [SYSTEM, user]}})
    b = _write(tmp_path / "b.json", {"provider": "groq", "sdk": "openai",
                                     "body": {"model": "gpt-4o", "messages": [user]}})
    for given in ((), ("--provider", "azure.ai.openai"), ("--provider", "openai")):
        out = run_cli("diff", a, b, *given)
        assert out.returncode == 1, out.stderr
        assert out.stdout.splitlines()[-1] == "1 kept, 0 moved, 0 changed, 0 added, 1 removed; head role system -> user"
    converse = {"messages": [{"role": "user", "content": [{"text": "hi"}]}], "system": [{"text": "Be brief."}]}
    c = _write(tmp_path / "c.json", converse)
    out = run_cli("diff", c, c, "--provider", "botocore")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].endswith("2 messages, head role system")
    # A route's label alone does not say which SDK wrote the body: refused, not guessed.
    bare = _write(tmp_path / "bare.json", {"model": "gpt-4o", "messages": [user]})
    old = _write(tmp_path / "old.json", {"provider": "groq", "body": {"model": "gpt-4o", "messages": [user]}})
    for args in ((bare, bare, "--provider", "groq"), (old, old)):
        out = run_cli("diff", *args)
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert "the label 'groq' does not say which SDK wrote the body" in out.stderr
    out = run_cli("diff", old, old, "--provider", "openai")
    assert out.returncode == 0, out.stderr


# -- other providers -------------------------------------------------------------------


def test_gemini_capture_is_judged_offline_like_live(tmp_path: Path, llm: FakeLLM, harness: GuardHarness):
    genai = pytest.importorskip("google.genai")
    types = genai.types

    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned()))
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=llm.gemini_base_url))
    path = tmp_path / "gemini.jsonl"
    config = types.GenerateContentConfig(system_instruction="Be brief.", max_output_tokens=64)
    with record(str(path)), ctxguard.conversation("g-1"):
        ctxguard.record_fact("city", "Lyon")
        client.models.generate_content(model="gemini-2.5-flash", contents="ship to Lyon", config=config)
        client.models.generate_content(model="gemini-2.5-flash", contents="and again", config=config)
    requests = [line for line in lines_of(path) if "body" in line]
    assert [(r["provider"], r["sdk"], r["model"]) for r in requests] == [
        ("gcp.gemini", "google-genai", "gemini-2.5-flash")] * 2  # the Gemini Developer API
    assert "systemInstruction" in requests[0]["body"] or "system_instruction" in requests[0]["body"]
    live = [tuple(s.attributes.get("ctxguard.violations", ())) for s in harness.spans()]
    assert live == [("pinned_present",), ("pinned_present", "fact_present")]
    policy = _write(tmp_path / "p.toml", None, '[pinned]\nmarker = "Pinned facts"\n')
    out = run_cli("check", str(path), "--policy", policy)
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines()[0] == "g-1: first violation at turn 1: pinned_present"
    out = run_cli("check", str(path), "--json")
    doc = json.loads(out.stdout)
    first = doc["conversations"][0]["first_violation"]
    assert (first["turn"], first["checks"]) == (2, ["fact_present"])
    with path.open("rb") as f:  # the model comes from the capture line (Gemini bodies do not name it)
        results = [r for _, r in Checker().judge(read_capture(f, CAPTURED_PROVIDERS))]
    assert [(r.model, r.window, r.outcomes["payload_under_budget"]) for r in results] == [
        ("gemini-2.5-flash", 1_048_576, "pass")] * 2


def test_gemini_and_vertex_ai_lines_of_the_google_genai_sdk_are_read_offline(tmp_path: Path, llm: FakeLLM,
                                                                              harness: GuardHarness):
    """A google-genai call is labelled by the API it reaches (``gcp.gemini``, ``gcp.vertex_ai``); its
    capture line says ``sdk`` google-genai, so ``ctxguard check`` reads both, as it read
    ``gcp.gen_ai`` lines (which older captures carry, and which still read by their label)."""
    genai = pytest.importorskip("google.genai")
    from google.oauth2.credentials import Credentials

    harness.start(mode="observe")
    options = {"base_url": llm.gemini_base_url}
    clients = {"dev": genai.Client(api_key="x", http_options=options),
               "vertex": genai.Client(vertexai=True, project="p", location="us-central1",
                                      credentials=Credentials(token="t"), http_options=options)}
    path = tmp_path / "google.jsonl"
    with record(str(path)):
        for name, client in clients.items():
            with ctxguard.conversation(name):
                client.models.generate_content(model="gemini-2.5-flash", contents="hi",
                                               config={"system_instruction": "Be brief."})
                client.models.generate_content(model="gemini-2.5-flash", contents="hi")
    lines = [line for line in lines_of(path) if "body" in line]
    assert [(line["provider"], line["sdk"]) for line in lines] == [
        ("gcp.gemini", "google-genai")] * 2 + [("gcp.vertex_ai", "google-genai")] * 2
    older = tmp_path / "older.jsonl"  # written before the labels said which API: no sdk, gcp.gen_ai
    older.write_text("".join(json.dumps({"conversation_id": "old", "provider": "gcp.gen_ai", "model": line["model"],
                                         "body": line["body"]}) + "\n" for line in lines[:2]))
    for capture, names in [(path, ["dev", "vertex"]), (older, ["old"])]:
        out = run_cli("check", str(capture))
        assert out.returncode == 1, out.stderr
        assert out.stdout.splitlines()[: len(names)] == [f"{name}: first violation at turn 2: system_at_head"
                                                         for name in names]
        assert "not judged" not in out.stdout


def test_a_conversation_with_a_request_not_read_offline_is_not_judged_never_ok(tmp_path: Path):
    """A route's label without ``sdk`` (an older capture) does not say what wrote the body: it is
    not guessed, and its conversation is not passed off as clean."""
    path = tmp_path / "cap.jsonl"
    user = {"role": "user", "content": "where is my parcel?"}
    lines = [
        {"conversation_id": "x", "provider": "litellm", "body": {"model": "cohere/command-r", "message": "hi"}},
        {"conversation_id": "y", "provider": "openai", "body": {"model": "gpt-4o", "messages": [SYSTEM]}},
        {"conversation_id": "z", "provider": "openai", "body": {"model": "gpt-4o", "messages": [SYSTEM, user]}},
        {"conversation_id": "z", "provider": "azure.ai.openai", "body": {"model": "gpt-4o", "messages": [user]}},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = run_cli("check", str(path))
    assert out.returncode == 3, out.stderr  # nothing failed, but not everything was judged
    assert out.stdout.splitlines() == [
        "x: not judged (1 of 1 request not read offline)",
        "y: ok (1 turn)",
        "z: not judged (1 of 2 requests not read offline)",
        "checked 2 of 4 requests in 3 conversations: 0 with violations, 2 not judged",
        "not judged offline: 1 litellm requests (captured without 'sdk', and the label 'litellm' does not say "
        "which SDK wrote the body)",
        "not judged offline: 1 azure.ai.openai requests (captured without 'sdk', and the label 'azure.ai.openai' "
        "does not say which SDK wrote the body)",
    ]
    doc = json.loads(run_cli("check", str(path), "--json").stdout)
    assert [(c["conversation_id"], c["turns"], c["not_read"]) for c in doc["conversations"]] == [
        ("x", 1, 1), ("y", 1, 0), ("z", 2, 1)]
    assert doc["not_judged_conversations"] == 2
    assert [(n["provider"], n["sdk"], n["requests"]) for n in doc["not_judged_offline"]] == [
        ("litellm", None, 1), ("azure.ai.openai", None, 1)]
    # A violation still says so (exit 1), and that the turns before it were not all judged.
    lines.append({"conversation_id": "z", "provider": "openai", "body": {"model": "gpt-4o", "messages": [user]}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = run_cli("check", str(path))
    assert out.returncode == 1, out.stderr
    assert "z: first violation at turn 3: system_at_head (1 of 3 requests not read offline)" in out.stdout


def test_a_capture_of_an_azure_openai_call_is_judged_by_the_sdk_that_wrote_it(
    tmp_path: Path, llm: FakeLLM, harness: GuardHarness
):
    """The reproduction of issue 37: live capture labels the call by the provider it reached
    (``azure.ai.openai``); the line also says the openai SDK wrote the body, so the system prompt
    missing at its head is found offline as it was live."""
    harness.start(mode="observe")
    path = tmp_path / "cap.jsonl"
    root = llm.base_url.removesuffix("/v1")
    with openai.AzureOpenAI(azure_endpoint=root, api_key="t", api_version="2024-10-21", max_retries=0) as azure, \
            record(str(path)), ctxguard.conversation("c1"):
        azure.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "where is my parcel?"}])
    assert "/openai/deployments/gpt-4o/chat/completions" in llm.requests[0].path
    assert [s.attributes.get("ctxguard.violations") for s in harness.spans()] == [("system_at_head",)]
    out = run_cli("check", str(path))
    assert out.returncode == 1, out.stderr
    assert out.stdout.splitlines() == [
        "c1: first violation at turn 1: system_at_head",
        "checked 1 requests in 1 conversations: 1 with violations",
    ]
    (line,) = lines_of(path)
    assert (line["provider"], line["sdk"], line["body"]) == ("azure.ai.openai", "openai", llm.requests[0].json)


#: A body in each SDK's request format, without a system prompt.
UNGUIDED = {
    "openai": ("gpt-4o", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
    "anthropic": ("claude-sonnet-4-20250514", {"model": "claude-sonnet-4-20250514", "max_tokens": 64,
                                               "messages": [{"role": "user", "content": "hi"}]}),
    "google-genai": ("gemini-2.5-flash", {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    "mistralai": ("mistral-small-latest", {"model": "mistral-small-latest",
                                           "messages": [{"role": "user", "content": "hi"}]}),
    "ollama": ("llama3.2", {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]}),
    "cohere": ("command-r", {"model": "command-r", "messages": [{"role": "user", "content": "hi"}]}),
    "botocore": ("amazon.nova-pro-v1:0", {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
    "litellm": ("gpt-4o", {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}),
    "huggingface_hub": ("meta-llama/Llama-3.1-8B-Instruct", {"model": "meta-llama/Llama-3.1-8B-Instruct",
                                                             "messages": [{"role": "user", "content": "hi"}]}),
}
#: The SDKs' own labels, by which a line without ``sdk`` is read.
OWN_LABELS = {"openai": "openai", "anthropic": "anthropic", "gcp.gen_ai": "google-genai", "mistral_ai": "mistralai",
              "ollama": "ollama", "cohere": "cohere", "aws.bedrock": "botocore", "huggingface": "huggingface_hub"}


def test_every_label_capture_writes_is_judged_or_said_not_judged_never_refused(tmp_path: Path):
    """Every label, written by ctxguard's capture writer with every SDK (and without one, as older
    captures are): judged by the SDK's reader, or counted as not judged; never refused, never ok."""
    from ctxguard.capture import CaptureWriter
    from ctxguard.providers import BY_DISTRIBUTION, LABELS

    assert set(UNGUIDED) == set(BY_DISTRIBUTION)
    path = tmp_path / "cap.jsonl"
    writer = CaptureWriter(str(path))
    expected = {}
    for label in LABELS:
        for sdk, (model, body) in UNGUIDED.items():
            writer.request((f"{label} {sdk}", None), label, body, model, sdk)
            expected[f"{label} {sdk}"] = sdk != "litellm"
        own = OWN_LABELS.get(label)
        model, body = UNGUIDED[own or "openai"]
        writer.request((f"{label} -", None), label, body, model)
        expected[f"{label} -"] = own is not None
    writer.close()
    out = run_cli("check", str(path))
    assert out.returncode == 1, out.stderr
    said = dict(line.split(": ", 1) for line in out.stdout.splitlines()[: len(expected)])
    assert said == {name: "first violation at turn 1: system_at_head" if judged else
                    "not judged (1 of 1 request not read offline)" for name, judged in expected.items()}


def test_an_anthropic_body_sent_to_bedrock_or_vertex_takes_its_model_from_the_line(tmp_path: Path):
    """The anthropic SDK on Bedrock and Vertex AI puts the model in the URL: the body has none, and
    the budget is judged with the line's."""
    body = {"anthropic_version": "vertex-2023-10-16", "max_tokens": 64, "system": "Be brief.",
            "messages": [{"role": "user", "content": "hi"}]}
    path = tmp_path / "cap.jsonl"
    path.write_text("".join(json.dumps({"conversation_id": label, "provider": label, "sdk": "anthropic",
                                        "model": "claude-sonnet-4-20250514", "body": body}) + "\n"
                            for label in ("gcp.vertex_ai", "aws.bedrock")))
    with path.open("rb") as f:
        results = [r for _, r in Checker().judge(read_capture(f, CAPTURED_PROVIDERS))]
    assert [(r.provider, r.model, r.window, r.failed) for r in results if r is not None] == [
        (label, "claude-sonnet-4-20250514", 200_000, []) for label in ("gcp.vertex_ai", "aws.bedrock")]


def test_capture_keeps_the_tenant_and_is_private_to_its_owner(
    tmp_path: Path, llm: FakeLLM, client: openai.OpenAI, harness: GuardHarness
):
    harness.start(mode="observe")
    with record(str(tmp_path / "cap-{pid}.jsonl")) as written, ctxguard.conversation("c", tenant="acme"):
        ctxguard.record_fact("city", "Lyon")
        client.chat.completions.create(model="gpt-4o", messages=[SYSTEM])  # the city is not sent
    assert written == str(tmp_path / f"cap-{os.getpid()}.jsonl")
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o600  # raw content: owner only
    assert {line.get("tenant") for line in lines_of(Path(written))} == {"acme"}
    out = run_cli("check", written)
    assert out.stdout.splitlines()[0] == "c: first violation at turn 1: fact_present"  # judged in the tenant's scope


@pytest.mark.parametrize("written", ["2026-11-29T14:03:11.208Z", "2026-11-29T14:03:11.208z",
                                     "2026-11-29T14:03:11.208+00:00", "2026-11-29T15:03:11.208+01:00"])
def test_a_fact_expiry_in_utc_written_with_z_is_read_on_every_python(written: str):
    """JavaScript's ``toISOString()`` ends in ``Z``: Python 3.11's ``fromisoformat`` reads it, 3.10's
    did not (the line was refused there, judged here)."""
    line = {"conversation_id": "c", "fact": {"id": "city", "value": "Lyon", "expires_at": written}}
    (fact,) = read_capture(io.BytesIO(json.dumps(line).encode() + b"\n"), CAPTURED_PROVIDERS)
    assert fact.event.expires_at == datetime(2026, 11, 29, 14, 3, 11, 208000, tzinfo=timezone.utc)
