"""The workload bench/fleet_load.py plays on the fleet and bench/workload_memory.py in one process:
support conversations about an order, each with a history that has been going on."""

from __future__ import annotations

import random

USER = "about order {order}: {question} (turn {turn} of conversation {conversation})"
QUESTIONS = [
    "where is my parcel right now, and when will it arrive?",
    "can you change the delivery address to my office in Baner?",
    "the courier said it was delivered but I have nothing, what now?",
    "please send me the invoice again, the first one had a typo in the name",
    "is it possible to split the shipment so the books come first?",
]


def user_message(conversation: str, order: str, question: str, turn: int) -> str:
    """What the user says at ``turn`` of ``conversation`` (a negative turn: before the bench started)."""
    return USER.format(order=order, question=question, turn=turn, conversation=conversation)


def next_question(questions: list[str], conversation: str, turn: int) -> str:
    """The question a user asks at ``turn``: the same for a conversation and turn, whatever the run."""
    return questions[(turn * 7 + len(conversation)) % len(questions)]


def earlier_messages(rng: random.Random, conversation: str, order: str, keep: int) -> list[dict[str, str]]:
    """The ``keep`` messages a conversation holds when the bench starts: the user's questions (drawn
    with ``rng``) and the assistant's answers, one after the other."""
    messages = []
    for i in range(keep):
        if i % 2 == 0:
            messages.append({"role": "user", "content": user_message(conversation, order, rng.choice(QUESTIONS),
                                                                     i - keep)})
        else:
            messages.append({"role": "assistant", "content": f"Earlier answer {i} on {order}: it left the warehouse."})
    return messages
