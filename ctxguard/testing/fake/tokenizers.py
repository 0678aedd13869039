"""What a model's own tokenizer makes of the text the fake's estimate counts (``tokens``), whichever wire
format carries the request: a model reads a request with its tokenizer, and says so in its usage, on its
vendor's API and on any other that serves it (Anthropic's OpenAI SDK compatibility, OpenRouter, a gateway).

Restated from the providers' pages, not imported from ``ctxguard.providers`` (``media``'s reason: a fake
that shared ctxguard's rule would agree with it by construction). One rule a vendor that documents one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .tokens import FRAME_TOKENS, Reading, messages_tokens

__all__ = ["NEWER_CLAUDE_TEXT", "model_messages", "model_text"]

#: Claude's newer tokenizer (Opus 4.7 and later, Sonnet 5, every Claude 5, Fable, Mythos): "The same
#: input text produces approximately 30 percent more tokens than on earlier models"
#: (https://platform.claude.com/docs/en/build-with-claude/token-counting). The fake reads their text
#: that much larger, framing and media as they are. Any id form: ``claude-opus-4-8``, Bedrock's
#: ``us.anthropic.claude-sonnet-5-v1:0``, OpenRouter's ``anthropic/claude-opus-4.7``.
_NEWER_CLAUDE = re.compile(r"claude-(?:opus-4[-.](?:[7-9]|\d\d)|(?:opus|sonnet|haiku|fable|mythos)-(?:[5-9]|\d\d)"
                           r"|fable|mythos)(?!\d)")
NEWER_CLAUDE_TEXT = 1.3


def model_text(model: str, text: int) -> int:
    """``text`` tokens of text as ``model`` reads it: more on Claude's newer tokenizer."""
    return round(text * NEWER_CLAUDE_TEXT) if _NEWER_CLAUDE.search(model.lower()) else text


def model_messages(model: str, messages: Any, reading: Reading, price: Callable[[Any], int]) -> int:
    """``tokens.messages_tokens`` as ``model`` reads them: their text at its tokenizer's rate
    (``model_text``), their frames and media (``price``) as they are."""
    media_tokens = 0

    def priced(part: Any) -> int:
        nonlocal media_tokens
        cost = price(part)
        media_tokens += cost
        return cost

    n = messages_tokens(messages, reading, priced)
    frames = FRAME_TOKENS * len(messages) if isinstance(messages, list) else 0
    return model_text(model, n - frames - media_tokens) + media_tokens + frames
