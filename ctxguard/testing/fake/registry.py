"""The wire formats the fake speaks: one ``FORMAT`` a module, listed here, the only place the
server learns of them. Adding one: write its module (a ``WireFormat``) and add one line to ``FORMATS``."""

from __future__ import annotations

from . import anthropic_messages, bedrock, cohere, gemini, mistral, ollama, openai_chat, openai_responses
from .wire import WireFormat

__all__ = ["ADDRESSES", "FORMATS", "SERVER_WINDOWS", "UNKNOWN_ROUTE", "answering", "unknown_route"]

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
unknown_route = openai_chat.invalid_url
#: ``FakeLLM``'s attributes each format declares: its SDK's address (-> the path after the origin),
#: and the window its server gives a request that sets none (-> the format's name and the window).
ADDRESSES = {f.address[0]: f.address[1] for f in FORMATS if f.address is not None}
SERVER_WINDOWS = {f.server_window[0]: (f.name, f.server_window[1]) for f in FORMATS if f.server_window is not None}


def answering(route: str) -> WireFormat | None:
    """The format whose routes hold ``route`` (a path without its query or trailing ``/``); no two do."""
    return next((f for f in FORMATS if f.path.fullmatch(route)), None)
