"""``provider_kept_all``: the provider read the whole prompt, judged on the input tokens it reported.

Some servers cut an over-long prompt instead of refusing it, answer 200 and report what they kept:
Ollama below ``num_ctx``, the Responses API with ``truncation="auto"``, OpenAI-compatible servers
at their maximum length (vLLM's ``truncate_prompt_tokens``, TGI's ``truncate``, llama.cpp's server
at its context size). Their reported input is then far below what the request carries, which no
other count shows, so once the answer reports its input this check compares the two.

The comparison is with the least a server that kept everything can have read: half the request's
text tokens as ctxguard counts them exactly (cl100k), ``FLOOR``, where the lowest any provider's
count of that text came to on the recorded corpus is 0.80 of it (tests/data/recorded/, every
provider; docs/budget.md, "Kept whole"). The text is the messages' only, never what ctxguard counts
on the safe side (framing, images and files charged their bound, tool schemas); and not what a
provider is known to read as less, or not at all:

- a message carrying a previous answer's reasoning (``Message.reasoning``): providers drop it;
- text outside ASCII, in proportion to its bytes: tokenizers differ most there (OpenAI's o200k
  makes 4.4 times fewer tokens of Gujarati than cl100k);
- tool calls and results where the provider may count only their keys and strings
  (``Payload.loose_tool_counts``: Gemini on Vertex AI);
- half of a text over ``tokens.TIKTOKEN_MAX_CHARS``, which is estimated, not counted.

A report below that by ``SLACK`` tokens or more fails: a prompt of a few hundred tokens never does,
whatever a template or a tokenizer makes of it. Every provider's reported input includes what it
served from a cache (docs/budget.md), so a cached prefix needs nothing. The check does not judge an
answer with no input count (or 0, which some OpenAI-compatible servers write for a usage they do
not know), a request whose history the provider holds (``previous_response_id``: the report
counts more than was sent), one that lets the provider edit its context and say so
(``context_management``), a low count on an answer a guardrail blocked (it is the filter's), or a count
that is the four-characters estimate (no tiktoken). A request counted in byte bounds
(``tokenizer="lazy"``) is judged on the count it shows first and counted exactly only when that
shows a drop (``NEEDS_EXACT``). The request's whole text is compared first: only a report below it
has the messages (and the finish reasons) looked at. After sending, it never blocks; enforce mode
only records it.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..payload import Answer, Message, Payload
from ..tokens import BOUND, TIKTOKEN_MAX_CHARS, TiktokenCounter, utf8_bytes
from ..violations import Violation
from .base import NEEDS_EXACT, Context, Skip

__all__ = ["FLOOR", "SLACK", "provider_kept_all", "text_read"]

#: The least share of a message's text tokens, as counted here, that a server keeping it reads: the
#: lowest reported share on the recorded corpus is 0.80 (a Chat Completions request of 474 text
#: tokens, parallel tool calls: OpenAI frames them in fewer tokens), so a third below it.
FLOOR = 0.5
#: Tokens a report must fall below ``FLOOR`` by: prompts under twice this never fail.
SLACK = 128
#: Finish reasons of an answer whose input a filter stopped: its count is not the prompt's.
_BLOCKED = ("guardrail", "content_filter")


def provider_kept_all(payload: Payload, ctx: Context, reply: Answer | None, unanswered: str) -> list[Violation] | Skip:
    """After the response: the reported input tokens are not far below the request's own count."""
    if reply is None:
        return Skip(unanswered)
    if payload.unreadable is not None:
        return Skip(payload.unreadable)
    reported = reply.input_tokens
    if not reported:  # none, or 0: some OpenAI-compatible servers put zeros in a usage they do not know
        return Skip("the answer reports no input tokens")
    why = payload.history_elsewhere or payload.server_edits
    if why is not None:
        return Skip(why)
    bound = payload.basis == BOUND.name
    if not bound and payload.basis != TiktokenCounter.name:
        return Skip(f"counted with the {payload.basis}, not a tokenizer: too loose to say tokens were dropped")
    # The whole text first: most calls end here, no message looked at. A count in bytes shows its
    # text at the model's learnt tokens a byte (``Payload.tokens``).
    whole = payload.tokens - payload.fixed if bound else payload.raw_tokens - payload.fixed
    if not _far_below(reported, whole):
        return []
    if any(word in reason.lower() for reason in reply.finish_reasons for word in _BLOCKED):
        return Skip(f"the input was blocked ({', '.join(reply.finish_reasons)}): the count is the filter's")
    if bound:  # what its messages show decides when it finds no drop; else it is counted exactly
        shown = payload.scale * sum(m.tokens - m.fixed for m in _read(payload))
        return NEEDS_EXACT if _far_below(reported, shown) else []
    text = text_read(payload)
    if not _far_below(reported, text):
        return []
    return [Violation("provider_kept_all",
                      f"{reported:,} input tokens reported for {payload.raw_tokens:,} sent (at least "
                      f"{int(FLOOR * text):,} if all were kept): the provider cut the prompt")]


def text_read(payload: Payload) -> float:
    """The text tokens of ``payload`` (counted exactly) that a server keeping it all reads, as a
    provider may count them: its messages', but those providers read as less (above)."""
    total = 0.0
    for message in _read(payload):
        tokens: float = message.tokens - message.fixed
        text = message.text
        if len(text) > TIKTOKEN_MAX_CHARS:
            tokens /= 2  # estimated, four characters a token: 2.6 times cl100k's count of deeply indented JSON
        if tokens > 0 and not text.isascii():
            tokens *= len(text.encode("ascii", "ignore")) / utf8_bytes(text)
        total += tokens
    return total


def _far_below(reported: int, text: float) -> bool:
    """Whether ``reported`` input tokens are ``SLACK`` or more below ``FLOOR`` of ``text`` tokens."""
    return reported <= FLOOR * text - SLACK


def _read(payload: Payload) -> Iterator[Message]:
    """The messages whose text counts toward what a server that kept them read."""
    loose = payload.loose_tool_counts
    return (m for m in payload.messages if not (m.reasoning or (loose and m.tool_refs)))
