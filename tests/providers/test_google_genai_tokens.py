"""Gemini's own accounting (docs/budget.md, "Gemini") against the 132 real Gemini requests of the
recorded corpus (tests/data/recorded/), each counted before sending, on its first call (no
calibration), as ``bench/token_accuracy.py --provider google_genai`` counts them.

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

#: Thought signatures: a function call's signature given back to a Gemini 3 model on the Gemini
#: Developer API brings its thinking back into the prompt, about a token per 4 to 9 characters of
#: the signature, and ``promptTokenCount`` counts it; Vertex AI counts none (two records below, 1,248
#: and 5,380 characters). The count is made before ctxguard knows which endpoint the call reaches,
#: so signatures are not counted (docs/budget.md, "Gemini").
SIGNATURE = "a thought signature on the Developer API (not counted)"
#: Vertex AI counts function declarations and calls near the texts in them, as Gemini 2.0 does, and
#: no token a content: its requests to Gemini 2.5 and 3 are over-counted where the Developer API's
#: are not.
VERTEX = "Vertex AI counts function declarations and calls below their JSON"

#: Records held to a band of their own, and why.
KNOWN: dict[str, tuple[tuple[float, float], str]] = {
    "pydai-google-genai-google-streaming-tool-call-thought-signature-1": ((-80.0, 25.0), SIGNATURE),
    "pydai-google-genai-native-output-with-function-tools-1": ((-65.0, 25.0), SIGNATURE),
    "pydai-google-genai-native-output-with-function-tools-stream": ((-55.0, 25.0), SIGNATURE),
    "pydai-google-genai-google-deferred-capability-announcement-live-2": ((-40.0, 25.0), SIGNATURE),
    # The URL names gemini-2.0-flash, yet the answer carried a thought signature, which Gemini 2.0
    # does not make: another model answered, and counted more.
    "openinference-google-genai-sub-agent-session-id-not-overwritten-by-adk-internal-uuid-2": ((-65.0, 25.0),
                                                                                               SIGNATURE),
    "openinference-google-genai-sub-agent-session-id-not-overwritten-by-adk-internal-uuid": (
        (-50.0, 25.0), "named gemini-2.0-flash, answered by a thinking model (see the next record)"),
    "pydai-google-genai-ref-sibling-wire-contract-google-structured-dict": (
        (-35.0, 25.0), "a nested object parameter on Gemini 2.5 Flash, 46 tokens more than its JSON: not explained"),
    "otel-google-genai-function-call-choice": ((-20.0, 40.0), VERTEX),
    "otel-google-genai-tool-events": ((-20.0, 60.0), VERTEX),
    "pydai-google-genai-multimodal-tool-return-matrix-tool-return-content-url-force-12": ((-20.0, 45.0), VERTEX),
    "pydai-google-genai-google-model-structured-output": (
        (-20.0, 40.0), "HTML-like tags in a tool description, which cl100k cuts finer than Gemini's tokenizer"),
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
