"""How close ctxguard's pre-flight token count is to what the provider then reported.

    python bench/token_accuracy.py [--corpus DIR] [--estimate] [--markdown] [--provider P] [--summary]
    python bench/token_accuracy.py --teaching   # what a report teaches calibration, by its text's size

For each request of the recorded corpus (tests/data/recorded/: real request bodies sent to
OpenAI, Anthropic, Gemini, Mistral, Cohere, Ollama and Bedrock by other projects' test
suites, with the input tokens the provider reported; provenance per record, see its README),
runs ctxguard's own counting as it runs before a call is sent: the body as its SDK call
site's arguments (``call``), the provider adapter's ``normalise(api, kwargs)`` with the
accounting of the API the record reached (``adapter``: a Gemini record's ``host``), then
``Measurer.measure`` with a fresh ``Calibration`` (no correction learnt from earlier
answers), and prints one row per request (counted, reported, error), then per provider and
per model family: how many requests, the median error, the worst under-count and the worst
over-count. A request the adapter gives up on (``unreadable``: the Bedrock ``invoke_model``
bodies of formats ctxguard does not read) has no count in ctxguard (the span says why, issue 39
point 3): its row shows no count and no error, and it is left out of every error figure (median,
worst under, worst over, within ±10%); the ``not read`` column counts such requests.

``--estimate`` counts with the 4-characters-a-token estimator instead of tiktoken (what an
install without ``ctxguard[tiktoken]`` gets). ``reported`` is what ``Answer.input_tokens``
reads for each provider (the corpus README says which field). Records marked ``body_mismatch``
(a body edited after it was recorded: the count is another request's) are left out.

``--half fit`` / ``--half held``: only the records of one half of the corpus, split by a hash of
their ids (``half``). Constants measured on the corpus are fitted on the fit half
(bench/bedrock_fit.py); the held half is what they were not fitted on.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import re
import statistics
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "recorded"


#: Every provider the corpus holds requests for, by ctxguard's provider module name.
PROVIDERS = ("openai", "anthropic", "google_genai", "mistral", "cohere", "ollama", "bedrock")


@dataclass(frozen=True)
class Row:
    id: str
    provider: str
    model: str
    kind: str
    counted: int
    reported: int
    api: str = ""
    #: The model family (``model_family`` of the record), else the provider's name.
    family: str = ""
    #: The adapter gave up on the request (``RequestView.unreadable``): nothing of it was counted.
    unread: bool = False

    @property
    def error(self) -> float:
        """(counted - reported) / reported, in percent: negative is an under-count."""
        return 100.0 * (self.counted - self.reported) / self.reported


def records(corpus: Path = CORPUS) -> list[dict]:
    return [json.loads(line) for path in sorted(corpus.glob("*.jsonl")) for line in path.open(encoding="utf-8")]


#: The corpus's two halves: constants measured on it are fitted on one, checked on the other.
HALVES = ("fit", "held")


def half(record_id: str) -> str:
    """``fit`` or ``held``, by the parity of the first byte of a hash of the record's id: a split
    that no choice of records made, and that stays put as records are added."""
    return HALVES[hashlib.blake2b(record_id.encode(), digest_size=8).digest()[0] % 2]


#: A signature the corpus cut, as its record's note says: ``opaque thoughtSignature at
#: .contents[1].parts[0].thoughtSignature (1,408 characters) cut to 64``.
_CUT = re.compile(r"opaque (\w+) at ((?:\.\w+|\[\d+\])+) \(([\d,]+) characters\) cut to \d+")


def uncut(record: Mapping[str, Any]) -> dict[str, Any]:
    """The record's body with each signature the corpus cut (``source.note``) padded back to its
    original length with base64 characters (its kept characters, repeated): what the provider
    counted was the whole signature, and its length is what Gemini charges for it."""
    body = json.loads(json.dumps(record["body"]))
    for found in _CUT.finditer(record["source"].get("note", "")):
        *path, key = re.findall(r"\w+", found[2])
        holder: Any = body
        for step in path:
            holder = holder[int(step)] if step.isdigit() else holder[step]
        kept, length = holder[key], int(found[3].replace(",", ""))
        holder[key] = (kept * (length // len(kept) + 1))[:length]
    return body


def route(record: Mapping[str, Any]) -> str | None:
    """The provider the recorded request reached, by its ``host`` (google_genai: the Gemini
    Developer API or Vertex AI), else None."""
    from ctxguard.providers.identity import by_host

    host = record.get("host")
    return by_host(host) if host else None


def adapter(record: Mapping[str, Any]) -> Any:
    """The record's provider module's adapter, with the accounting of the API it reached
    (``Adapter.for_route``)."""
    found = importlib.import_module(f"ctxguard.providers.{record['provider']}").ADAPTER
    label = route(record)
    return found.for_route(label) if label is not None else found


def call(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """The recorded body as its SDK call site's keyword arguments (what ``normalise`` reads).
    Most wires name things as the SDK does; Gemini and Bedrock carry the model in the URL
    (the record's ``model``), Gemini's settings go in ``config`` (its cut signatures at their
    length again: ``uncut``), an ``invoke_model`` body is the JSON text botocore sends."""
    body, model = record["body"], record.get("model")
    if record["provider"] == "google_genai":
        from ctxguard.providers.google_genai import as_call

        return as_call(uncut(record), model)[1]
    if record["provider"] == "bedrock":
        if record["api"].startswith("converse"):
            return {**body, "modelId": model}
        return {"modelId": model, "body": json.dumps(body)}
    return body


def measure(corpus: Path = CORPUS, *, estimate: bool = False, providers: tuple[str, ...] = PROVIDERS,
            only: str | None = None) -> list[Row]:
    """ctxguard's pre-flight count of every recorded request of ``providers`` (of one ``half`` if
    ``only`` names it), but those whose body is not the one the count is for (``body_mismatch``)."""
    from ctxguard.digest import Digester
    from ctxguard.measure import Measurer
    from ctxguard.tokens import Calibration, EstimateCounter, default_counter

    counter = EstimateCounter() if estimate else default_counter()
    measurer = Measurer(Digester(b"token-accuracy"), counter, Calibration())
    rows = []
    for record in records(corpus):
        provider = record["provider"]
        if provider not in providers or "body_mismatch" in record or (only and half(record["id"]) != only):
            continue
        view = adapter(record).normalise(record["api"], call(record))
        payload = measurer.measure(view)
        rows.append(Row(record["id"], provider, str(record.get("model") or record["body"].get("model")), record["kind"],
                        payload.tokens, record["reported_input_tokens"], record["api"],
                        record.get("model_family", provider), view.unreadable is not None))
    return rows


def measure_after(reports: int, corpus: Path = CORPUS, *, providers: tuple[str, ...] = PROVIDERS) -> list[Row]:
    """What ctxguard shows for each recorded request once its model's calibration has learnt from
    ``reports`` other recorded requests of the same model (the next ones in corpus order, each
    counted and reported to a fresh measurer first): the models with more than ``reports``
    records. Issue 39's second target: the median within ±5% after 5 reports."""
    from ctxguard.digest import Digester
    from ctxguard.measure import Measurer
    from ctxguard.tokens import Calibration, default_counter

    by_model: dict[tuple[str, str], list[dict]] = {}
    for record in records(corpus):
        if record["provider"] in providers and "body_mismatch" not in record:
            model = str(record.get("model") or record["body"].get("model"))
            by_model.setdefault((record["provider"], model), []).append(record)
    rows = []
    for (provider, model), mine in by_model.items():
        if len(mine) <= reports:
            continue
        views = [adapter(record).normalise(record["api"], call(record)) for record in mine]
        for i, record in enumerate(mine):
            measurer = Measurer(Digester(b"token-accuracy"), default_counter(), Calibration())
            for k in range(1, reports + 1):
                j = (i + k) % len(mine)
                measurer.observe(measurer.measure(views[j]), mine[j]["reported_input_tokens"])
            payload = measurer.measure(views[i])
            rows.append(Row(record["id"], provider, model, record["kind"], payload.tokens,
                            record["reported_input_tokens"], record["api"], record.get("model_family", provider),
                            views[i].unreadable is not None))
    return rows


