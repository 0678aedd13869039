"""LangChain's history helpers over a growing conversation: ``trim_messages`` without
``include_system`` drops the system prompt and then an early fact, and ctxguard counts each
eviction once, on the first request whose body lacks it; ``RunnableWithMessageHistory`` sends
every earlier turn again."""

from __future__ import annotations

import pytest

import ctxguard
from ctxguard.testing import payload_contains
from tests.frameworks.helpers import EvictionNotNamed, framework, play

framework("langchain_openai")

from langchain_core.chat_history import InMemoryChatMessageHistory  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages  # noqa: E402
from langchain_core.messages.utils import count_tokens_approximately  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

SYSTEM = ("You are the order assistant of a parcel shop. Answer in one short sentence, in English, "
          "and never promise a delivery date you cannot see in the tracking data.")
ORDER = "A-99172"
TURNS = 8

def chat(llm) -> ChatOpenAI:
    return ChatOpenAI(model="gpt-4o", base_url=llm.base_url, api_key="t", max_retries=0)


def trimmed_conversation(harness, call: str, counted: list[tuple[float, float]]):
    """A chat whose history is ``trim_messages(strategy="last")`` to 150 tokens, system prompt not
    kept; after each turn of the guarded run, the system and fact eviction totals so far."""
    def scenario(llm):
        llm.script(*(f"Your parcel is on its way, tracking update number {t}." for t in range(TURNS)))
        trimmer = trim_messages(max_tokens=150, strategy="last", token_counter=count_tokens_approximately)
        chain = trimmer | chat(llm)
        history = [SystemMessage(SYSTEM), HumanMessage(f"Hi, my order number is {ORDER}.")]
        with ctxguard.conversation("trimmed"):
            ctxguard.record_fact("order_number", ORDER)
            for turn in range(TURNS):
                if call == "stream":
                    reply = AIMessage("".join(str(c.content) for c in chain.stream(history)))
                else:
                    reply = chain.invoke(history)
                history += [reply, HumanMessage(f"Thanks. And where is it now, after update {turn}?")]
                if harness.guard is not None:
                    counted.append((harness.metric("ctxguard_evictions_total", kind="system"),
                                    harness.metric("ctxguard_evictions_total", kind="fact")))
        return [m.content for m in history]

    return scenario


def first_without(played, present) -> int:
    """The index of the first request whose body arrived without what ``present`` looks for."""
    lacking = [i for i, body in enumerate(played.bodies()) if not present(body)]
    assert lacking, "the trimmer never dropped it: the scenario proves nothing"
    return lacking[0]


def has_system(body) -> bool:
    return any(m["role"] == "system" and m["content"] == SYSTEM for m in body["messages"])


def has_order(body) -> bool:
    return payload_contains(body, ORDER)


@pytest.mark.parametrize("call", ["invoke", "stream"])
def test_trim_messages_evictions_are_counted_once_on_the_first_request_lacking_them(harness, call):
    counted: list[tuple[float, float]] = []

    def evictions(played):
        system_gone, order_gone = first_without(played, has_system), first_without(played, has_order)
        assert 0 < system_gone < order_gone, "the system prompt goes first, the early fact later"
        assert counted == [(float(i >= system_gone), float(i >= order_gone)) for i in range(TURNS)]
        named = ["system" in s.attributes["ctxguard.evicted"] for s in played.spans]
        assert named == [i == system_gone for i in range(TURNS)]
        assert all(has_system(b) for b in played.bodies()[:system_gone])

    play(harness, trimmed_conversation(harness, call, counted), then=evictions)


def test_trim_messages_fact_eviction_is_named_on_its_span(harness):
    def named(played):
        order_gone = first_without(played, has_order)
        marked = ["fact" in s.attributes["ctxguard.evicted"] for s in played.spans]
        if marked != [i == order_gone for i in range(TURNS)]:
            raise EvictionNotNamed(f"fact eviction at request {order_gone + 1}; spans naming it: {marked}")

    play(harness, trimmed_conversation(harness, "stream", []), then=named)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # LangChain points to LangGraph; apps still use it
def test_runnable_with_message_history_resends_every_turn(harness):
    questions = ["Where is my parcel?", "When will it arrive?", "Can I change the address?", "Thanks!"]

    def scenario(llm):
        prompt = ChatPromptTemplate.from_messages(
            [("system", SYSTEM), MessagesPlaceholder("history"), ("human", "{question}")])
        store: dict[str, InMemoryChatMessageHistory] = {}
        app = RunnableWithMessageHistory(
            prompt | chat(llm), lambda session: store.setdefault(session, InMemoryChatMessageHistory()),
            input_messages_key="question", history_messages_key="history")
        with ctxguard.conversation("remembered"):
            for question in questions:
                app.invoke({"question": question}, config={"configurable": {"session_id": "s1"}})
        return [(m.type, m.content) for m in store["s1"].messages]

    def history(played):
        assert [len(b["messages"]) for b in played.bodies()] == [2, 4, 6, 8]
        a = [s.attributes for s in played.spans]
        assert [x.get("ctxguard.messages.added") for x in a[1:]] == [2, 2, 2]
        assert [x.get("ctxguard.messages.dropped") for x in a[1:]] == [0, 0, 0]
        assert all(list(x["ctxguard.violations"]) == [] for x in a)

    played = play(harness, scenario, then=history)
    assert [m[0] for m in played.result] == ["human", "ai"] * 4
