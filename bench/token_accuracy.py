"""How close ctxguard's pre-flight token count is to what the provider then reported.

    python bench/token_accuracy.py [--corpus DIR] [--estimate] [--markdown]

For each request of the recorded corpus (tests/data/recorded/: real request bodies sent
to the OpenAI and Anthropic APIs by other projects' test suites, with the input tokens
the API reported; provenance per record, see its README), runs ctxguard's own counting
as it runs before a call is sent: the provider adapter's ``normalise(api, body)``, then
``Measurer.measure`` with a fresh ``Calibration`` (no correction learnt from earlier
answers), and prints one row per request (counted, reported, error), then the median
error, the worst under-count and the worst over-count, overall and per provider.

``--estimate`` counts with the 4-characters-a-token estimator instead of tiktoken (what an
install without ``ctxguard[tiktoken]`` gets). Anthropic's usage counts cache reads and
writes as input too, so ``reported`` is their sum (what ``Answer.input_tokens`` reads).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "recorded"


@dataclass(frozen=True)
class Row:
    id: str
    provider: str
    model: str
    kind: str
    counted: int
    reported: int

    @property
    def error(self) -> float:
        """(counted - reported) / reported, in percent: negative is an under-count."""
        return 100.0 * (self.counted - self.reported) / self.reported


def records(corpus: Path = CORPUS) -> list[dict]:
    return [json.loads(line) for path in sorted(corpus.glob("*.jsonl")) for line in path.open(encoding="utf-8")]


def measure(corpus: Path = CORPUS, *, estimate: bool = False) -> list[Row]:
    """ctxguard's pre-flight count of every recorded request."""
    from ctxguard.digest import Digester
    from ctxguard.measure import Measurer
    from ctxguard.providers import anthropic, openai
    from ctxguard.tokens import Calibration, EstimateCounter, default_counter

    adapters = {"openai": openai.ADAPTER, "anthropic": anthropic.ADAPTER}
    counter = EstimateCounter() if estimate else default_counter()
    measurer = Measurer(Digester(b"token-accuracy"), counter, Calibration())
    rows = []
    for record in records(corpus):
        body = record["body"]
        view = adapters[record["provider"]].normalise(record["api"], body)
        payload = measurer.measure(view)
        rows.append(Row(record["id"], record["provider"], str(body.get("model")), record["kind"], payload.raw_tokens,
                        record["reported_input_tokens"]))
    return rows


def summary(rows: list[Row]) -> dict[str, float]:
    errors = [row.error for row in rows]
    return {"requests": len(rows), "median": statistics.median(errors), "worst_under": min(errors),
            "worst_over": max(errors), "within_10": sum(abs(e) <= 10 for e in errors) / len(errors)}


def table(rows: list[Row], markdown: bool) -> str:
    header = ("record", "provider", "model", "kind", "counted", "reported", "error")
    lines = []
    if markdown:
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * 3 + "---|---:|---:|---:|"]
        lines += [f"| {r.id} | {r.provider} | {r.model} | {r.kind} | {r.counted:,} | {r.reported:,} | {r.error:+.1f}% |"
                  for r in rows]
    else:
        lines.append(f"{header[0]:<44} {header[1]:<9} {header[2]:<28} {header[3]:<32} {header[4]:>8} {header[5]:>8} "
                     f"{header[6]:>8}")
        lines += [f"{r.id:<44} {r.provider:<9} {r.model[:28]:<28} {r.kind[:32]:<32} {r.counted:>8,} {r.reported:>8,} "
                  f"{r.error:>+7.1f}%" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="recorded *.jsonl directory (default: the tests')")
    parser.add_argument("--estimate", action="store_true", help="count with the estimator, not tiktoken")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from ctxguard.tokens import default_counter

    rows = sorted(measure(args.corpus, estimate=args.estimate), key=lambda r: (r.provider, r.kind, r.id))
    print(f"counter: {'estimate' if args.estimate else default_counter().name}")
    print(table(rows, args.markdown))
    print()
    for name, subset in [("all", rows), *((p, [r for r in rows if r.provider == p]) for p in ("openai", "anthropic"))]:
        s = summary(subset)
        print(f"{name:<10} {s['requests']:>3} requests  median {s['median']:+.1f}%  "
              f"worst under-count {s['worst_under']:+.1f}%  worst over-count {s['worst_over']:+.1f}%  "
              f"within ±10%: {s['within_10']:.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
