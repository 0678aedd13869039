"""An experiment, not product code: what would ctxguard's inspection cost in situ if the
common case ran as one fused function?

    python bench/fused_inspection.py [MESSAGES]     # default 20

ctxguard's per-call pipeline is layered: an adapter builds a RequestView of Items, a
Measurer turns it into a Payload of Messages, evaluate() builds a Context, ten pluggable
checks return Outcomes, record() derives metric cells and builds the span's attribute
dict, the wire and the answer are judged after. Each layer is a few µs in a tight loop,
and in situ, after the SDK's call has evicted them from the data caches, 2-4x that.

``fused`` below does the same judgements for one shape only: a conversation resending
plain ``{"role", "content"}`` dicts to Chat Completions, a system message carrying a
pinned block, no facts recorded. In one function and a per-conversation state object it
looks up the conversation (context variable, LRU under a lock), reuses the previous
call's digests and token counts while the messages still equal their kept copies (``==``
in C), checks that each new one is of the shape and digests and counts it (keyed BLAKE2b,
tiktoken), continues the payload digest, judges system at head, system stable, pinned
present and capped, the budget, tool pairs (intact by the shape), the four fact checks
(skip), derives the metric cells and builds the same set of span attributes (both checked
against a real guarded call's below); then it resumes the wire body's digest where the
body parts from the previous one, as ctxguard does, and finds the instruction in it at the
previous offset. It leaves out what
the shape does not need (other providers and message shapes, facts, capture, enforce
mode, the conversation memory's eviction bookkeeping) and it is not tested against
ctxguard's verdicts beyond that one payload: it sizes a possible fast path, it is not one.

Timed like bench/in_situ.py (median of 300 runs, three rounds), in a tight loop and
right after the bare SDK call, next to ctxguard's hooks and the contract's outputs
replayed as in bench/contract_floor.py.
"""

from __future__ import annotations

import gc
import hashlib
import json
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import prometheus_client
from openai.resources.chat.completions.completions import Completions
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import ctxguard
import ctxguard.telemetry.spans as attr
import ctxguard.tokens
from ctxguard.conversation import _current
from ctxguard.intercept.answers import HttpResults, observe_answer
from ctxguard.providers import openai as openai_provider
from ctxguard.wiredigest import common_prefix

sys.path.insert(0, str(Path(__file__).parent))
import contract_floor
import overhead as ov

NO_HTTP = HttpResults()  # the result types whose HTTP response is read: none here (a parsed answer)

KEY = b"fused-experiment"
MARKER = "[Pinned facts"
WINDOW = 128_000
FACT_CHECKS = ("fact_present", "fact_current", "fact_forgotten", "fact_scoped")
#: The roles of the one shape this path takes: a message of another shape (a tool call or result,
#: content parts) would leave it; none does here, so ``tool_pairs_intact`` passes by construction.
PLAIN_ROLES = frozenset({"system", "user", "assistant", "developer"})


def instruction_of(kwargs: dict[str, Any]) -> bytes:
    """The first message's text as the SDK's JSON body carries it (the needle the wire search looks for)."""
    return json.dumps(kwargs["messages"][0]["content"])[1:-1].encode()


class State:
    """One conversation's previous call, as the fused path keeps it."""

    __slots__ = ("body", "copies", "digests", "first_system", "hasher", "hint", "pinned", "pinned_for", "resume",
                 "shared", "sums")

    def __init__(self) -> None:
        self.copies: list[dict[str, str]] = []
        self.digests: list[str] = []
        self.sums = [0]
        self.hasher: Any = None
        self.body = b""
        self.shared = 0
        self.resume: Any = None
        self.first_system: str | None = None
        self.pinned_for: str | None = None
        self.pinned: tuple[bool, int] = (False, 0)
        self.hint = -1


