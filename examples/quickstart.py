"""Quick start, runnable offline: a local fake model stands in for the OpenAI API.

    python examples/quickstart.py
"""

from __future__ import annotations

import logging

import openai
from prometheus_client import generate_latest

import ctxguard
from ctxguard.testing import FakeLLM

logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

guard = ctxguard.instrument(
    policy=ctxguard.Policy(pinned=ctxguard.Pinned(marker="Pinned facts", max_tokens=400)),
    digest_key="example-secret",
)
pinned = ctxguard.render_pinned({"shipping_city": "Pune", "order_id": "A-1041"}, max_tokens=400)

good = [
    {"role": "system", "content": "You are the order assistant.\n\n" + pinned},
    {"role": "user", "content": "Where is my parcel?"},
]
with (
    FakeLLM() as llm,
    openai.OpenAI(base_url=llm.base_url, api_key="offline") as client,
    ctxguard.conversation("order-41"),
):
    client.chat.completions.create(model="gpt-4o", messages=good)
    # The history buffer lost the system prompt: observe mode logs it and counts it.
    client.chat.completions.create(model="gpt-4o", messages=good[1:])

for line in generate_latest().decode().splitlines():
    if line.startswith(("ctxguard_violations_total", "ctxguard_evictions_total")) and not line.endswith(" 0.0"):
        print(line)
ctxguard.uninstrument()
