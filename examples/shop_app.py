"""A small delivery-assistant chat app, the subject of ``examples/test_retention_suite.py``.

It keeps the system prompt outside its history buffer, rebuilds a capped pinned
facts block on every call, and tells ctxguard about each fact it learns, corrects
or deletes. ``SHOP_BUG`` switches on one classic defect at a time, so you can
watch the suite catch it::

    SHOP_BUG=rotating   the system prompt lives inside a deque(maxlen=8)
    SHOP_BUG=revert     a correction is recorded but the pinned block keeps the first value
    SHOP_BUG=undelete   "forget my phone" is recorded but the pinned block keeps it
    SHOP_BUG=shared     the facts dict is shared by every customer (class attribute)
    SHOP_BUG=uncapped   the pinned block is rendered with no size cap
"""

from __future__ import annotations

import os
import re
from collections import deque
from typing import Any, ClassVar

import ctxguard

SYSTEM = "You are the delivery assistant of Acme Shop. Be brief and exact."
PINNED = ctxguard.Pinned(marker="Pinned facts", max_tokens=120)
TAIL = 6  # messages of verbatim history kept

_FACT = re.compile(r"my (?P<name>[a-z0-9 ]+?) is (?P<value>.+)$", re.IGNORECASE)
_FORGET = re.compile(r"forget my (?P<name>[a-z0-9 ]+)$", re.IGNORECASE)


class ShopAssistant:
    """One customer's conversation. ``say`` takes the customer's text, returns the reply."""

    _shared_facts: ClassVar[dict[str, str]] = {}  # only used by SHOP_BUG=shared

    def __init__(self, client: Any, customer: str, bug: str | None = None) -> None:
        self.client = client
        self.customer = customer
        self.bug = bug if bug is not None else os.environ.get("SHOP_BUG") or None
        self.facts: dict[str, str] = self._shared_facts if self.bug == "shared" else {}
        self.first_values: dict[str, str] = {}
        size = TAIL + 2 if self.bug == "rotating" else TAIL
        self.history: deque[dict[str, str]] = deque(maxlen=size)
        if self.bug == "rotating":
            self.history.append({"role": "system", "content": SYSTEM})

    def _learn(self, text: str) -> None:
        if forget := _FORGET.search(text):
            name = forget["name"].strip().replace(" ", "_")
            ctxguard.forget_fact(name)
            if self.bug != "undelete":
                self.facts.pop(name, None)
        elif fact := _FACT.search(text):
            name, value = fact["name"].strip().replace(" ", "_"), fact["value"].strip()
            ctxguard.record_fact(name, value, required=not name.startswith("preferred"))
            self.first_values.setdefault(name, value)
            self.facts[name] = self.first_values[name] if self.bug == "revert" else value

    def _pinned(self) -> str:
        cap = 100_000 if self.bug == "uncapped" else PINNED.max_tokens
        return ctxguard.render_pinned(self.facts, max_tokens=cap, marker=PINNED.marker)

    def messages(self) -> list[dict[str, str]]:
        pinned = {"role": "system", "content": self._pinned()}
        if self.bug == "rotating":  # the system prompt is the buffer's element 0, until pushed out
            buffered = list(self.history)
            if buffered and buffered[0]["content"] == SYSTEM:
                return [buffered[0], pinned, *buffered[1:]]
            return [pinned, *buffered]
        return [{"role": "system", "content": SYSTEM}, pinned, *self.history]

    def say(self, text: str) -> str:
        with ctxguard.conversation(self.customer):
            self._learn(text)
            self.history.append({"role": "user", "content": text})
            reply = self.client.chat.completions.create(model="gpt-4o", messages=self.messages())
            answer = reply.choices[0].message.content or ""
            self.history.append({"role": "assistant", "content": answer})
            return answer
