"""The characters of a Gemini thought signature a token, fitted on one half of the recorded corpus.

    python bench/gemini_fit.py

A function call's ``thought_signature`` given back to a Gemini 3 model on the Gemini Developer API
brings that turn's thinking back into the prompt; Google documents no size for it. Fitted here on
the records of the fit half (``token_accuracy.half``) that give signatures back to Gemini 3 on the
Developer API (their ``host``), each signature at its original length (``token_accuracy.uncut``):
their signatures' characters over the tokens the provider reported beyond ctxguard's count without
them (``google_genai.CURRENT``, which ``SIGNED`` is but for the signatures). The printout gives each
record, the fit and the value in the code (``google_genai.SIGNATURE_CHARS``);
``python bench/token_accuracy.py --provider google_genai --half held`` shows how it does on the
records it was not fitted on.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
import token_accuracy as accuracy  # noqa: E402  # bench/token_accuracy.py, beside this script


def signature_chars(body: Mapping[str, Any]) -> int:
    """The characters of the signatures the body's function calls give back."""
    return sum(len(part.get("thoughtSignature") or part.get("thought_signature") or "")
               for content in body.get("contents") or () for part in content.get("parts") or ()
               if "functionCall" in part or "function_call" in part)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from ctxguard.digest import Digester
    from ctxguard.measure import Measurer
    from ctxguard.providers import google_genai
    from ctxguard.tokens import Calibration, default_counter

    measurer = Measurer(Digester(b"gemini-fit"), default_counter(), Calibration())
    total_chars = total_short = 0
    print(f"{'record':<72} {'chars':>6} {'short':>6} {'chars/token':>12}")
    for record in accuracy.records():
        if (record["provider"] != "google_genai" or accuracy.half(record["id"]) != "fit"
                or google_genai.counting(record["model"], accuracy.route(record)) is not google_genai.SIGNED):
            continue
        chars = signature_chars(accuracy.uncut(record))
        if not chars:
            continue
        view = google_genai.ADAPTER.normalise(record["api"], accuracy.call(record))  # route unknown: CURRENT
        short = record["reported_input_tokens"] - measurer.measure(view).raw_tokens
        total_chars += chars
        total_short += short
        print(f"{record['id'][:72]:<72} {chars:>6} {short:>6} {chars / short if short > 0 else float('nan'):>12.2f}")
    print(f"\nfit: {total_chars} characters over {total_short} tokens = {total_chars / total_short:.2f} a token "
          f"(the code: google_genai.SIGNATURE_CHARS = {google_genai.SIGNATURE_CHARS})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
