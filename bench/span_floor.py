"""The cost floor of any span-recording instrumentation, measured like ``overhead.py``.

Wraps ``Completions.create`` with wrapt three ways and times each against the bare
SDK, interleaved: a pass-through wrapper, a wrapper that only starts, attaches,
detaches and ends an OpenTelemetry SDK span, and the same plus 27 attributes set
through ctxguard's fast path. No ctxguard checks run. This is what an overhead
target that includes a recorded span has to fit above.

    python bench/span_floor.py [--rounds 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from functools import partial
from typing import Any

import openai
import wrapt
from openai.resources.chat.completions.completions import Completions
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import overhead as bench

ATTRS: dict[str, Any] = {f"ctxguard.k{i}": "v" * 32 for i in range(25)}
ATTRS["ctxguard.message.roles"] = ("user",) * 20
ATTRS["ctxguard.message.hashes"] = ("0" * 32,) * 20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=400)
    args = parser.parse_args()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(bench.DropExporter()))
    tracer = provider.get_tracer("floor")
    original = Completions.__dict__["create"]
    mode = "pass-through"

    wrappers = {"span": bench.recording_span(tracer), "span + attributes": bench.recording_span(tracer, ATTRS)}

    def wrapper(wrapped: Any, instance: Any, call_args: Any, kwargs: Any) -> Any:
        if mode == "pass-through":
            return wrapped(*call_args, **kwargs)
        return wrappers[mode](wrapped, instance, call_args, kwargs)

    Completions.create = wrapt.FunctionWrapper(original, wrapper)  # type: ignore[method-assign]
    http = bench.http_lib.Client(transport=bench.http_lib.MockTransport(bench.handler))
    client = openai.OpenAI(api_key="x", base_url=bench.BASE_URL, max_retries=0, http_client=http)
    chat: Any = client.chat.completions
    msgs = [bench.system_message("pinned"), *(bench.message(i) for i in range(1, 20))]
    try:
        for _ in range(100):
            original(chat, model=bench.MODEL, messages=msgs)
            chat.create(model=bench.MODEL, messages=msgs)
        print("| wrapper (20 messages) | overhead µs median, 3 runs |\n|---|---|")
        for mode in ("pass-through", "span", "span + attributes"):
            medians = []
            for _ in range(3):
                raw = bench.interleave(
                    partial(original, chat, model=bench.MODEL, messages=msgs),
                    partial(chat.create, model=bench.MODEL, messages=msgs),
                    args.rounds,
                )
                medians.append(statistics.median(raw["overhead"]) / 1000)
            print(f"| {mode} | {' / '.join(f'{m:.0f}' for m in medians)} |")
    finally:
        Completions.create = original  # type: ignore[method-assign]
        provider.shutdown()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
