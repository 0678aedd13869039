"""``ctxguard/checks/kept.py``, case by case: ``provider_kept_all`` on a request and the input tokens its
answer reported; and on every record of the recorded corpus, none of which it may fail (end to end,
each server that cuts a prompt through its SDK: tests/providers/test_ollama.py, test_openai.py)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from ctxguard.checks import NEEDS_EXACT, Skip
from ctxguard.checks.kept import FLOOR, SLACK, provider_kept_all, text_read
from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.payload import TOOL_CALL, TOOL_RESULT, Answer, Item, Payload, RequestView, tool_ref
from ctxguard.tokens import BOUND, Calibration, EstimateCounter, TiktokenCounter, default_counter
from tests.checks.cases import FAIL, PASS, SKIP, Case, context, judge, table
from tests.conftest import KEY

pytestmark = pytest.mark.skipif(default_counter().name != TiktokenCounter.name,
                                reason="judged on exact counts: tiktoken is not installed")

_EXACT = Measurer(Digester(KEY), default_counter(), Calibration())

SYSTEM = ("system", "You are the order assistant of Acme Shop. Answer in one short paragraph.")
#: About 2,100 tokens of English a turn.
PROSE = "The parcel left the depot in Lyon on Monday and reached the sorting centre in Pune on Friday. " * 110
QUESTION = ("user", "Where is my parcel now?")


def measured(*items: Item, measurer: Measurer = _EXACT, **view: object) -> Payload:
    return measurer.measure(RequestView("openai", "chat.completions", "gpt-4o", list(items), **view))  # type: ignore[arg-type]


def message(role: str, text: str, *refs: str) -> Item:
    return (role, text, refs, "message", 0)


LONG = measured(message(*SYSTEM), message("user", PROSE), message("assistant", "Noted."), message(*QUESTION))
#: The least a server keeping all of ``LONG`` reads: half its messages' text tokens.
LEAST = int(FLOOR * text_read(LONG))


def kept(id: str, p: Payload, reported: int | None, *, expect: str, says: str = "", finish: tuple[str, ...] = (),
         answered: bool = True, unanswered: str = "") -> Case:
    reply = Answer(input_tokens=reported, finish_reasons=list(finish)) if answered else None
    return Case("provider_kept_all", id, p, context(p), expect, says, (reply, unanswered))


@table("provider_kept_all", [
    kept("all of it reported", LONG, LONG.raw_tokens, expect=PASS),
    kept("a quarter of it reported: the server cut it", LONG, LONG.raw_tokens // 4, expect=FAIL,
         says=f"{LONG.raw_tokens // 4:,} input tokens reported for {LONG.raw_tokens:,} sent"),
    kept("a tenth of it reported", LONG, LONG.raw_tokens // 10, expect=FAIL, says="the provider cut the prompt"),
    kept("an input count of 0: a usage the server does not know", LONG, 0, expect=SKIP,
         says="the answer reports no input tokens"),
    kept("SLACK below the least read", LONG, LEAST - SLACK, expect=FAIL, says=f"at least {LEAST:,} if all were kept"),
    kept("one token less than SLACK below it", LONG, LEAST - SLACK + 1, expect=PASS),
    kept("a short prompt reported at one token", measured(message(*QUESTION)), 1, expect=PASS),
    kept("no answer", LONG, None, answered=False, unanswered="the call failed", expect=SKIP,
         says="the call failed"),
    kept("an answer without its input count", LONG, None, expect=SKIP, says="the answer reports no input tokens"),
    kept("history the provider holds", measured(message(*QUESTION), history_elsewhere=(
        "history is provider-managed (previous_response_id)")), 40_000, expect=SKIP, says="previous_response_id"),
    kept("context the provider edits and says so", measured(message("user", PROSE), server_edits=(
        "the request lets the provider edit its context (context_management)")), 10, expect=SKIP,
        says="context_management"),
    kept("an input a guardrail blocked", LONG, 6, finish=("guardrail_intervened",), expect=SKIP,
         says="the input was blocked (guardrail_intervened)"),
    kept("counted with the estimate", measured(message("user", PROSE), measurer=Measurer(
        Digester(KEY), EstimateCounter(), Calibration())), 10, expect=SKIP, says="counted with the estimate"),
    kept("a body not read", measured(unreadable="invoke_model: a body for 'ai21.j2-mid-v1' is not read"), 10,
         expect=SKIP, says="is not read"),
])
def test_provider_kept_all(case: Case) -> None:
    judge(case)


#: What providers read as less than it is counted here, or not at all: each is left out of the least a
#: server that kept everything read, so a report of the rest passes.
THINKING = "Let me think about the parcel's route step by step. " * 300
NUMBERS = '{"temperatures": [' + ", ".join(["21.5"] * 2000) + "]}"
#: JSON indented deeply, over ``TIKTOKEN_MAX_CHARS``: estimated at four characters a token, 2.6 times cl100k.
INDENTED = json.dumps({"a": {"b": {"c": [{"k": "vvv", "n": i} for i in range(2600)]}}}, indent=8)


def _exact(text: str) -> int:
    counter = default_counter()
    return sum(counter.count(text[at:at + 100_000]) for at in range(0, len(text), 100_000))


@pytest.mark.parametrize(("id", "p", "reported"), [
    ("an earlier answer's thinking block (Anthropic drops it)",
     measured(message(*QUESTION), message("assistant", THINKING, "id:thinking"), message(*QUESTION)), 30),
    ("a reasoning item (Responses)", measured(message("assistant", THINKING, "id:reasoning"), message(*QUESTION)), 30),
    # DeepSeek R1's and Qwen3's templates keep only what follows an earlier answer's last </think>.
    ("an answer with its <think> text (DeepSeek R1 on Bedrock)",
     measured(message(*QUESTION), message("assistant", "Cross at the lights.\n<think>" + THINKING + "</think>"),
              message(*QUESTION)), 33),
    ("text in another script (a tokenizer of its own makes a third of cl100k's count of it)",
     measured(message("user", "भारत एक विशाल देश है जिसकी संस्कृति बहुत पुरानी है। " * 300)), 600),
    ("tool results where the provider counts keys and strings only (Vertex AI)",
     measured(message("assistant", "lookup {}", tool_ref(TOOL_CALL, "call_1")),
              message("tool", NUMBERS, tool_ref(TOOL_RESULT, "call_1")),
              message(*QUESTION), loose_tool_counts=True), 40),
    ("a text too long to count, estimated", measured(message("user", INDENTED)), _exact(INDENTED)),
])
def test_what_a_provider_reads_as_less_is_not_taken_as_read(id: str, p: Payload, reported: int) -> None:
    assert p.raw_tokens > 2 * reported + 4 * SLACK  # far below the whole count, yet not a cut
    assert provider_kept_all(p, context(p), Answer(input_tokens=reported), "") == []


def test_tool_results_count_where_the_provider_reads_them_whole() -> None:
    exchange = (message("assistant", "lookup {}", tool_ref(TOOL_CALL, "call_1")),
                message("tool", PROSE, tool_ref(TOOL_RESULT, "call_1")), message(*QUESTION))
    p = measured(*exchange)
    assert provider_kept_all(p, context(p), Answer(input_tokens=40), "")
    assert text_read(p) > 2000 > text_read(measured(*exchange, loose_tool_counts=True))


def test_a_count_in_bytes_is_judged_again_exactly_only_when_it_shows_a_drop() -> None:
    lazy = Measurer(Digester(KEY), BOUND, Calibration(), exact=default_counter)
    p = measured(message(*SYSTEM), message("user", PROSE), measurer=lazy)
    assert p.basis == BOUND.name
    shown = p.tokens - p.fixed
    assert provider_kept_all(p, context(p), Answer(input_tokens=shown), "") == []  # no drop: no exact count
    assert provider_kept_all(p, context(p), Answer(input_tokens=shown // 4), "") is NEEDS_EXACT
    exact = lazy.exact(p)
    assert exact.basis == TiktokenCounter.name
    assert provider_kept_all(exact, context(exact), Answer(input_tokens=shown // 4), "")


# -- the recorded corpus: no false alarm ---------------------------------------------------------------

BENCH = Path(__file__).resolve().parent.parent.parent / "bench" / "token_accuracy.py"


def _accuracy():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("token_accuracy", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["token_accuracy"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_no_record_of_the_recorded_corpus_fails() -> None:
    """Each real request of tests/data/recorded/, counted as before sending (a fresh calibration),
    judged on the input tokens its provider reported for it: every one passes, but the three
    Bedrock ``invoke_model`` bodies ctxguard does not read, which have no count (docs/budget.md,
    "Kept whole")."""
    accuracy = _accuracy()
    measurer = Measurer(Digester(KEY), default_counter(), Calibration())
    judged, skipped, failed = [], [], []
    for record in accuracy.records():
        p = measurer.measure(accuracy.adapter(record).normalise(record["api"], accuracy.call(record)))
        result = provider_kept_all(p, context(p), Answer(input_tokens=record["reported_input_tokens"]), "")
        if isinstance(result, Skip):
            skipped.append(record["id"])
        elif result:
            failed.append(f"{record['id']}: {result[0].detail}")
        else:
            judged.append((record["reported_input_tokens"], FLOOR * text_read(p), record["id"]))
    assert failed == []
    assert len(judged) >= 400 and len(skipped) == 3
    assert all("invoke_model" in next(r["api"] for r in accuracy.records() if r["id"] == i) for i in skipped)
    # Not by the slack alone: every report is at least half again the least read, wherever that is over 0.
    assert min(reported / least for reported, least, _ in judged if least) >= 1.5


def test_the_provider_modules_say_what_their_provider_may_read_as_less() -> None:
    """A request that lets the provider edit its context and say so is not judged; ``truncation="auto"``,
    whose answer says nothing of what it dropped, is. Gemini from 2.5 on counts tool exchanges loosely
    on Vertex AI: loose when the route is not known."""
    from ctxguard.providers import anthropic, google_genai, openai

    edits = {"edits": [{"type": "clear_tool_uses_20250919"}]}
    assert anthropic.ADAPTER.normalise("messages", {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [
        {"role": "user", "content": "hi"}], "context_management": edits}).server_edits is not None
    assert anthropic.ADAPTER.normalise("messages", {"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": [
        {"role": "user", "content": "hi"}]}).server_edits is None
    compaction = [{"type": "compaction", "compact_threshold": 100_000}]
    assert openai.ADAPTER.normalise("responses", {"model": "gpt-5", "input": "hi", "context_management": compaction}
                                    ).server_edits is not None
    assert openai.ADAPTER.normalise("responses", {"model": "gpt-5", "input": "hi", "truncation": "auto"}
                                    ).server_edits is None
    assert google_genai.ADAPTER.normalise("generate_content", {"model": "gemini-2.5-flash", "contents": "hi"}
                                          ).loose_tool_counts
    assert not google_genai.ADAPTER.normalise("generate_content", {"model": "gemini-2.0-flash", "contents": "hi"}
                                              ).loose_tool_counts
    for route in (google_genai.GEMINI_API, google_genai.VERTEX_AI):  # the route known: counted as it counts
        assert not google_genai.ADAPTER.for_route(route).normalise(
            "generate_content", {"model": "gemini-2.5-flash", "contents": "hi"}).loose_tool_counts


def test_a_failure_to_count_exactly_is_counted_and_the_check_skips(harness, llm, client, monkeypatch, internal_errors):
    """Counting the payload exactly for the answer fails: the error is swallowed and counted
    (``where="tokens"``), the check skips saying why, and the call still has one outcome per check."""
    from ctxguard.testing import Reply

    def boom(*args: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.delenv("CTXGUARD_TOKENIZER", raising=False)  # the choice is the test's (CI runs one suite eager)
    harness.start(mode="observe", tokenizer="lazy")
    monkeypatch.setattr(Measurer, "exact", boom)
    llm.script(Reply(text="ok", input_tokens=20))
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "system", "content": PROSE},
                                                             {"role": "user", "content": "and now?"}])
    assert [where for where, _ in internal_errors] == ["tokens"]
    internal_errors.clear()
    skipped = harness.spans()[0].attributes["ctxguard.checks.skipped"]
    assert "provider_kept_all: not counted exactly" in skipped
    assert harness.metric("ctxguard_checks_total", check="provider_kept_all", outcome="skip") == 1
    assert harness.metric("ctxguard_guard_errors_total", where="tokens") == 1
