"""A fact recorded in one OS process is enforced on an LLM call made by another (RedisLedger)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pytest

import ctxguard
from tests.facts.test_redis_ledger import PATIENT  # fact semantics, not timing


def record_in_another_process(redis_url: str, prefix: str, *events: str) -> None:
    script = textwrap.dedent(f"""
        import ctxguard
        ctxguard.instrument(ledger=ctxguard.RedisLedger({redis_url!r}, prefix={prefix!r}), digest_key="k")
        with ctxguard.conversation("order-41", tenant="acme"):
            {"; ".join(events)}
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("corrected", [True, False])
def test_fact_recorded_by_another_worker_is_enforced_here(redis_url, harness, llm, client, corrected):
    events = ['ctxguard.record_fact("shipping_city", "Mumbai")']
    if corrected:
        events.append('ctxguard.record_fact("shipping_city", "Pune")')
    prefix = uuid.uuid4().hex
    record_in_another_process(redis_url, prefix, *events)
    harness.start(mode="enforce", ledger=ctxguard.RedisLedger(redis_url, prefix=prefix, read_timeout=PATIENT))
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "deliver to Mumbai"}]
    with ctxguard.conversation("order-41", tenant="acme"):
        if corrected:
            with pytest.raises(ctxguard.ContextViolation) as info:
                client.chat.completions.create(model="gpt-4o", messages=messages)
            assert [v.check for v in info.value.violations] == ["fact_present", "fact_current"]
            assert llm.requests == []
        else:
            client.chat.completions.create(model="gpt-4o", messages=messages)
            assert len(llm.requests) == 1


def test_forget_in_another_worker(redis_url, harness, llm, client):
    prefix = uuid.uuid4().hex
    record_in_another_process(redis_url, prefix, 'ctxguard.record_fact("phone", "+91 98200 12345")',
                              'ctxguard.forget_fact("phone")')
    harness.start(mode="observe", ledger=ctxguard.RedisLedger(redis_url, prefix=prefix, read_timeout=PATIENT))
    with ctxguard.conversation("order-41", tenant="acme"):
        client.chat.completions.create(model="gpt-4o", messages=[
            {"role": "system", "content": "s"}, {"role": "user", "content": "call +91 98200 12345"}])
    assert list(harness.spans()[-1].attributes["ctxguard.violations"]) == ["fact_forgotten"]