#: What the text of a report is against its fixed tokens, and in tokens: the classes ``teaching`` compares.
_TEACHING = ("under 2x the fixed", "2-10x the fixed", "10x the fixed or more, under 64 tokens",
             "10x the fixed or more, 64 tokens or more")


def teaching(corpus: Path = CORPUS) -> tuple[dict[str, list[float]], int, int]:
    """What a report would teach calibration, against what its model's long reports teach: for each
    recorded request, the ratio of its text (the report less the request's fixed tokens, over the count
    less them) over the median of the same model's other reports with at least 100 tokens of text and
    ten times their fixed tokens (models with two such reports or more), less 1; by the class of its
    text (``_TEACHING``); and how many reports leave their text more than nothing (what taught before
    the thresholds) and how many teach now. The measurement behind the thresholds of ``Measurer.observe``
    (docs/budget.md, "What teaches calibration")."""
    from ctxguard.digest import Digester
    from ctxguard.measure import _LEARNS_FROM_TEXT, _TEXT_PER_FIXED, Measurer
    from ctxguard.tokens import Calibration, default_counter

    measurer = Measurer(Digester(b"token-accuracy"), default_counter(), Calibration())
    reports = []  # (model, fixed, counted text, reported text)
    for record in records(corpus):
        if "body_mismatch" in record:
            continue
        view = adapter(record).normalise(record["api"], call(record))
        if view.unreadable is None:
            payload = measurer.measure(view)
            fixed = payload.fixed
            reports.append((str(record.get("model") or record["body"].get("model")), fixed,
                            payload.raw_tokens - fixed, record["reported_input_tokens"] - fixed))
    long = [(i, model, text / counted) for i, (model, fixed, counted, text) in enumerate(reports)
            if counted > 0 and text >= 100 and text >= 10 * fixed]
    found: dict[str, list[float]] = {name: [] for name in _TEACHING}
    for i, (model, fixed, counted, text) in enumerate(reports):
        others = [ratio for j, other, ratio in long if other == model and j != i]
        if counted <= 0 or text <= 0 or len(others) < 2:
            continue
        kind = 0 if text < 2 * fixed else 1 if text < 10 * fixed else 2 if text < 64 else 3
        found[_TEACHING[kind]].append(text / counted / statistics.median(others) - 1)
    some = [(fixed, text) for _, fixed, counted, text in reports if counted > 0 and text > 0]
    return found, len(some), sum(text >= _LEARNS_FROM_TEXT and text >= _TEXT_PER_FIXED * fixed for fixed, text in some)


