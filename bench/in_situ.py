"""Why ctxguard's hooks cost 1.5-2x more in situ than in a tight loop.

    python bench/in_situ.py [MESSAGES]     # default 20

Times ctxguard's whole per-call work (``before``, ``wire``, ``finished``, as in
bench/stages.py) right after each of four things, 400 times each, three rounds:

* nothing (a tight loop: ctxguard's code and data stay in the CPU caches);
* a sweep over 16 MB of memory, one byte per cache line: evicts data from the L1 and
  L2 caches, runs almost no code;
* varied pure-Python work (JSON, URL and date handling): runs a lot of other code,
  touches little data;
* the bare SDK call ctxguard guards (the situation of bench/overhead.py).

If the data sweep costs ctxguard as much as the SDK call does, the in-situ cost is
ctxguard's own working set falling out of the data caches; if the varied code does,
it is the interpreter's branch predictors and instruction cache.
"""

from __future__ import annotations

import email.utils
import gc
import json
import sys
import textwrap
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import prometheus_client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import ctxguard
from ctxguard.intercept.answers import HttpResults, observe_answer
from ctxguard.providers import openai as openai_provider

sys.path.insert(0, str(Path(__file__).parent))
import overhead as ov

NO_HTTP = HttpResults()  # the result types whose HTTP response is read: none here (a parsed answer)

SIZE = int(sys.argv[1]) if len(sys.argv) > 1 else 20
SWEEP = bytearray(16 * 1024 * 1024)
SAMPLE = {"rows": [{"k": i, "v": str(i) * 5, "n": None, "f": 1.5} for i in range(200)]}


def sweep() -> None:
    SWEEP[::64] = b"\x01" * (len(SWEEP) // 64)


def varied_python() -> None:
    for _ in range(3):
        json.loads(json.dumps(SAMPLE))
    for i in range(30):
        urllib.parse.urlsplit(f"http://x.invalid/p/{i}?q={i}#f")
        email.utils.formatdate(1e9 + i)
        textwrap.shorten("word " * 30, 40)


def main() -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ov.DropExporter()))
    guard = ctxguard.instrument(
        policy=ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800)),
        registry=prometheus_client.CollectorRegistry(),
        tracer_provider=provider,
        digest_key=ov.KEY,
    )
    assert guard is not None
    ov.keep_bare_calls_bare()
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
    kwargs: dict[str, Any] = {
        "model": ov.MODEL,
        "messages": [ov.system_message(pinned), *(ov.message(i) for i in range(1, SIZE))],
    }
    body = json.dumps(kwargs).encode()
    http = ov.http_lib.Client(transport=ov.http_lib.MockTransport(ov.handler))
    client = openai.OpenAI(api_key="x", base_url=ov.BASE_URL, max_retries=0, http_client=http)
    original: Any = openai.resources.chat.completions.completions.Completions.create.__wrapped__  # type: ignore[attr-defined]

    def sdk_call() -> None:
        original(client.chat.completions, **kwargs)

    response = original(client.chat.completions, **kwargs)

    def hooks() -> None:
        call = guard.before(openai_provider.PROVIDER, "chat.completions", kwargs)
        assert call is not None
        call.wire(body)
        observe_answer(call, openai_provider.SITES[0], response, NO_HTTP)

    before: dict[str, Callable[[], None]] = {
        "nothing (tight loop)": lambda: None,
        "a 16 MB data sweep": sweep,
        "varied Python code": varied_python,
        "the bare SDK call": sdk_call,
    }
    medians: dict[str, list[float]] = {name: [] for name in before}
    with ctxguard.conversation("in-situ"):
        for _ in range(200):
            for fn in before.values():
                fn()
                hooks()
        gc.disable()
        try:
            for _ in range(3):
                for name, fn in before.items():
                    medians[name].append(ov.median_after(fn, hooks, 400))
        finally:
            gc.enable()
    ctxguard.uninstrument()
    provider.shutdown()
    print(f"ctxguard's hooks at {SIZE} messages, µs (median of 400, three rounds), right after:")
    for name, values in medians.items():
        print(f"  {name:22s} {' / '.join(f'{v:.0f}' for v in values)}")


if __name__ == "__main__":
    main()
