"""A small chat web app served by gunicorn with 4 worker processes, guarded by ctxguard.

Run it (the settings are in ``gunicorn.conf.py`` beside this file; docs/operations.md,
"gunicorn / uvicorn workers", explains each line)::

    export PROMETHEUS_MULTIPROC_DIR=$(mktemp -d)    # before gunicorn starts: all workers write there
    export CTXGUARD_DIGEST_KEY=change-me            # one secret for every worker
    export REDIS_URL=redis://127.0.0.1:6379/0       # facts and chat history, shared by the workers
    export FLEET_LEDGER_READ_TIMEOUT=0.003          # how long a call waits for its facts (s)
    export OPENAI_BASE_URL=... OPENAI_API_KEY=...
    gunicorn -c examples/fleet_app/gunicorn.conf.py

    curl -s localhost:8000/chat -H 'content-type: application/json' \\
         -d '{"conversation": "c-1", "message": "my order is A-1041", "facts": {"order_id": "A-1041"}}'
    curl -s localhost:8000/metrics     # the sum over all workers, dead ones' counts included

``POST /chat`` takes ``conversation``, ``message`` and optionally ``facts`` (what the front end
knows for sure, recorded with ``ctxguard.record_fact``) and answers ``{"reply", "worker"}``.

``FLEET_HISTORY=rotating`` switches on the bug ``ctxguard demo`` shows: the system prompt is
stored as the first item of the bounded history buffer, so a long conversation pushes it out
(``CtxguardSystemPromptEvicted``). The default keeps it outside the buffer.
"""

from __future__ import annotations

import json
import os

import openai
import redis
from flask import Flask, request
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest, multiprocess

import ctxguard

# A guarded call waits at most read_timeout for its conversation's facts (3 ms by default, for a
# Redis on the same host or zone); FLEET_LEDGER_READ_TIMEOUT raises it for one farther away.
ctxguard.instrument(ledger=ctxguard.RedisLedger(
    os.environ["REDIS_URL"], read_timeout=float(os.environ.get("FLEET_LEDGER_READ_TIMEOUT", "0.003"))))

SYSTEM = "You are the support assistant of Acme Shop. Be brief and exact."
HISTORY = 6  # messages of a conversation kept
ROTATING = os.environ.get("FLEET_HISTORY") == "rotating"

store = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
# One attempt per turn (the front end decides on retries). The header tells the model's logs,
# or a proxy's, which worker sent a request.
client = openai.OpenAI(max_retries=0, timeout=30, default_headers={"x-worker-pid": str(os.getpid())})
# A live gauge: one series per running worker (``pid`` label). gunicorn's child_exit hook
# (mark_process_dead) removes a dead worker's series; its counters stay in the totals.
worker_up = Gauge("fleet_app_worker_up", "1 for each running worker process.", multiprocess_mode="liveall")
worker_up.set(1)

app = Flask(__name__)


def _push(key: str, message: dict[str, str]) -> None:
    store.rpush(key, json.dumps(message))
    store.ltrim(key, -HISTORY, -1)


@app.post("/chat")
def chat() -> dict[str, object]:
    turn = request.get_json()
    conversation = turn["conversation"]
    key = f"fleet:history:{conversation}"
    with ctxguard.conversation(conversation):
        for fact_id, value in turn.get("facts", {}).items():
            ctxguard.record_fact(fact_id, value)
        if ROTATING and not store.exists(key):
            _push(key, {"role": "system", "content": SYSTEM})  # the bug: the prompt is history
        _push(key, {"role": "user", "content": turn["message"]})
        history = [json.loads(m) for m in store.lrange(key, 0, -1)]
        messages = history if ROTATING else [{"role": "system", "content": SYSTEM}, *history]
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        answer = reply.choices[0].message.content or ""
        _push(key, {"role": "assistant", "content": answer})
    return {"reply": answer, "worker": os.getpid()}


@app.get("/metrics")
def metrics() -> tuple[bytes, int, dict[str, str]]:
    # prometheus_client's multiprocess recipe: a fresh registry that reads every worker's files,
    # not the per-process default one.
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry), 200, {"Content-Type": CONTENT_TYPE_LATEST}