class Fused:
    def __init__(self, guard: Any) -> None:
        self.metrics = guard.metrics
        self.calibration = guard.calibration
        self.count = ctxguard.tokens.default_counter().count
        self.states: OrderedDict[Any, State] = OrderedDict()
        self.lock = threading.Lock()

    def state(self) -> State:
        key = (_current.get(), "openai", "chat.completions")
        with self.lock:
            state = self.states.get(key)
            if state is None:
                state = self.states[key] = State()
            else:
                self.states.move_to_end(key)
        return state

    def inspect(self, kwargs: dict[str, Any], st: State) -> tuple[dict[str, Any], list[int]] | None:
        msgs, model = kwargs.get("messages"), kwargs.get("model")
        if type(msgs) is not list:
            return None
        kept = st.copies
        n = min(len(msgs), len(kept))
        start = n if msgs[:n] == kept[:n] else next(i for i in range(n) if msgs[i] != kept[i])
        digests, sums, copies = st.digests[:start], st.sums[: start + 1], kept[:start]
        for m in msgs[start:]:
            role, text = m["role"], m["content"]
            if len(m) != 2 or role not in PLAIN_ROLES or type(text) is not str:
                return None  # not this path's shape
            h = hashlib.blake2b(f"{role}\x1f{text}".encode(), key=KEY, digest_size=16)
            digests.append(h.hexdigest())
            sums.append(sums[-1] + self.count(text) + 4)
            copies.append(m.copy())
        if start == len(kept) and st.hasher is not None:
            hasher = st.hasher.copy()
            if start < len(digests):
                hasher.update(("\n" + "\n".join(digests[start:])).encode())
        else:
            hasher = hashlib.blake2b(key=KEY, digest_size=16)
            hasher.update("\n".join(digests).encode())
        head = msgs[0]
        head_role = head["role"]
        if st.first_system is None:
            st.first_system = digests[0]
        if st.pinned_for != digests[0]:
            text = head["content"]
            at = text.find(MARKER)
            st.pinned = (at >= 0, self.count(text[at:]) if at >= 0 else 0)
            st.pinned_for = digests[0]
        present, pinned_tokens = st.pinned
        tokens = sums[-1] + 3
        headroom = WINDOW - tokens
        added, dropped = len(msgs) - start, len(kept) - start
        st.copies, st.digests, st.sums, st.hasher = copies, digests, sums, hasher
        self.calibration.factor(model)
        verdicts = (
            ("system_at_head", "pass" if head_role == "system" else "fail"),
            ("system_stable", "pass" if digests[0] == st.first_system else "fail"),
            ("pinned_present", "pass" if present else "fail"),
            ("pinned_capped", "pass" if pinned_tokens <= 800 else "fail"),
            ("pinned_intact", "pass"),
            ("payload_under_budget", "pass" if headroom >= 0 else "fail"),
            ("tool_pairs_intact", "pass"),
            *((check, "skip") for check in FACT_CHECKS),
        )
        m = self.metrics
        cells = [m.calls_at[("openai", "chat")]]
        for check, outcome in verdicts:
            cells.append(m.checks_at[(check, outcome)])
            if outcome == "fail":
                cells.append(m.violations_at[(check, "openai")])
        payload_digest = hasher.hexdigest()
        a = {
            attr.OPERATION: "chat", attr.PROVIDER: "openai", attr.MODE: "observe", attr.PAYLOAD_HASH: payload_digest,
            attr.PAYLOAD_MESSAGES: len(msgs), attr.PAYLOAD_TOKENS: tokens, attr.TOKENS_SOURCE: "tiktoken",
            attr.MESSAGE_ROLES: tuple([m["role"] for m in msgs[:128]]), attr.MESSAGE_HASHES: tuple(digests[:128]),
            attr.VIOLATIONS: tuple(c for c, o in verdicts if o == "fail"), attr.REQUEST_MODEL: model,
            attr.CONVERSATION_ID: "fused", attr.HEAD_ROLE: head_role, attr.HEAD_HASH: digests[0],
            attr.SKIPPED: tuple(f"{c}: no facts recorded" for c, o in verdicts if o == "skip"),
            attr.PREV_HASH: payload_digest, attr.MESSAGES_ADDED: added, attr.MESSAGES_DROPPED: dropped,
            attr.EVICTED: (), attr.BUDGET_WINDOW: WINDOW, attr.BUDGET_RESERVED_OUTPUT: 0,
            attr.BUDGET_RESERVED_REASONING: 0, attr.BUDGET_TOOLS: 0, attr.BUDGET_HISTORY_AVAILABLE: WINDOW - tokens,
            attr.BUDGET_HEADROOM: headroom, attr.BUDGET_UTILIZATION: round(tokens / WINDOW, 4),
            attr.PINNED_PRESENT: present, attr.PINNED_TOKENS: pinned_tokens, attr.PINNED_ENTRIES: 2,
            attr.PINNED_HASH: digests[0],
        }
        return a, cells

    def wire(self, body: bytes, st: State, instruction: bytes) -> tuple[str, bool]:
        previous = st.body
        if st.resume is not None and body.startswith(memoryview(previous)[: st.shared]):
            h, start = st.resume.copy(), st.shared
        else:
            h, start = hashlib.blake2b(key=KEY, digest_size=16), 0
        # resumed where the next body parts from this one, as ctxguard's wire digest does: a body
        # that grows by a message shares all of the previous one up to that message
        shared = common_prefix(previous, body, start)
        view = memoryview(body)
        h.update(view[start:shared])
        st.resume = h.copy()
        h.update(view[shared:])
        st.body, st.shared = body, shared
        found = st.hint >= 0 and body.startswith(instruction, st.hint)
        if not found:
            st.hint = body.find(instruction)
            found = st.hint >= 0
        return h.hexdigest(), found

    def call(self, kwargs: dict[str, Any], body: bytes, instruction: bytes) -> tuple[dict[str, Any], list[int]] | None:
        started = time.perf_counter()
        st = self.state()
        try:
            judged = self.inspect(kwargs, st)
        except Exception:
            return None
        self.wire(body, st, instruction)
        time.perf_counter() - started
        return judged


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ov.DropExporter()))
    policy = ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=800))
    guard = ctxguard.instrument(policy=policy, registry=prometheus_client.CollectorRegistry(),
                                tracer_provider=provider, digest_key=ov.KEY)
    assert guard is not None
    ov.keep_bare_calls_bare()
    pinned = ctxguard.render_pinned({"order_id": "A-1041", "shipping_city": "Pune"}, max_tokens=200)
    kwargs = {"model": ov.MODEL, "messages": [ov.system_message(pinned), *(ov.message(i) for i in range(1, size))]}
    body = json.dumps(kwargs).encode()
    instruction = instruction_of(kwargs)
    http = ov.http_lib.Client(transport=ov.http_lib.MockTransport(ov.handler))
    client = openai.OpenAI(api_key="x", base_url=ov.BASE_URL, max_retries=0, http_client=http)
    original: Any = Completions.create.__wrapped__  # type: ignore[attr-defined]
    chat = client.chat.completions
    response = original(chat, **kwargs)
    fused = Fused(guard)

    with ctxguard.conversation("fused"):
        for _ in range(3):
            chat.create(**kwargs)
        outputs = contract_floor.Outputs(guard, kwargs, body, response)
        emit = contract_floor.replay(outputs, provider.get_tracer("fused"), [])
        judged = fused.call(kwargs, body, instruction)
        assert judged is not None and set(judged[0]) == set(outputs.start_attrs), "not the same span attributes"
        assert len(judged[1]) == len(outputs.cells), "not the same metric series"

        def hooks() -> None:
            call = guard.before(openai_provider.PROVIDER, "chat.completions", kwargs)
            assert call is not None
            call.wire(body)
            observe_answer(call, openai_provider.SITES[0], response, NO_HTTP)

        def fused_inspection() -> None:
            fused.call(kwargs, body, instruction)

        def outputs_only() -> None:
            emit(lambda: response, None, (), {})

        def fused_and_outputs() -> None:
            fused.call(kwargs, body, instruction)
            emit(lambda: response, None, (), {})

        def sdk_call() -> None:
            original(chat, **kwargs)

        arms: dict[str, Callable[[], None]] = {
            "ctxguard's hooks": hooks,
            "contract outputs (replayed)": outputs_only,
            "fused inspection": fused_inspection,
            "fused inspection + outputs": fused_and_outputs,
        }
        for _ in range(100):
            for fn in arms.values():
                sdk_call()
                fn()
        results: dict[str, dict[str, list[float]]] = {name: {"tight": [], "situ": []} for name in arms}
        gc.disable()
        try:
            for _ in range(3):
                for name, fn in arms.items():
                    for where, before in (("tight", lambda: None), ("situ", sdk_call)):
                        results[name][where].append(ov.median_after(before, fn, 300))
        finally:
            gc.enable()
    ctxguard.uninstrument()
    provider.shutdown()
    print(f"{size} messages resent, µs (median of 300, three rounds)\n")
    print("| arm | tight loop | right after the bare SDK call |\n|---|---|---|")
    for name, r in results.items():
        tight, situ = (" / ".join(f"{v:.0f}" for v in r[k]) for k in ("tight", "situ"))
        print(f"| {name} | {tight} | {situ} |")


if __name__ == "__main__":
    main()
