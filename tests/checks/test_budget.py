"""``ctxguard/checks/budget.py``, case by case: ``payload_under_budget`` on the budget equation's
terms (end to end through the SDK: ``tests/checks/test_checks.py``; the equation itself:
``tests/test_budget.py``)."""

from __future__ import annotations

from ctxguard.budget import Budget, evaluate
from tests.checks.cases import FAIL, PASS, SKIP, Case, context, judge, payload, table

P = payload(("system", "You are terse."), ("user", "hello"))


def under(id: str, budget: Budget, *, model: str | None = "m", input: int, system: int = 0, tools: int = 0,
          max_output: int | None = None, expect: str, says: str = "") -> Case:
    ev = evaluate(budget, model=model, input_tokens=input, system_tokens=system, tools_tokens=tools,
                  max_output_tokens=max_output)
    return Case("payload_under_budget", id, P, context(P, budget=ev), expect, says)


@table("payload_under_budget", [
    under("well within the window", Budget(window=1000), input=100, max_output=100, expect=PASS),
    under("exactly filling the window", Budget(window=1000), input=900, max_output=100, expect=PASS),
    under("one token past the window", Budget(window=1000), input=900, max_output=101, expect=FAIL,
          says="input 900 + reserved 101 tokens exceed the window 1000 by 1"),
    under("the input alone past the window", Budget(window=1000), input=1001, expect=FAIL,
          says="input 1001 + reserved 0 tokens exceed the window 1000 by 1"),
    under("the policy's reservation over the request's", Budget(window=1000, reserved_output=500), input=600,
          max_output=10, expect=FAIL, says="reserved 500 tokens exceed the window 1000 by 100"),
    under("reasoning reserved separately", Budget(window=1000, reserved_reasoning=200), input=700,
          max_output=101, expect=FAIL, says="reserved 301 tokens exceed the window 1000 by 1"),
    under("the window from the model table", Budget(), model="gpt-4o", input=127_000, max_output=1000,
          expect=PASS),
    under("past the model table's window", Budget(), model="gpt-4-0613", input=8_000, max_output=193,
          expect=FAIL, says="exceed the window 8192 by 1"),
    under("history exactly at history_max", Budget(window=1000, history_max=85), input=100, system=10, tools=5,
          expect=PASS),
    under("history one token over history_max", Budget(window=1000, history_max=84), input=100, system=10,
          tools=5, expect=FAIL, says="history 85 tokens exceeds history_max 84"),
    under("over the window and over history_max", Budget(window=100, history_max=10), input=200, expect=FAIL,
          says="history 200 tokens exceeds history_max 10"),
    under("a model without a known window", Budget(), model="my-finetune-v7", input=10, expect=SKIP,
          says="unknown context window for model 'my-finetune-v7' (set Budget(window=...), or give 'my-finetune-v7' a"
               " window: instrument(model_windows=) or the CTXGUARD_MODEL_WINDOWS file)"),
    under("an unknown vendor's versioned id is not guessed", Budget(), model="acme-large-3.5", input=10,
          expect=SKIP, says="give 'acme-large-3.5' a window: instrument(model_windows=) or the CTXGUARD_MODEL_WINDOWS"),
    under("a Bedrock id: the id to add is the model's own", Budget(), model="us.anthropic.claude-unknown-v1:0",
          input=10, expect=SKIP, says="give 'claude-unknown' a window"),
    under("a new minor of a known family: its predecessor's window", Budget(), model="gemini-3.9-flash",
          input=1_048_000, max_output=577, expect=FAIL, says="exceed the window 1048576 by 1"),
    under("a new minor of a known family, within that window", Budget(), model="claude-sonnet-5-1", input=999_000,
          max_output=1000, expect=PASS),
    under("no model at all", Budget(), model=None, input=10, expect=SKIP, says="unknown context window"),
    under("a window of zero", Budget(window=0), input=1, expect=SKIP, says="window must be positive"),
])
def test_payload_under_budget(case: Case) -> None:
    judge(case)
