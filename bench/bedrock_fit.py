"""The measured constants of ctxguard's Bedrock accounting, fitted on one half of the recorded corpus.

    python bench/bedrock_fit.py

Amazon's models (Nova, Titan) publish no prompt template, Bedrock's Llama 4 reports more for tools
than Meta's template renders, and Anthropic documents Claude's citations prompt without sizing it,
so those numbers in ctxguard/providers/bedrock_families.py and bedrock.py
are measured on the recorded corpus (tests/data/recorded/). Each is fitted here on the records of
the fit half (``token_accuracy.half``) that isolate it: the median, over those records, of what the
provider reported less what ctxguard counts without the constant, per occurrence of what it prices.
The other constants are the code's while one is fitted (a record with tools and turns pays the tool
prompt and the turns as well), so the code holding the fits is what makes a rerun print them back.
The printout gives each fit, the records it rests on and the value in the code;
``python bench/token_accuracy.py --provider bedrock --half held`` shows how they do on the records
they were not fitted on. Records marked ``body_mismatch`` are left out (``token_accuracy.measure``).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
import token_accuracy as accuracy  # noqa: E402  # bench/token_accuracy.py, beside this script


def _blocks(record: Mapping[str, Any], kind: str) -> int:
    """How many content blocks of ``kind`` the record's messages hold."""
    return sum(1 for message in record["body"].get("messages") or [] if isinstance(message.get("content"), list)
               for block in message["content"] if isinstance(block, dict) and kind in block)


def _assistants(record: Mapping[str, Any]) -> int:
    return sum(1 for message in record["body"].get("messages") or [] if message.get("role") == "assistant")


def _tools(record: Mapping[str, Any]) -> bool:
    return bool((record["body"].get("toolConfig") or {}).get("tools"))


def _cited(record: Mapping[str, Any]) -> int:
    return sum(1 for message in record["body"].get("messages") or [] if isinstance(message.get("content"), list)
               for block in message["content"] if isinstance(block, dict)
               and ((block.get("document") or {}).get("citations") or {}).get("enabled"))


@dataclass(frozen=True)
class Constant:
    name: str
    #: Where it is in the code, and its value there.
    where: str
    value: Callable[[], int]
    #: The records that isolate it (of its family), and how many times each pays it.
    family: str
    isolates: Callable[[Mapping[str, Any]], bool]
    occurrences: Callable[[Mapping[str, Any]], int]


def _families() -> Any:
    from ctxguard.providers import bedrock_families

    return bedrock_families


def _bedrock() -> Any:
    from ctxguard.providers import bedrock

    return bedrock


def _nova(version: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda r: ("nova-2" in r["model"]) == (version == "2")


CONSTANTS = (
    Constant("NOVA_TOOL_PROMPT", "bedrock_families", lambda: _families().NOVA_TOOL_PROMPT, "amazon-nova",
             lambda r: _nova("1")(r) and _tools(r) and not _assistants(r) and not _blocks(r, "image"),
             lambda r: 1),
    Constant("NOVA2_TOOL_PROMPT", "bedrock_families", lambda: _families().NOVA2_TOOL_PROMPT, "amazon-nova",
             lambda r: _nova("2")(r) and _tools(r) and not _assistants(r) and not _blocks(r, "image"),
             lambda r: 1),
    Constant("NOVA_TURN", "bedrock_families", lambda: _families().NOVA_TURN, "amazon-nova",
             lambda r: _assistants(r) > 0 and not _tools(r) and not _blocks(r, "image"), _assistants),
    Constant("NOVA_TOOL_BLOCK", "bedrock_families", lambda: _families().NOVA_TOOL_BLOCK, "amazon-nova",
             lambda r: _blocks(r, "toolUse") + _blocks(r, "toolResult") > 0 and not _blocks(r, "image"),
             lambda r: _blocks(r, "toolUse") + _blocks(r, "toolResult")),
    Constant("LLAMA4_TOOLS_EXTRA", "bedrock_families", lambda: _families().LLAMA4_TOOLS_EXTRA, "meta-llama",
             lambda r: "llama4" in r["model"] and _tools(r), lambda r: 1),
    Constant("TITAN_REQUEST", "bedrock_families", lambda: _families().TITAN_REQUEST, "amazon-titan",
             lambda r: r["api"].startswith("converse") and not _blocks(r, "guardContent"), lambda r: 1),
    Constant("CITATIONS_PROMPT", "bedrock", lambda: _bedrock().CITATIONS_PROMPT, "anthropic",
             lambda r: _cited(r) > 0, _cited),
)


def fit() -> list[tuple[Constant, int | None, list[str]]]:
    """Each constant's fit on the fit half and the records it rests on."""
    records = {r["id"]: r for r in accuracy.records() if r["provider"] == "bedrock"}
    rows = {row.id: row for row in accuracy.measure(providers=("bedrock",), only="fit")}
    fitted = []
    for constant in CONSTANTS:
        value = constant.value()
        per = []
        used = []
        for row_id, row in rows.items():
            record = records[row_id]
            if record.get("model_family") != constant.family or not constant.isolates(record):
                continue
            times = constant.occurrences(record)
            # What the record reports less what is counted without this constant, per occurrence.
            per.append((row.reported - row.counted + times * value) / times)
            used.append(row_id)
        fitted.append((constant, round(statistics.median(per)) if per else None, used))
    return fitted


def main() -> int:
    sys.path.insert(0, str(ROOT))
    for constant, value, used in fit():
        print(f"{constant.name:<18} fitted {value if value is not None else '-':>5}   in {constant.where}: "
              f"{constant.value():>5}   on {len(used)} record(s): {', '.join(used) or 'none'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
