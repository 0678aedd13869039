"""Gemini's own accounting (docs/budget.md, "Gemini") against the 132 real Gemini requests of the
recorded corpus (tests/data/recorded/), each counted before sending, on its first call (no
calibration), as ``bench/token_accuracy.py --provider google_genai`` counts them: with the accounting
of the API the record reached (its ``host``: the Gemini Developer API or Vertex AI), its cut thought
signatures at their original length.

The targets (issue 39): the median within ±10%, no request under-counted by more than 20%, none
over-counted by more than 25%. A record meets its band also when the count is within a token of
the report (one word of a short prompt can be a token more or less to Gemini's tokenizer than to
``cl100k_base``: "Hello" is 2 to Gemini 1.5). The records that miss the targets, for reasons the
count before sending cannot see, are held to bands of their own, each with its reason: a change
that moves them further fails too.
"""

from __future__ import annotations

import hashlib
import statistics

import pytest

from ctxguard.tokens import default_counter
from tests.test_token_accuracy import accuracy

pytestmark = pytest.mark.skipif(default_counter().name != "tiktoken",
                                reason="the target is for tiktoken counts")

#: (lowest, highest) error in percent, the targets'.
BAND = (-20.0, 25.0)

#: Records held to a band of their own, and why.
KNOWN: dict[str, tuple[tuple[float, float], str]] = {
    # The URL and the answers name gemini-2.0-flash, yet the answers of the cassette (recorded
    # 2026-05-20, by their responseIds) report thoughtsTokenCount 89 and 267 and carry thought
    # signatures, neither of which Gemini 2.0 makes: a thinking model answered, and counted more.
    # Counted as Gemini 2.5 and later count (a token a content, declarations as their JSON), the
    # first is 83 (-24%); the second, with its 528-character signature charged as Gemini 3 on the
    # Developer API charges it, 242 (-18%): no rule of the request says so before it is sent.
    "openinference-google-genai-sub-agent-session-id-not-overwritten-by-adk-internal-uuid-2": (
        (-65.0, 25.0), "named gemini-2.0-flash, answered by a thinking model, its signature given back"),
    "openinference-google-genai-sub-agent-session-id-not-overwritten-by-adk-internal-uuid": (
        (-50.0, 25.0), "named gemini-2.0-flash, answered by a thinking model (see the next record)"),
    # No $ref in the body (pydantic-ai inlines it, and its siblings, before sending); the answer's
    # usage has promptTokenCount 154 and nothing else of the prompt (thoughts, 117, apart); the only
    # request to Gemini 2.5 or later with mode ANY and no allowedFunctionNames in the corpus.
    "pydai-google-genai-ref-sibling-wire-contract-google-structured-dict": (
        (-35.0, 25.0), "a nested object parameter on Gemini 2.5 Flash, 46 tokens more than its JSON: not explained"),
}


@pytest.fixture(scope="module")
def rows():
    return accuracy.measure(providers=("google_genai",))


def _half(record_id: str) -> int:
    """The half of the corpus a record is in: the constants were fitted on half 0."""
    return int(hashlib.sha1(record_id.encode()).hexdigest(), 16) % 2


def test_every_gemini_record_is_within_its_band(rows):
    """Before Gemini's own accounting, 93 of the 132 were outside the targets' band (median +54%)."""
    assert len(rows) >= 130
    outside = []
    for row in rows:
        (low, high), _ = KNOWN.get(row.id, (BAND, ""))
        if not (low <= row.error <= high or abs(row.counted - row.reported) <= 1):
            outside.append(f"{row.id}: {row.counted} counted, {row.reported} reported ({row.error:+.1f}%)")
    assert not outside, "\n".join(outside)
    assert set(KNOWN) <= {row.id for row in rows}


def test_the_median_is_within_ten_percent_on_either_half(rows):
    """The constants (``google_genai.CLASSIC``, ``CURRENT``) were fitted on one half of the records;
    the other half meets the target as well."""
    for half in (0, 1):
        errors = [row.error for row in rows if _half(row.id) == half]
        assert len(errors) >= 50
        assert -10 <= statistics.median(errors) <= 10, half
    assert -10 <= statistics.median(row.error for row in rows) <= 10


def test_most_records_meet_the_targets_band_itself(rows):
    """The records with a band of their own are the few the count before sending cannot see."""
    within = [row for row in rows if row.id not in KNOWN]
    assert len(KNOWN) <= 12
    assert sum(abs(row.error) <= 10 for row in rows) >= 0.75 * len(rows)
    assert all(BAND[0] <= row.error <= BAND[1] or abs(row.counted - row.reported) <= 1 for row in within)


#: The Gemini 3 requests to the Developer API whose function calls give thought signatures back, and
#: the Vertex AI requests with tools, that were outside the targets while the count was made before
#: the route was known (docs/budget.md, "Gemini"): signatures not counted, -32% to -74%; Vertex AI
#: counted as the Developer API, +31% to +51%.
ROUTED = ("pydai-google-genai-google-streaming-tool-call-thought-signature-1",
          "pydai-google-genai-native-output-with-function-tools-1",
          "pydai-google-genai-native-output-with-function-tools-stream",
          "pydai-google-genai-google-deferred-capability-announcement-live-2",
          "otel-google-genai-function-call-choice", "otel-google-genai-tool-events",
          "pydai-google-genai-multimodal-tool-return-matrix-tool-return-content-url-force-12")


def test_the_requests_counted_by_their_route_are_within_the_targets(rows):
    """Vertex AI counted as Gemini 2.0 counts, whatever the model; a signature given back to Gemini 3
    on the Developer API charged a token per ``SIGNATURE_CHARS`` characters. Each of these, counted
    without its route (``ADAPTER``, the route unknown), is outside the targets again."""
    from ctxguard.digest import Digester
    from ctxguard.measure import Measurer
    from ctxguard.providers.google_genai import ADAPTER
    from ctxguard.tokens import Calibration

    counted = {row.id: row for row in rows}
    measurer = Measurer(Digester(b"k" * 16), default_counter(), Calibration())
    for record in accuracy.records():
        if record["id"] not in ROUTED:
            continue
        row = counted[record["id"]]
        assert BAND[0] <= row.error <= BAND[1], f"{row.id}: {row.error:+.1f}%"
        unrouted = measurer.measure(ADAPTER.normalise(record["api"], accuracy.call(record))).raw_tokens
        error = 100.0 * (unrouted - row.reported) / row.reported
        assert not BAND[0] <= error <= BAND[1], f"{row.id}: {error:+.1f}% without its route"


def test_each_record_says_which_api_it_reached_and_its_signatures_are_replayed_whole():
    """The route is the record's: the host its cassette sent it to; a signature the corpus cut is
    padded back to the length its note gives."""
    from ctxguard.providers.google_genai import GEMINI_API, VERTEX_AI

    gemini = [r for r in accuracy.records() if r["provider"] == "google_genai"]
    routes = [accuracy.route(r) for r in gemini]
    assert set(routes) == {GEMINI_API, VERTEX_AI}
    assert routes.count(VERTEX_AI) == 16
    cut = {r["id"]: r for r in gemini if "cut to 64" in r["source"].get("note", "")}
    assert len(cut) == 6
    record = cut["pydai-google-genai-google-streaming-tool-call-thought-signature-1"]
    signature = accuracy.uncut(record)["contents"][1]["parts"][0]["thoughtSignature"]
    assert len(signature) == 1_408 and signature[:64] == record["body"]["contents"][1]["parts"][0]["thoughtSignature"]
