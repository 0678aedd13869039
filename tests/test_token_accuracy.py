"""ctxguard's pre-flight count against what the providers reported for real recorded requests.

The corpus (tests/data/recorded/, provenance per record) is counted exactly as before a call
is sent (``bench/token_accuracy.py``): for OpenAI and Anthropic the target is the median within
±10% of the reported input tokens, and no request under-counted by more than 25% (a budget
check that under-counts lets an oversized request through). Over-counting is allowed where the
size is not knowable: a remote image is charged the most its model charges (docs/budget.md).
Ollama's, Mistral's and Anthropic's requests are each held to the target of issue 39 (within -20%
and +25% of what was reported, the median within ±10%), but for the few whose reason for being
outside it is known and written down; Gemini's by tests/providers/test_google_genai_tokens.py,
Cohere's by tests/providers/test_cohere.py; Bedrock's requests to a band each and its model
families to the median, every miss listed with its reason (docs/budget.md, "Bedrock").
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from ctxguard.tokens import default_counter

BENCH = Path(__file__).resolve().parent.parent / "bench" / "token_accuracy.py"
_spec = importlib.util.spec_from_file_location("token_accuracy", BENCH)
assert _spec is not None and _spec.loader is not None
accuracy = importlib.util.module_from_spec(_spec)
sys.modules["token_accuracy"] = accuracy  # dataclasses look their module up there
_spec.loader.exec_module(accuracy)

pytestmark = pytest.mark.skipif(default_counter().name != "tiktoken", reason="the target is for tiktoken counts")


#: The providers whose accounting the target holds today.
HELD = ("openai", "anthropic")


def test_median_within_ten_percent_and_no_request_under_by_more_than_a_quarter():
    rows = accuracy.measure(providers=HELD)
    summary = accuracy.summary(rows)
    assert summary["requests"] >= 30
    assert -10 <= summary["median"] <= 10, accuracy.table(rows, markdown=False)
    under = [f"{row.id}: {row.error:+.1f}%" for row in rows if row.error < -25]
    assert not under, under


@pytest.mark.parametrize("provider", HELD)
def test_each_provider_meets_the_median_on_its_own(provider):
    rows = accuracy.measure(providers=(provider,))
    assert len(rows) >= 12
    assert -10 <= accuracy.summary(rows)["median"] <= 10


#: The target for each request (issue 39), in percent of what the provider reported: none
#: under-counted by more than 20%, none over-counted by more than 25%.
BAND = (-20.0, 25.0)
#: The requests a provider's accounting is held to per record, and those outside the target, each
#: with the band it is held to instead and why it is outside (docs/budget.md, "Accuracy on recorded
#: traffic, per provider"); every other request of the provider is held to ``BAND``.
OUTSIDE: dict[str, dict[str, tuple[tuple[float, float], str]]] = {
    "ollama": {},
    "openai": {
        "pydai-responses-image-url": (
            (200.0, 250.0), "an image by URL, never fetched: charged the most its model charges for one"),
    },
    "mistral": {
        "pydai-mistral-model-sees-multiple-images-mistral-1": (
            (300.0, 400.0), "an image by URL, never fetched: charged the most its model's encoder makes of one"),
        # Recorded 2024-08-27 (the answer's created and Date), when mistral-small-latest named Mistral
        # Small 24.02 (24.09 came in September 2024): every mistral-common tokenizer, v3 to Tekken,
        # counts these two at exactly 24 and 26, as reported, with no model settings (and the third
        # request of the set, with a tool, at 96 with SentencePiece v3, 92 with Tekken: 96 reported).
        # Re-recorded 2026-02-25, the second still read 26; on 2026-07-20 the alias read 28 for a
        # 16-token prompt (pydantic-ai): Mistral Small 4, whose v15 template writes 11 tokens of them.
        "openinference-mistral-asynchronous-streaming-chat-completions-emits-expected-span": (
            (25.0, 45.0), "recorded when mistral-small-latest was Mistral Small 24.02, without tokenizer v15's "
                          "model settings (11 tokens) the alias writes now"),
        "openinference-mistral-synchronous-streaming-chat-completions-emits-expected-span-f": (
            (25.0, 45.0), "the same"),
    },
    "anthropic": {
        "pydai-anthropic-image-url": (
            (400.0, 450.0), "an image by URL, never fetched: charged the most its model charges for one"),
    },
}


#: Requests a rule of their provider's accounting brought into the target (docs/budget.md), each held
#: to a tighter band than the target's, with the rule: without it, each is outside the target again.
PINNED: dict[str, dict[str, tuple[tuple[float, float], str]]] = {
    "openai": {
        "n0isy-chat-long-tool-call-result": (
            (-5.0, 5.0), "a tool call's arguments as OpenAI reads them, compact JSON (+28.9% as sent, pretty-printed)"),
        "otel-chat-tools-2": (
            (-10.0, 10.0), "two parallel calls as one multi_tool_use.parallel call (-21.2% as two, compacted)"),
    },
    "mistral": {
        # Not a document by URL: pydantic-ai fetched it (its cassette's first interaction is the GET)
        # and sent its text inline. Mistral's Tekken (mistral-common's tekken_240911.json) counts the
        # request at exactly the 2,297 reported, cl100k 1,685: Tekken splits capital-letter names
        # (" SIGN" is " S", "IGN"), 2,281 tokens of the document's text to cl100k's 1,669. The rate
        # makes 365 of the 612 (it is measured on general text, not here), its hex codes' digits, which
        # Tekken takes one a token, 66 more; the rest is this table's names split finer still.
        "pydai-mistral-text-document-url-input": (
            (-12.0, -5.0), "a table of codes and capital-letter names: all-caps text at Mistral's measured rate, "
                           "0.12 tokens more a capital, and each digit a token (-26.6% without either, "
                           "-10.8% without the digits)"),
        # Two hex ids: Tekken counts it at exactly the 49 reported, each digit a token.
        "pydai-mistral-text-document-as-binary-content-input": (
            (-3.0, 3.0), "each digit a token, as every Mistral tokenizer takes them (-12.2% three a token)"),
    },
    "anthropic": {
        "pydai-anthropic-thinking-2": (
            (-10.0, 0.0), "an earlier answer's thinking, which Claude 3.7 does not read, not counted (+36.1% counted)"),
        "pydai-anthropic-tool-thinking-2": (
            (-5.0, 5.0), "the thinking of the tool loop since the last query, which Claude Sonnet 4 reads, counted "
                         "(-14.1% left out as an earlier turn's)"),
    },
    "google_genai": {
        "pydai-google-genai-google-model-structured-output": (
            (-10.0, 10.0), "Gemini 2.0 counts a declaration's parameters_json_schema as the SDK's local tokenizer "
                           "reads it, not at all (+33.3% with its texts counted)"),
        "pydai-google-genai-google-model-structured-output-1": (
            (-10.0, 10.0), "the same declarations, and the call and result that followed (+24.2% with them counted)"),
    },
    "cohere": {
        "lc-cohere-cohere-documents": (
            (-2.0, 2.0), "Command R's RAG prompt as the API renders it, 163 tokens beyond the published one "
                         "(-23.5% without them)"),
        "lc-cohere-cohere-who-founded-cohere-with-custom-documents": (
            (-2.0, 2.0), "the same, with three documents (-22.3% without them)"),
    },
}


@pytest.mark.parametrize("provider", list(OUTSIDE))
def test_each_recorded_request_is_within_its_band(provider):
    """Every recorded request of the provider is counted within the target of what was reported, or
    within the band of the known reason it is not (or of the rule that brought it in); a median within
    ±10% too."""
    rows = accuracy.measure(providers=(provider,))
    outside = {**OUTSIDE[provider], **PINNED.get(provider, {})}
    assert set(outside) <= {row.id for row in rows}
    wrong = []
    for row in rows:
        low, high = outside[row.id][0] if row.id in outside else BAND
        if not low <= row.error <= high:
            wrong.append(f"{row.id} ({row.model}): {row.counted} counted, {row.reported} reported, {row.error:+.1f}% "
                         f"not within [{low:+.0f}%, {high:+.0f}%]")
    assert not wrong, "\n".join(wrong)
    assert -10 <= accuracy.summary(rows)["median"] <= 10


@pytest.mark.parametrize("provider", sorted(set(PINNED) - set(OUTSIDE)))
def test_each_pinned_request_is_within_its_band(provider):
    """The requests a rule brought into the target, of the providers whose other requests are held
    elsewhere (Gemini's by tests/providers/test_google_genai_tokens.py, Cohere's by
    tests/providers/test_cohere.py): each within its tighter band, which it leaves without its rule."""
    errors = {row.id: row for row in accuracy.measure(providers=(provider,))}
    assert set(PINNED[provider]) <= set(errors)
    wrong = [f"{i}: {errors[i].counted} counted, {errors[i].reported} reported, {errors[i].error:+.1f}% ({why})"
             for i, ((low, high), why) in PINNED[provider].items() if not low <= errors[i].error <= high]
    assert not wrong, "\n".join(wrong)


def _not_read(record: dict) -> bool:
    """A Bedrock ``invoke_model`` body of a format ctxguard does not read: AI21 Jurassic's (retired),
    a model imported from SageMaker (its own format), Claude's text completion (Claude 2's)."""
    return record["api"].startswith("invoke_model") and (
        record.get("model_family") in ("ai21", "imported-model")
        or (record.get("model_family") == "anthropic" and "prompt" in record["body"]))


def test_every_recorded_request_is_read_whole():
    """No adapter gives up on a record (an unreadable request would count as almost nothing), but
    the Bedrock ``invoke_model`` bodies of formats ctxguard does not read, which have no count."""
    for record in accuracy.records():
        view = accuracy.adapter(record).normalise(record["api"], accuracy.call(record))
        if _not_read(record):
            assert view.unreadable is not None and not view.items, record["id"]
            continue
        assert view.unreadable is None, record["id"]
        assert view.items, record["id"]


def test_every_record_says_where_it_came_from_and_keeps_no_whole_image():
    ids = set()
    for record in accuracy.records():
        assert record["id"] not in ids
        ids.add(record["id"])
        source = record["source"]
        assert source["repo"] and source["path"] and re.fullmatch(r"[0-9a-f]{40}", source["commit"]), record["id"]
        assert record["reported_input_tokens"] > 0
        # Base64 images are cut to their header: nothing in a body is an image's worth of data.
        assert max(map(len, re.findall(r"[A-Za-z0-9+/=]{200,}", json.dumps(record["body"]))), default=0) < 1024


def test_the_report_covers_every_provider_and_its_model_families():
    """The per-provider report runs over the whole corpus: every provider ctxguard reads has
    records, each with a median, and Bedrock's are reported per family and request format.
    OpenAI's, Anthropic's, Ollama's and Mistral's numbers are held to the target (the tests above)."""
    rows = accuracy.measure()
    groups = accuracy.groups(rows)
    for provider in accuracy.PROVIDERS:
        assert groups.get((provider, "")), provider
    bedrock = {family for provider, family in groups if provider == "bedrock" and family}
    assert any(family.endswith(" converse") for family in bedrock), bedrock
    assert any(family.endswith(" invoke_model") for family in bedrock), bedrock
    printed = accuracy.report(rows, markdown=False)
    print(printed)  # today's numbers, with -s: not held to a target yet
    assert all(provider in printed for provider in accuracy.PROVIDERS)
    assert len(printed.splitlines()) == len(groups) + 1


# -- Bedrock: each model family's prompt format (docs/budget.md, "Bedrock") ------------------------------

#: The band every Bedrock request is held to: under-counted by at most 20%, over-counted by at most 25%.
BAND = (-20.0, 25.0)
#: The Bedrock requests outside it, each with why: something the request does not show, a tokenizer
#: unlike cl100k on that text, or an accounting outside the family templates. A request brought into
#: the band leaves this list (the test fails on a stale entry).
BEDROCK_MISSES = {
    # Claude: the Anthropic module's accounting (providers/anthropic.py), shared by Converse and invoke_model.
    "pydai-bedrock-bedrock-cache-point-adds-cache-control-claude-sonnet-4-5": "all-caps text: Claude's tokenizer",
    "pydai-bedrock-bedrock-single-tool-choice-preserves-cache-anthropic": "all-caps text: Claude's tokenizer",
    "pydai-bedrock-bedrock-anthropic-message-history-starting-with-response": "an assistant-first history: +13",
    # Amazon's tokenizers.
    "pydai-bedrock-bedrock-cache-point-adds-cache-control-nova-lite": "all-caps text: Nova's tokenizer",
    "openllmetry-bedrock-guardrail-invoke-stream": "the guardrail blocked the input: 6 reported for 8 tokens",
    # Families with no template here: OpenAI Chat's framing.
    "pydai-bedrock-bedrock-writer-tool-result-followed-by-text-accepted": "Palmyra X4: no template published",
}
#: The Bedrock families (and request formats) whose median misses ±10%, and why.
BEDROCK_FAMILY_MISSES = {
    "writer-palmyra converse": "no template published",
    "zai-glm converse": "no template here",
}
#: The Bedrock ``invoke_model`` bodies ctxguard does not read (``_not_read``): no count at all, so no
#: error either; the bench shows them apart (its ``not read`` column) and leaves them out of its error
#: figures, so the families of no other request (AI21, an imported model) have no median.
BEDROCK_NOT_READ = {
    "openllmetry-bedrock-ai21-j2-completion-string-content": "AI21 Jurassic's body is not read",
    "openllmetry-bedrock-anthropic-2-completion": "Claude 2's text completion is not read",
    "openllmetry-bedrock-imported-model-completion": "an imported model's body is not read",
}


#: Bedrock requests a rule of their family's format brought into the band, each held to a tighter one,
#: with the rule: without it, each is outside the band again.
BEDROCK_PINNED: dict[str, tuple[tuple[float, float], str]] = {
    "otel-bedrock-invoke-model-with-response-stream-close-before-consumption-a-2": (
        (-5.0, 5.0), "Claude 2's Human:/Assistant: prompt, 4 tokens a turn and 5 to start the reply (-21.4% "
                     "with Claude 3's framing)"),
    "pydai-bedrock-bedrock-native-output-nvidia": (
        (-10.0, 10.0), "Nemotron Nano 2's template, its system turn written always (-27.3% with OpenAI Chat's)"),
    "pydai-bedrock-bedrock-native-output-minimax": (
        (-5.0, 5.0), "MiniMax M2's template: its system turn with its identity written always, ]~b]role markers, "
                     "the reply's <think>; the output schema not written (-40.0% with OpenAI Chat's)"),
    "pydai-bedrock-bedrock-inference-profile-converse": (
        (-5.0, 5.0), "an ARN that names no model framed as the least family (none) so calibration cannot learn a "
                     "text ratio below 1 (+75.0% with OpenAI Chat's framing)"),
    # Claude's newer tokenizer (anthropic.text_scale: text at 1.3 times cl100k's count on Opus 4.7 and
    # later and Claude 5), and no thinking prompt on a model that thinks unasked (anthropic.thinks_by_default).
    "lc-aws-bedrock-thinking-v0": (
        (-10.0, 10.0), "Sonnet 5's tokenizer, and adaptive thinking, on by default, adding no prompt: 44 for 46 "
                       "(+39.1% with cl100k's count and Claude 3.7's THINKING_PROMPT, -23.9% with the prompt left "
                       "out only, +58.7% with the tokenizer only)"),
    "lc-aws-bedrock-thinking-v1": (
        (-15.0, 5.0), "Sonnet 5's tokenizer on 926 text tokens (-31.7% at cl100k's count); the rest, -11.4%, its "
                      "earlier thinking counted as its summary"),
    "pydai-bedrock-mid-conversation-system-prompt-on-bedrock": (
        (-5.0, 5.0), "Opus 4.8's tokenizer: 67 for 68 (-17.6% at cl100k's count)"),
}


def test_each_bedrock_request_is_within_its_band():
    """Every Bedrock request, counted with its model family's prompt format on the first call (no
    calibration), is within the band, but the listed misses, each for its reason."""
    rows = accuracy.measure(providers=("bedrock",))
    assert len(rows) >= 160
    assert {row.id for row in rows if row.unread} == set(BEDROCK_NOT_READ)
    outside = {row.id: f"{row.error:+.1f}%" for row in rows
               if not row.unread and not BAND[0] <= row.error <= BAND[1]}
    assert {i: e for i, e in outside.items() if i not in BEDROCK_MISSES} == {}, accuracy.table(rows, markdown=False)
    assert set(BEDROCK_MISSES) - set(outside) == set()  # a miss brought into the band leaves the list
    errors = {row.id: row.error for row in rows}
    wrong = {i: f"{errors[i]:+.1f}% ({why})" for i, ((low, high), why) in BEDROCK_PINNED.items()
             if not low <= errors[i] <= high}
    assert wrong == {}


def test_each_bedrock_family_meets_the_median():
    groups = accuracy.groups(accuracy.measure(providers=("bedrock",)))
    medians = {family: accuracy.summary(rows)["median"] for (_, family), rows in groups.items()
               if family and not all(row.unread for row in rows)}
    missed = {family: f"{median:+.1f}%" for family, median in medians.items() if not -10 <= median <= 10}
    assert set(missed) == set(BEDROCK_FAMILY_MISSES), missed
    assert -10 <= accuracy.summary(groups["bedrock", ""])["median"] <= 10


def test_after_five_reports_of_a_model_every_providers_median_is_within_five_percent():
    """Issue 39's second target: once a model's calibration has learnt from 5 reports (other
    recorded requests of the same model), what ctxguard shows is within ±5% of what was reported,
    in the median of each provider with a model recorded more than 5 times."""
    rows = accuracy.measure_after(5)
    providers = {row.provider for row in rows}
    assert {"openai", "google_genai", "cohere", "bedrock", "mistral"} <= providers
    for provider in sorted(providers):
        median = accuracy.summary([row for row in rows if row.provider == provider])["median"]
        assert -5 <= median <= 5, f"{provider}: {median:+.1f}%"


def test_after_five_reports_the_newer_claude_tokenizer_is_not_scaled_twice():
    """Sonnet 5's ten recorded requests: counted at its tokenizer's ratio on the first call, and once its
    calibration has learnt from 5 reports (of unscaled counts) at the learnt factor only: median +0.4%,
    pinned within ±2% (+4.2% with the ratio applied on top of the learnt factor: these requests are mostly
    fixed tokens, the citations and tool prompts, so the factor learnt is ~1.1 and the excess small)."""
    rows = [row for row in accuracy.measure_after(5, providers=("bedrock",)) if "claude-sonnet-5" in row.model]
    assert len(rows) == 10
    assert -2 <= accuracy.summary(rows)["median"] <= 2


def test_a_request_not_read_is_in_no_error_figure():
    """A body ctxguard does not read has no count (issue 39, point 3): the bench shows it as not read,
    with no count and no error, and leaves it out of the median and the worst under- and over-count
    (a measured -88% it would otherwise show)."""
    rows = accuracy.measure(providers=("bedrock",))
    unread = [row for row in rows if row.unread]
    assert unread
    s = accuracy.summary(rows)
    read = [row.error for row in rows if not row.unread]
    assert (s["worst_under"], s["worst_over"], s["unread"]) == (min(read), max(read), len(unread))
    assert s["worst_under"] > min(row.error for row in unread)
    printed = accuracy.table(unread, markdown=False)
    assert printed.count("not read") == len(unread) and "%" not in printed
    ai21 = [row for row in unread if row.family == "ai21"]
    assert "—" in accuracy.report(ai21, markdown=False).splitlines()[1]
