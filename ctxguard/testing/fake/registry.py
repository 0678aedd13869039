"""The wire formats the fake speaks: one ``FORMAT`` a module, listed here, the only place the
server learns of them. Adding one: write its module (a ``WireFormat``) and add one line to ``FORMATS``.
"""

from __future__ import annotations

from . import anthropic_messages, bedrock, cohere, gemini, mistral, ollama, openai_chat, openai_responses
from .wire import WireFormat

__all__ = ["FORMATS", "UNKNOWN_ROUTE", "answering"]

FORMATS: tuple[WireFormat, ...] = (
    openai_chat.FORMAT,
    openai_responses.FORMAT,
    anthropic_messages.FORMAT,
    gemini.FORMAT,
    mistral.FORMAT,
    ollama.FORMAT,
    cohere.FORMAT,
    bedrock.CONVERSE,
    bedrock.INVOKE,
)
#: A route no format answers is answered (404) as OpenAI answers one.
UNKNOWN_ROUTE = openai_chat.FORMAT


def answering(route: str) -> WireFormat | None:
    """The format whose routes hold ``route`` (a path without its query or trailing ``/``); no two do."""
    return next((f for f in FORMATS if f.path.fullmatch(route)), None)