def summary(rows: list[Row]) -> dict[str, float]:
    """n, the median error, the worst under- and over-count and the share within ±10% of the rows
    ctxguard counts; the requests it does not read (no count: ``Row.unread``) are in ``requests``
    and ``unread`` only (their error figures NaN when no row of the group is read)."""
    errors = [row.error for row in rows if not row.unread]
    nan = float("nan")
    return {"requests": len(rows), "median": statistics.median(errors) if errors else nan,
            "worst_under": min(errors, default=nan), "worst_over": max(errors, default=nan),
            "within_10": sum(abs(e) <= 10 for e in errors) / len(errors) if errors else nan,
            "unread": sum(row.unread for row in rows)}


#: A streaming api and the api whose request body it shares.
_STREAMED = {"chat_stream": "chat", "chat.stream": "chat.complete", "generate_content_stream": "generate_content",
             "converse_stream": "converse", "invoke_model_with_response_stream": "invoke_model"}


def groups(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    """The rows per provider (family ``""``) and per provider and model family, in corpus order
    (records without a ``model_family`` are only in their provider's group). A provider with more
    than one request format (Bedrock: Converse, and each model's own body for ``invoke_model``)
    has a group per family and format."""
    found: dict[tuple[str, str], list[Row]] = {}
    for provider in PROVIDERS:
        mine = [row for row in rows if row.provider == provider]
        if not mine:
            continue
        found[provider, ""] = mine
        several = len({_STREAMED.get(row.api, row.api) for row in mine}) > 1
        named = [(_family(row, several), row) for row in mine if row.family != provider]
        for name in sorted({name for name, _ in named}):
            found[provider, name] = [row for family, row in named if family == name]
    return found


def _family(row: Row, with_format: bool) -> str:
    return f"{row.family} {_STREAMED.get(row.api, row.api)}" if with_format else row.family


def report(rows: list[Row], markdown: bool) -> str:
    """Per provider, then per model family under it: n, median error, worst under, worst over."""
    header = ("provider", "model family", "n", "median", "worst under", "worst over", "within ±10%", "not read")
    lines = []
    if markdown:
        lines += ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * 6]
    else:
        lines.append(f"{header[0]:<13} {header[1]:<30} {header[2]:>4} {header[3]:>8} {header[4]:>12} {header[5]:>11} "
                     f"{header[6]:>12} {header[7]:>9}")
    for (provider, family), subset in groups(rows).items():
        s = summary(subset)
        name = family or "(all)"
        read = s["requests"] > s["unread"]
        cells = (provider if not family else "", name, f"{s['requests']}",
                 *((f"{s['median']:+.1f}%", f"{s['worst_under']:+.1f}%", f"{s['worst_over']:+.1f}%",
                    f"{s['within_10']:.0%}") if read else ("—",) * 4), f"{s['unread']}")
        if markdown:
            lines.append("| " + " | ".join(cells) + " |")
        else:
            lines.append(f"{cells[0]:<13} {cells[1]:<30} {cells[2]:>4} {cells[3]:>8} {cells[4]:>12} {cells[5]:>11} "
                         f"{cells[6]:>12} {cells[7]:>9}")
    return "\n".join(lines)


