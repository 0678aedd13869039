"""ctxguard's per-call cost in CPU instructions, counted by valgrind: the same number on every run.

    .venv/bin/python bench/instructions.py [--sizes 20,200] [--calls 10] [--grow]   # ~10 min
    .venv/bin/python bench/instructions.py --own --shapes chat,tools,parts,responses,anthropic,facts --sizes 20
    .venv/bin/python bench/instructions.py --own --floor --sizes 2,20

Time-based numbers (bench/overhead.py) move by ±20% with whatever else the machine
does; an instruction count does not, so this is the benchmark to compare two commits
with. For each payload size it runs one child process per side under
``valgrind --tool=callgrind`` (``PYTHONHASHSEED=0``, gc off), which warms its side
up with 20 calls and then makes ``--calls`` more, the only ones counted (they run
inside a libffi call that callgrind is told to collect in, so start-up and warm-up,
which vary between processes by more than a call costs, are left out):

* ``base``: bare SDK calls (the original ``create``);
* ``guarded``: instrumented calls;
* ``span``: each bare call inside one recording SDK span (start, made current,
  end), which is what any tracing instrumentation pays at least;
* ``peer``, when ``opentelemetry-instrumentation-openai-v2`` is installed
  (bench/requirements-peer.txt): the bare call under OpenTelemetry's own openai
  instrumentation, set up as in bench/overhead.py.

The count repeats to a few instructions per call between runs of the same commit
(166,145,035 and 166,145,037 for five base calls at 20 messages).

With ``--grow`` each timed call first appends one new distinct message to the
history, which starts at the given size: a growing conversation, where ctxguard
counts and digests one unseen message per call and reuses the rest; comparing a
short and a long start tells whether its per-call work grows with the history.

Per-call cost = (side - base) / calls. The SDK's own count still moves between
processes by ~0.05% of its cost (~20,000 instructions per call at 20 messages,
~200,000 at 475), so for large payloads use ``--own``: ``guarded-own`` counts
ctxguard's hooks alone (``before``, ``wire``, ``finished``, as the wrappers call
them, on the body the SDK sent and the response it parsed), ``span-own`` a bare
span's start and end alone, and ``peer-own`` (when installed) the peer's wrapper
alone, its SDK call run inside ``operator.call``, which callgrind is told to stop
counting in; the SDK calls that produce ctxguard's inputs run between the counted
ones. The setup is bench/overhead.py's: the real
openai client on an in-process mock transport, every check on, a recording
``TracerProvider`` whose exporter drops spans (here a ``SimpleSpanProcessor``, so
no background thread adds instructions at random), in a conversation. Instructions
are not time: cache misses are not in them, and in situ (right after a real SDK
call) ctxguard's code runs at roughly 0.35 µs per 1,000 instructions on this kind
of machine, against ~0.1 in a tight loop.

``--floor`` (with ``--own``, ``chat`` alone) adds two sides that price what any implementation of
the contract pays, in the same units: ``outputs-own``, the contract's outputs replayed with no
inspection (bench/contract_floor.py: the span with the attributes a real guarded call of this
payload set, the same metric cells, the response read), and ``fused-own``,
bench/fused_inspection.py's one-function inspection of this shape followed by the same replay.

The benchmark renders its pinned block with tiktoken, so ctxguard counts exactly (as in a
process where anything has loaded tiktoken). ``--lazy`` renders it with the estimator and
loads no tokenizer, so ctxguard counts as the default does in a process that has not: byte
bounds, tiktoken only when a verdict needs it. Each guarded child then checks that tiktoken
stayed unloaded (a payload whose bytes cannot prove its budget loads it, and fails the run).

``--shape NAME`` (or a comma list, ``--shapes``; default ``chat``, all of the above) counts
another request shape (bench/shapes.py): ``tools`` (Chat Completions with three function
tools, an agent's history, a tool-call answer), ``parts`` (content parts, a small data-URL
PNG in every 4th user message), ``responses`` (the Responses API), ``anthropic`` (the
anthropic SDK's ``messages.create``), ``facts`` (``chat`` with 10 facts recorded, their values
in the history). Shapes other than ``chat`` need ``--own``: the whole-call sides and the
peer stay ``chat`` only. More than one shape, or one but ``chat``, prints one row per shape
and size. The script uses only hooks that older commits have as well (``Guard.before``,
``Call.wire``, ``intercept.answers.observe_answer``, the providers' ``PROVIDER`` and ``SITES``), so
it runs against an older checkout too (``PYTHONPATH=<checkout>``; the children inherit it).

After its counted calls each ``--own`` child checks, uncounted, that the run was what it
claims: a few more calls with a span-counting exporter added (one span per call, the body sent
is the shape's, ctxguard's payload names the shape's provider), no internal error swallowed in
the whole run (``ctxguard_guard_errors_total`` absent or zero), ctxguard counted every call
(``ctxguard_calls_total``) and, for ``facts``, ``fact_present`` passed on every call; the
checks that failed are listed under the table. ``--jobs 1`` runs one child at a time.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import importlib.util
import json
import operator
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

SIDES = ("base", "guarded", "span")
SHAPES = ("chat", "tools", "parts", "responses", "anthropic", "facts")  # bench/shapes.py
COUNTING = False  # inside a counted call (``own``)
OWN_SIDES = ("guarded-own", "span-own")
FLOOR_SIDES = ("outputs-own", "fused-own")  # ``--floor``
#: Set for the children by ``--lazy``.
LAZY = "CTXGUARD_BENCH_LAZY"
WARM = 20
#: ``--cache``: this machine's per-core caches (48 KiB L1d, 64 KiB L1i, 2 MiB L2), the L2 as the
#: last level: a miss there goes to the shared L3, the slow trip in situ.
CACHE_SIM = ("--cache-sim=yes", "--branch-sim=yes", "--I1=65536,16,64", "--D1=49152,12,64", "--LL=2097152,16,64")


def child(side: str, size: int, calls: int, grow: bool, shape_name: str) -> None:
    """Runs under valgrind: warm up both paths, then ``calls`` calls of one side
    (``side@choice``: the guarded side with ``instrument(metrics=choice)``) of one shape
    (bench/shapes.py; the whole-call sides are ``chat`` only)."""
    side, _, choice = side.partition("@")
    sys.path.insert(0, str(Path(__file__).parent))
    import openai
    import overhead as ov
    import prometheus_client
    from openai.resources.chat.completions.completions import Completions
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    import ctxguard

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ov.DropExporter()))
    original = Completions.__dict__["create"]

    def uncounted(*args: Any, **kwargs: Any) -> object:
        """``original``; inside a counted call, called through ``operator.call``
        (``_operator_call`` in C, which nothing else on these paths calls): callgrind, also
        told --toggle-collect=_operator_call, stops counting inside it. (A nested libffi call
        does not toggle collection off; outside a counted call this one would toggle it on.)"""
        return operator.call(original, *args, **kwargs) if COUNTING else original(*args, **kwargs)  # type: ignore[attr-defined]

    peer = None
    if side.startswith("peer"):
        peer = ov.peer_instrumentation(original, provider, uncounted if side.endswith("-own") else None)
        assert peer is not None, "opentelemetry-instrumentation-openai-v2 not importable"
    registry = prometheus_client.CollectorRegistry()
    guard = instrumented(choice, registry, provider)
    ov.keep_bare_calls_bare()
    orig = Completions.create.__wrapped__  # type: ignore[attr-defined]
    sent: list[bytes] = []

    def handler(request: Any) -> Any:
        sent.append(request.content)
        return ov.handler(request)

    http_client = ov.http_lib.Client(transport=ov.http_lib.MockTransport(handler))  # type: ignore[attr-defined]
    client = openai.OpenAI(api_key="x", base_url=ov.BASE_URL, max_retries=0, http_client=http_client)
    chat = client.chat.completions
    # With ``--lazy`` nothing here loads tiktoken (the pinned block's cap is far above its size: it
    # renders the same either way), so ctxguard counts as a process that has not loaded it does.
    from ctxguard.tokens import EstimateCounter

    counter = EstimateCounter() if os.environ.get(LAZY) else None
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200, counter=counter)
    messages = [ov.system_message(pinned), *(ov.message(i) for i in range(1, size))]
    tracer = provider.get_tracer("bench")
    if not side.endswith("-own"):
        whole(side, orig, chat, peer, tracer, messages, calls, grow)
        return
    import shapes

    if shape_name == "chat":
        shape = chat_shape(messages, lambda history: (orig(chat, model=ov.MODEL, messages=history), sent.pop()))
    else:
        shape = shapes.build(shape_name, size, pinned)
    run, history, runs = own(side, guard, tracer, shape, calls, grow,
                             peer=(lambda kwargs: peer[0](chat, **kwargs)) if peer is not None else None)
    verify(side, guard, shape, registry, provider, run, history, runs, calls if grow else None)


def instrumented(choice: str, registry: Any, provider: Any) -> Any:
    """ctxguard instrumented with every check on, metrics on ``registry`` (and with ``choice``
    ``otel``/``both``, an OpenTelemetry ``MeterProvider``), spans on ``provider``."""
    import overhead as ov

    import ctxguard

    policy = ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800))
    meters = None
    if choice in ("otel", "both"):
        # A reader that is never collected here: what a call pays is the recording; an
        # export reads the cells (and the SDK's aggregations) once per interval, off the call.
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    guard = ctxguard.instrument(policy=policy, registry=registry, tracer_provider=provider, digest_key=ov.KEY,
                                metrics=choice or "prometheus", meter_provider=meters)
    assert guard is not None, "ctxguard disabled (CTXGUARD_DISABLED?)"
    return guard


def whole(side: str, orig: Any, chat: Any, peer: Any, tracer: Any, messages: list[dict[str, str]], calls: int,
          grow: bool) -> None:
    """The whole-call sides (``chat`` only): ``calls`` SDK calls, bare, guarded, in a bare span,
    or under the peer, counted in one libffi call."""
    import overhead as ov
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    import ctxguard

    def spanned(history: list[dict[str, str]]) -> object:
        span = tracer.start_span(f"chat {ov.MODEL}", kind=trace.SpanKind.CLIENT)
        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            return orig(chat, model=ov.MODEL, messages=history)
        finally:
            otel_context.detach(token)
            span.end()

    sides = {
        "base": lambda history: orig(chat, model=ov.MODEL, messages=history),
        "guarded": lambda history: chat.create(model=ov.MODEL, messages=history),
        "span": spanned,
    }
    if peer is not None:
        sides["peer"] = lambda history: peer[0](chat, model=ov.MODEL, messages=history)
    gc.disable()
    with ctxguard.conversation("bench"):
        run = sides[side]
        for history in warm_up(messages, grow):
            run(history)

        def timed() -> None:
            history = messages
            for i in range(calls):
                if grow:
                    history = [*history, ov.message(200_000 + i)]
                run(history)

        # Called through libffi so that callgrind, told --toggle-collect=ffi_call, counts
        # only the timed calls: start-up and warm-up differ between processes by more
        # than a call costs.
        ctypes.CFUNCTYPE(None)(timed)()


def chat_shape(messages: list[dict[str, str]], send: Callable[[list[Any]], tuple[Any, bytes]]) -> Any:
    """The ``chat`` shape, on the child's own client (bench/overhead.py's ``chat.completion``)."""
    import openai
    import overhead as ov
    import shapes

    from ctxguard.providers import openai as openai_provider

    # The call site's object, as the wrapper passes it: its client's identity is read per call.
    resource = openai.OpenAI(api_key="bench", base_url="http://127.0.0.1:9/v1").chat.completions

    def kwargs(history: list[Any]) -> dict[str, Any]:
        return {"model": ov.MODEL, "messages": history}

    return shapes.Shape("chat", openai_provider.PROVIDER, "chat.completions", openai_provider.SITES[0], resource,
                        messages, kwargs, send, lambda i: ov.message(200_000 + i), b'"messages"', "openai")


def warm_up(messages: list[Any], grow: bool) -> list[list[Any]]:
    """The warm-up calls' histories: ``messages`` WARM times, or when growing, five histories
    that grow into ``messages`` one message at a time, as the counted calls then go on to
    (an unchanged history resent first would make the first grown body a one-off miss of
    the wire digest's resume point, counted against the first call), but for those that
    would end in a tool call without its result."""
    if not grow:
        return [messages] * WARM
    n = len(messages)
    shorter = [messages[: n - k] for k in range(min(5, n - 2), 0, -1)]
    return [h for h in shorter if not unanswered(h[-1])] + [messages]


def unanswered(message: Any) -> bool:
    """A tool call, which no app sends before its result (``tools``: the warm-up skips such a history)."""
    return isinstance(message, dict) and bool(message.get("tool_calls"))


Hooks = Callable[[dict[str, Any], bytes, Any], None]


def own(side: str, guard: Any, tracer: Any, shape: Any, calls: int, grow: bool,
        peer: Callable[[dict[str, Any]], object] | None = None) -> tuple[Hooks, list[Any], int]:
    """ctxguard's hooks alone (``before``, ``wire``, ``finished``), or a bare span's start and
    end alone, each counted call in its own libffi call: the SDK's calls (``shape.send``),
    which give the body sent and the response, run between them, uncounted. ``peer-own``:
    a whole call under the peer's wrapper, whose SDK call runs inside ``operator.call``,
    where callgrind's collection toggles off again: its wrapper's work alone is counted.
    Returns the hooks run, the last history sent and how many calls ran them."""
    import overhead as ov
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    import ctxguard
    from ctxguard.intercept.answers import HttpResults, observe_answer
    NO_HTTP = HttpResults()
    from ctxguard.providers import openai as openai_provider

    resource = shape.resource
    provider, api, site = shape.provider, shape.api, shape.site

    def guarded(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        # ``chat``'s hooks as they always were: the same bytecode, so the same counts as before shapes.
        call = guard.before(openai_provider.PROVIDER, "chat.completions", kwargs, instance=resource)
        call.wire(body)
        observe_answer(call, openai_provider.SITES[0], response, NO_HTTP)

    def shaped(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        call = guard.before(provider, api, kwargs, instance=resource)
        call.wire(body)
        observe_answer(call, site, response, NO_HTTP)

    def spanned(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        span = tracer.start_span(f"chat {ov.MODEL}", kind=trace.SpanKind.CLIENT)
        token = otel_context.attach(trace.set_span_in_context(span))
        otel_context.detach(token)
        span.end()

    def peered(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        assert peer is not None
        peer(kwargs)

    hooks = guarded if shape.name == "chat" else shaped
    run = {"guarded-own": hooks, "span-own": spanned, "peer-own": peered}.get(side) or floor(side, guard, tracer, shape)
    gc.disable()
    with ctxguard.conversation("bench"):
        history, runs = counted_calls(run, shape, calls, grow)
    return run, history, runs


def floor(side: str, guard: Any, tracer: Any, shape: Any) -> Hooks:
    """``--floor``'s sides (``chat`` only): ``outputs-own``, the contract's outputs replayed as
    bench/contract_floor.py does (what a real guarded call emitted for this payload, emitted again:
    the span with the same attributes, the same metric cells, the response read; no inspection);
    ``fused-own``, bench/fused_inspection.py's one-function inspection of this shape, then the same
    replay: the cheapest ctxguard conceivable for this payload, in instructions."""
    import contract_floor
    import fused_inspection

    import ctxguard

    response, body = shape.send(shape.history)
    kwargs = shape.kwargs(shape.history)
    with ctxguard.conversation("bench"):
        outputs = contract_floor.Outputs(guard, kwargs, body, response)
    emit = contract_floor.replay(outputs, tracer, [])

    def outputs_only(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        emit(lambda: response, None, (), {})

    if side == "outputs-own":
        return outputs_only
    fused = fused_inspection.Fused(guard)
    instruction = fused_inspection.instruction_of(kwargs)

    def fused_and_outputs(kwargs: dict[str, Any], body: bytes, response: Any) -> None:
        fused.call(kwargs, body, instruction)
        emit(lambda: response, None, (), {})

    return fused_and_outputs


def counted_calls(run: Hooks, shape: Any, calls: int, grow: bool) -> tuple[list[Any], int]:
    """The warm-up calls, then ``calls`` counted ones, each in its own libffi call (in a conversation)."""
    global COUNTING
    if shape.prepare is not None:
        shape.prepare()
    send, make, messages = shape.send, shape.kwargs, shape.history
    counted = ctypes.CFUNCTYPE(None)
    response, body = send(messages)
    warm = warm_up(messages, grow)
    for history in warm:
        if grow:
            response, body = send(history)
        run(make(history), body, response)
    history = messages
    for i in range(calls):
        if grow:
            history = [*history, shape.more(i)]
        response, body = send(history)
        kwargs = make(history)
        COUNTING = True
        counted(lambda: run(kwargs, body, response))()  # noqa: B023 (called at once)
        COUNTING = False
    return history, len(warm) + calls


#: Calls made after the counted ones, uncounted, to check what the counted calls did.
CHECKED = 3
#: The line a child prints its checks on (JSON), for the parent to report.
CHECKS = "ctxguard-bench-checks "


def verify(side: str, guard: Any, shape: Any, registry: Any, provider: Any, run: Hooks, history: list[Any],
           runs: int, grown: int | None) -> None:
    """After the counted calls, uncounted: ``CHECKED`` more calls with a span-counting exporter
    added (each SDK call and its hooks make exactly one span, the body sent is this shape's and,
    on the guarded side, ctxguard's payload names the shape's provider); then no internal error
    swallowed in the whole run (``ctxguard_guard_errors_total`` absent or zero), and ctxguard
    counted every call it was given. Prints what it found (``CHECKS``) for the parent."""
    import shapes
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    import ctxguard
    from ctxguard.intercept.answers import HttpResults, observe_answer
    NO_HTTP = HttpResults()

    exporter = shapes.SpanCounter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    labels = set()
    with ctxguard.conversation("bench"):
        for i in range(CHECKED):
            if grown is not None:
                history = [*history, shape.more(grown + i)]
            response, body = shape.send(history)
            assert shape.marker in body, f"{shape.name}: {shape.marker!r} not in the body sent"
            kwargs, before = shape.kwargs(history), exporter.spans
            if side.startswith("guarded"):
                call = guard.before(shape.provider, shape.api, kwargs, instance=shape.resource)
                assert call is not None, f"{shape.name}: ctxguard did not inspect the call"
                labels.add(call.verdict.payload.provider)
                call.wire(body)
                observe_answer(call, shape.site, response, NO_HTTP)
            else:
                run(kwargs, body, response)
            assert exporter.spans == before + 1, f"{shape.name} {side}: {exporter.spans - before} spans for one call"
    found = samples(registry)
    errors = {k: v for k, v in found.items() if k[0] == "ctxguard_guard_errors_total" and v}
    assert not errors, f"{shape.name} {side}: ctxguard swallowed internal errors: {errors}"
    out: dict[str, Any] = {"shape": shape.name, "side": side, "spans_per_call": 1, "errors": 0,
                           "ctxguard": str(Path(ctxguard.__file__).parent)}
    if side.startswith("guarded"):
        if os.environ.get(LAZY):
            from ctxguard.tokens import loaded_counter

            assert loaded_counter() is None, f"{shape.name}: --lazy, yet tiktoken was loaded"
        assert labels == {shape.label}, f"{shape.name}: the payload's provider is {labels}, not {shape.label}"
        seen = sum(v for k, v in found.items() if k[0] == "ctxguard_calls_total")
        if any(k[0] == "ctxguard_calls_total" for k in found):  # metrics on this registry (not otel alone)
            assert seen == runs + CHECKED, f"{shape.name}: ctxguard counted {seen} calls, not {runs + CHECKED}"
        out["violations"] = {dict(k[1])["check"]: v for k, v in found.items()
                             if k[0] == "ctxguard_violations_total" and v}
        if shape.name == "facts":
            passed = found.get(("ctxguard_checks_total", (("check", "fact_present"), ("outcome", "pass"))), 0)
            assert passed == runs + CHECKED, f"facts: fact_present passed {passed} times, not {runs + CHECKED}"
            assert not any(c.startswith("fact_") for c in out["violations"]), "facts: fact checks failed"
            out["fact_present_passed"] = passed
    print(CHECKS + json.dumps(out, sort_keys=True), flush=True)


def samples(registry: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on a Prometheus registry: (name, sorted labels) -> value."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for m in registry.collect() for s in m.samples}


def count(side: str, size: int, shape: str, calls: int, grow: bool,
          cache: bool = False) -> tuple[dict[str, int], dict[str, Any]]:
    """Events of ``calls`` timed calls of ``side`` (a child process under callgrind): ``Ir``
    (instructions), and with ``cache`` the simulated cache misses as well; and the child's checks
    (``verify``; none for the whole-call sides)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--toggle-collect=ffi_call*",
           "--toggle-collect=_operator_call", *(CACHE_SIM if cache else ()),
           sys.executable, __file__,
           "--child", side, str(size), str(calls), "grow" if grow else "fixed", shape]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{shape} {side} {size}: the child failed ({out.returncode}):\n{out.stderr[-4000:]}")
    events = re.search(r"Events *: ([\w ]+)", out.stderr)
    found = re.search(r"Collected : ([\d ]+)", out.stderr)
    if events is None or found is None:
        raise RuntimeError(f"no event counts from callgrind:\n{out.stderr[-2000:]}")
    checks = [json.loads(line[len(CHECKS):]) for line in out.stdout.splitlines() if line.startswith(CHECKS)]
    counts = dict(zip(events.group(1).split(), map(int, found.group(1).split()), strict=True))
    return counts, checks[-1] if checks else {}


Job = tuple[str, int, str]  # (side, size, shape)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "grow", sys.argv[6])
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20,200", help="payload sizes in messages (default 20,200)")
    parser.add_argument("--calls", type=int, default=10, help="counted calls per side (default 10)")
    parser.add_argument("--grow", action="store_true", help="append one new message per call (from each size)")
    parser.add_argument("--own", action="store_true", help="count ctxguard's hooks and a bare span alone, no SDK")
    parser.add_argument("--shape", "--shapes", dest="shapes", default="chat", metavar="NAMES",
                        help=f"request shapes, a comma list of {','.join(SHAPES)} (default chat); any but chat "
                             "needs --own (the whole-call sides and the peer are chat only); more than one, or "
                             "one but chat: one table row per shape and size")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="child processes under valgrind at once (default: one per CPU)")
    parser.add_argument("--cache", action="store_true", help="also simulate the caches: misses per call, by level")
    parser.add_argument("--metrics", default="", metavar="CHOICES",
                        help="with --own: also count ctxguard with instrument(metrics=C) for each C of a comma list "
                             "(prometheus,otel,both), in the same run")
    parser.add_argument("--floor", action="store_true",
                        help="with --own, chat: also count the contract's outputs replayed with no inspection "
                             "(bench/contract_floor.py) and with the fused one-shape inspection "
                             "(bench/fused_inspection.py) before them: target 3's floors, in instructions")
    parser.add_argument("--lazy", action="store_true",
                        help="the children load no tokenizer, so ctxguard counts as a process that has not loaded "
                             "tiktoken does (the default: byte bounds, exact counts only where a verdict needs "
                             "them); each guarded child checks that it stayed unloaded")
    args = parser.parse_args()
    if args.lazy:
        os.environ[LAZY] = "1"
    if args.floor and (not args.own or shapes_arg(args) != ["chat"]):
        parser.error("--floor needs --own and the chat shape alone")
    if shutil.which("valgrind") is None:
        print("valgrind not found (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    sizes = [int(s) for s in args.sizes.split(",")]
    shapes = shapes_arg(args)
    if not shapes or set(shapes) - set(SHAPES):
        parser.error(f"--shape: one or more of {','.join(SHAPES)}")
    if shapes != ["chat"] and not args.own:
        parser.error("--shape other than chat needs --own")
    choices = [c for c in args.metrics.split(",") if c]
    if choices and not args.own:
        parser.error("--metrics needs --own")
    peer = importlib.util.find_spec("opentelemetry.instrumentation.openai_v2") is not None
    jobs = [(side, size, shape) for shape in shapes for size in sizes
            for side in sides_of(shape, args.own, peer, choices, args.floor)]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = dict(zip(
            jobs, pool.map(lambda job: count(job[0], job[1], job[2], args.calls, args.grow, args.cache), jobs),
            strict=True,
        ))
    events = {job: e for job, (e, _) in results.items()}
    if args.grow:
        print(f"growing: each of the {args.calls} calls adds one new message to a history of the size given\n")
    if shapes == ["chat"]:
        chat_table(events, sizes, args.calls, args.own, peer, choices, args.floor)
    else:
        shape_table(events, shapes, sizes, args.calls, choices)
        checks_table({job: c for job, (_, c) in results.items() if c})
    found = sorted({c["ctxguard"] for _, c in results.values() if c})
    if found:
        print(f"\nctxguard imported from {', '.join(found)}")
    if args.cache:
        for shape in shapes:
            if shapes != ["chat"]:
                print(f"\nshape {shape}:")
            cache_table({(side, n): e for (side, n, s), e in events.items() if s == shape}, sizes, args.calls,
                        args.own)
    return 0


def shapes_arg(args: argparse.Namespace) -> list[str]:
    return [s for s in args.shapes.split(",") if s]


def sides_of(shape: str, own: bool, peer: bool, choices: list[str], floor: bool = False) -> tuple[str, ...]:
    """The sides counted for ``shape``: the peer's only for chat, whose request it instruments."""
    sides = OWN_SIDES if own else SIDES
    if peer and shape == "chat":
        sides = (*sides, "peer-own" if own else "peer")
    if floor:
        sides = (*sides, *FLOOR_SIDES)
    return (*sides, *(f"guarded-own@{c}" for c in choices))


def chat_table(events: dict[Job, dict[str, int]], sizes: list[int], calls: int, own: bool, peer: bool,
               choices: list[str], floor: bool = False) -> None:
    """The ``chat`` shape's table, as before shapes: one row per size, the peer's columns when installed."""
    totals = {(side, size): e["Ir"] for (side, size, _), e in events.items()}
    if own:
        print("ctxguard's hooks alone (before + wire + finished), a bare span alone"
              f"{' and the peer wrapper alone' if peer else ''}, no SDK call counted\n")
    peer_head = " | OpenTelemetry openai-v2 instructions/call | ctxguard/peer" if peer else ""
    print(f"| msgs | ctxguard instructions/call | bare recording span instructions/call | ratio{peer_head} |")
    print("|---:|---:|---:|---:|" + ("---:|---:|" if peer else ""))
    per_call: dict[int, float] = {}
    for size in sizes:
        if own:
            guarded, span = totals[("guarded-own", size)] / calls, totals[("span-own", size)] / calls
        else:
            guarded = (totals[("guarded", size)] - totals[("base", size)]) / calls
            span = (totals[("span", size)] - totals[("base", size)]) / calls
        per_call[size] = guarded
        peer_cells = ""
        if peer:
            peered = totals["peer-own", size] / calls if own else (totals["peer", size] - totals["base", size]) / calls
            peer_cells = f" | {peered:,.0f} | {guarded / peered:.2f}x"
        print(f"| {size} | {guarded:,.0f} | {span:,.0f} | {guarded / span:.1f}x{peer_cells} |")
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        per = (per_call[hi] - per_call[lo]) / (hi - lo)
        print(f"\nper message beyond {lo}: {per:,.0f} instructions")
    metrics_table(totals, sizes, calls, choices, per_call)
    if floor:
        print("\n| msgs | contract outputs alone (replayed) | x span | fused inspection + outputs | x span "
              "| ctxguard | x span |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for size in sizes:
            span = totals[("span-own", size)] / calls
            cells = [totals[(side, size)] / calls for side in (*FLOOR_SIDES, "guarded-own")]
            print(f"| {size} | " + " | ".join(f"{n:,.0f} | {n / span:.2f}x" for n in cells) + " |")


def metrics_table(totals: dict[tuple[str, int], int], sizes: list[int], calls: int, choices: list[str],
                  per_call: dict[int, float], shape: str = "") -> None:
    if not choices:
        return
    print(f"\n{f'shape {shape}: ' if shape else ''}| msgs | metrics= | ctxguard instructions/call "
          "| vs the default (Prometheus cells) |")
    print("|---:|---|---:|---:|")
    for size in sizes:
        for c in choices:
            n = totals[(f"guarded-own@{c}", size)] / calls
            print(f"| {size} | {c} | {n:,.0f} | {n - per_call[size]:+,.0f} |")


def shape_table(events: dict[Job, dict[str, int]], shapes: list[str], sizes: list[int], calls: int,
                choices: list[str]) -> None:
    """``--own``, one row per shape and size (the peer left out: it instruments chat alone)."""
    print("ctxguard's hooks alone (before + wire + finished), a bare span alone, no SDK call counted\n")
    print("| shape | msgs | ctxguard instructions/call | bare span | ratio |")
    print("|---|---:|---:|---:|---:|")
    per_call: dict[tuple[str, int], float] = {}
    for shape in shapes:
        for size in sizes:
            guarded = events[("guarded-own", size, shape)]["Ir"] / calls
            span = events[("span-own", size, shape)]["Ir"] / calls
            per_call[(shape, size)] = guarded
            print(f"| {shape} | {size} | {guarded:,.0f} | {span:,.0f} | {guarded / span:.1f}x |")
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        print()
        for shape in shapes:
            per = (per_call[(shape, hi)] - per_call[(shape, lo)]) / (hi - lo)
            print(f"{shape}: per message beyond {lo}: {per:,.0f} instructions")
    for shape in shapes:
        totals = {(side, n): e["Ir"] for (side, n, s), e in events.items() if s == shape}
        metrics_table(totals, sizes, calls, choices, {n: per_call[(shape, n)] for n in sizes}, shape)


def checks_table(checks: dict[Job, dict[str, Any]]) -> None:
    """What each guarded child checked after its counted calls (``verify``)."""
    print("\nchecked after the counted calls, uncounted: one span per call, no internal error swallowed; "
          "the checks that failed (ctxguard_violations_total), per guarded child:\n")
    for (side, size, shape), c in checks.items():
        if "violations" in c:
            failed = ", ".join(f"{k} {v:g}" for k, v in sorted(c["violations"].items())) or "none"
            facts = f"; fact_present passed {c['fact_present_passed']:g}" if "fact_present_passed" in c else ""
            print(f"- {shape} {size} {side}: failed checks: {failed}{facts}")


def cache_table(events: dict[tuple[str, int], dict[str, int]], sizes: list[int], calls: int, own: bool) -> None:
    """Simulated misses per call by side (``CACHE_SIM``); without ``--own``, less the bare calls'."""
    print("\n| msgs | side | instructions | L1i misses | L1d misses | L2 misses (to L3) | branches mispredicted |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for size in sizes:
        base = events.get(("base", size)) if not own else None
        for (side, n), e in events.items():
            if n != size or side == "base":
                continue
            row = {k: (v - (base[k] if base else 0)) / calls for k, v in e.items()}
            print(
                f"| {size} | {side} | {row['Ir']:,.0f} | {row['I1mr']:,.0f} | {row['D1mr'] + row['D1mw']:,.0f} "
                f"| {row['ILmr'] + row['DLmr'] + row['DLmw']:,.0f} | {row['Bcm'] + row['Bim']:,.0f} |"
            )


if __name__ == "__main__":
    sys.exit(main())