def table(rows: list[Row], markdown: bool) -> str:
    """One row a request; a request not read shows no count and no error (ctxguard has none)."""
    header = ("record", "provider", "model", "kind", "counted", "reported", "error")
    lines = []
    if markdown:
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * 3 + "---|---:|---:|---:|"]
        lines += [f"| {r.id} | {r.provider} | {r.model} | {r.kind} | {'—' if r.unread else f'{r.counted:,}'} | "
                  f"{r.reported:,} | {'not read' if r.unread else f'{r.error:+.1f}%'} |" for r in rows]
    else:
        lines.append(f"{header[0]:<52} {header[1]:<12} {header[2]:<28} {header[3]:<32} {header[4]:>8} {header[5]:>8} "
                     f"{header[6]:>8}")
        lines += [f"{r.id[:52]:<52} {r.provider:<12} {r.model[:28]:<28} {r.kind[:32]:<32} "
                  f"{'—' if r.unread else f'{r.counted:,}':>8} {r.reported:>8,} "
                  f"{'not read' if r.unread else f'{r.error:+.1f}%':>8}" for r in rows]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="recorded *.jsonl directory (default: the tests')")
    parser.add_argument("--estimate", action="store_true", help="count with the estimator, not tiktoken")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument("--provider", action="append", choices=PROVIDERS, help="only this provider (repeatable)")
    parser.add_argument("--summary", action="store_true", help="print only the per-provider table, not each request")
    parser.add_argument("--half", choices=HALVES, help="only the records of this half of the corpus")
    parser.add_argument("--after", type=int, metavar="N",
                        help="what is shown once the model's calibration has learnt from N other requests of it")
    parser.add_argument("--teaching", action="store_true",
                        help="how far a report's text ratio is from its model's long reports', by the text's size")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from ctxguard.tokens import default_counter

    if args.teaching:
        print(f"{'text of the report':<42} {'n':>4} {'median':>8} {'lowest':>8} {'highest':>8} {'>5% under':>10}")
        found, before, now = teaching(args.corpus)
        for name, errors in found.items():
            print(f"{name:<42} {len(errors):>4} {statistics.median(errors):>+8.1%} {min(errors):>+8.1%} "
                  f"{max(errors):>+8.1%} {sum(e < -0.05 for e in errors):>10}")
        print(f"reports that teach: {now} of the {before} whose text is more than nothing")
        return 0

    chosen = tuple(args.provider or PROVIDERS)
    if args.after:
        rows = measure_after(args.after, args.corpus, providers=chosen)
    else:
        rows = measure(args.corpus, estimate=args.estimate, providers=chosen, only=args.half)
    print(f"counter: {'estimate' if args.estimate else default_counter().name}")
    if not args.summary:
        print(table(sorted(rows, key=lambda r: (PROVIDERS.index(r.provider), r.family, r.kind, r.id)), args.markdown))
        print()
    print(report(rows, args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
