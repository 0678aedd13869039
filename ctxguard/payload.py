"""The provider-neutral request: what a provider module hands to the guard.

A provider module translates SDK keyword arguments into a ``RequestView``
(role and readable text per message, references for non-text parts and what the
provider charges for them, the output reservation). ``measure`` turns it into a ``Payload`` with digests and
token counts. Checks only ever see a ``Payload``; they never learn which SDK
produced it. What came back is an ``Answer``; a streamed answer's text accumulates in an
``AnswerText``, which holds no more than ``ANSWER_LIMIT`` of it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

__all__ = [
    "ANSWER_LIMIT",
    "CHOICES_KEPT",
    "KEY_BYTES",
    "REASONING_REFS",
    "ROLES",
    "SYSTEM_ROLES",
    "TOOL_CALL",
    "TOOL_ELSEWHERE",
    "TOOL_REFS",
    "TOOL_RESULT",
    "UNREAD",
    "Answer",
    "AnswerText",
    "Item",
    "Message",
    "Payload",
    "RequestView",
    "message_key",
    "tool_ref",
]

#: Roles that carry the application's instruction.
SYSTEM_ROLES = frozenset({"system", "developer"})
#: Roles told apart wherever messages are counted by role (the dropped-messages metric, the
#: conversation memory); any other role counts as ``other``.
ROLES = ("system", "developer", "user", "assistant", "tool", "function", "other")
_ROLE_BYTE = {role: bytes((code,)) for code, role in enumerate(ROLES)}
#: The length of a ``message_key``: a machine word, so that keys joined unpack in C
#: (``memoryview.cast("Q")``).
KEY_BYTES = 8


def message_key(role: str, digest: str) -> bytes:
    """``Message.key``: the first 7 bytes of the digest (32 hex characters), then the role's index in
    ``ROLES``. Two different messages share one with odds of 2**-56.

    >>> message_key("user", "0123456789abcdef" * 2).hex()
    '0123456789abcd02'
    """
    return bytes.fromhex(digest[:14]) + _ROLE_BYTE.get(role, _ROLE_BYTE["other"])


#: One message as the model reads it: ``(role, text, refs, source, cost)``. A plain tuple
#: because it is built per message per call and is the cache key.
#: ``text`` is every text the model reads there (content, parts, tool arguments,
#: tool results); ``refs`` are non-text parts (image URL, file id; digested only)
#: and ids prefixed ``id:``; ``source`` is ``"message"``, or ``"instructions"`` for
#: a provider's system parameter; ``cost`` is the input tokens the provider charges
#: for the non-text parts (an image by its size and the model's formula, another part
#: a flat estimate), 0 for text only. The digest covers role, text and refs, not cost.
Item = tuple[str, str, tuple[str, ...], str, int]

#: Tool exchanges in the neutral form: one ref per tool call a message makes and per tool result it
#: carries, whatever the provider calls them (OpenAI ``tool_calls`` / role ``tool`` /
#: ``function_call`` items, Anthropic ``tool_use`` / ``tool_result`` blocks, Gemini
#: ``function_call`` / ``function_response`` parts). ``tool_ref`` writes them:
#: ``id:tool_call=<id>`` for a call with an id, ``id:tool_call:<name>`` for one known by its
#: function's name only (Gemini, legacy ``function_call``), ``id:tool_call:<name>=<id>`` for both;
#: results likewise. A result answers the call with its id when both carry one, else the call with
#: its name (``checks.tools``).
TOOL_CALL = "id:tool_call"
TOOL_RESULT = "id:tool_result"
#: A message that stands for items the provider holds (an OpenAI ``item_reference``): calls and
#: results may be there that the payload does not show.
TOOL_ELSEWHERE = "id:tool_elsewhere"
#: What every tool ref begins with (``Message.tool_refs`` keeps the refs that do).
TOOL_REFS = "id:tool_"
#: The refs provider modules write for a previous answer's reasoning sent back (Anthropic ``thinking``
#: and ``redacted_thinking`` blocks, Responses ``reasoning`` items, Converse ``reasoningContent``,
#: Ollama's and Mistral's ``thinking``): providers leave most of it out of the prompt
#: (``Message.reasoning``).
REASONING_REFS = frozenset({"id:thinking", "id:redacted_thinking", "id:reasoning"})


def tool_ref(kind: str, call_id: str | None, name: str | None = None) -> str:
    """``tool_ref(TOOL_CALL, "call_1")`` -> ``"id:tool_call=call_1"``; with ``name`` (and no id, or
    an id as well) ``"id:tool_call:get_weather"`` / ``"id:tool_call:get_weather=call_1"``."""
    ref = kind if name is None else f"{kind}:{name}"
    # Without a name the id is the key, even an empty one (a malformed call, answered by nothing).
    return f"{ref}={call_id or ''}" if call_id or name is None else ref


@dataclass
class RequestView:
    """A request, normalised but not yet measured."""

    provider: str
    operation: str
    model: str | None
    items: list[Item]
    max_output_tokens: int | None = None
    #: Output tokens left for the visible reply after a thinking budget (Anthropic), if any.
    reply_room: int | None = None
    #: Tool and output schemas, as texts to count (the provider's rendering where it is known).
    tools: list[str] = field(default_factory=list)
    #: Tokens the provider adds to the prompt for features this request uses (Anthropic's tool-use
    #: system prompt, say); published numbers, counted with the tools.
    prompt_overhead: int = 0
    #: Tokens the model's own tokenizer makes of a text, a token of the counter's (cl100k) each, where
    #: the provider documents its tokenizer reads text at a known ratio to it (Claude Opus 4.7 and
    #: later, Sonnet 5: ``anthropic.text_scale``): what the measurer shows text at until the model's
    #: reports calibrate it (docs/budget.md, "Claude's tokenizers"). 1.0 for the rest. None: the
    #: model's own, which the measurer sets (``providers.text_scale``) whatever adapter read the
    #: request; an adapter that knows its route reads text otherwise sets it, and that stands.
    text_scale: float | None = None
    #: How the provider's prompt format frames each message (role and turn markers), in tokens:
    #: its own where its module knows it, else OpenAI Chat's (``tokens.MESSAGE_OVERHEAD``).
    message_framing: int = 3
    #: The tokens its prompt format adds to prime the reply (``tokens.REPLY_PRIMING`` by default).
    reply_priming: int = 3
    stream: bool = False
    #: Why the history is not in the request (provider-managed state), if so.
    history_elsewhere: str | None = None
    #: Why the messages could not be read at all, if so.
    unreadable: str | None = None
    #: Text the model is sent but does not read, by item index: ``not_read[i]`` is the part of
    #: ``items[i]``'s text it skips (an earlier answer's thinking: Claude 3.7 to 4.5 and the Qwen3 and
    #: DeepSeek-R1 templates leave it out once a new user query follows). Counted, then taken off the
    #: payload's count; the item itself stays as sent, so its message (text, refs, digest) is the same
    #: whether the model reads it whole or not (docs/design.md, "Sent but not read").
    not_read: dict[int, str] = field(default_factory=dict)
    #: Where the API wants a tool call's results: ``"next"``, in the messages right after the call's
    #: (Chat Completions, Anthropic, Gemini); ``"later"``, anywhere after it (the Responses API pairs
    #: by call id whatever comes between). Read by ``tool_pairs_intact``.
    tool_results: str = "next"
    #: The context window the request itself sets, in tokens, when the API lets it (Ollama's
    #: ``options.num_ctx``): it, not the model table's, is what the server holds the prompt to.
    window: int | None = None
    #: Why the provider may read less of the request than it carries, at the request's own asking and
    #: saying so in its answer (Anthropic's and the Responses API's ``context_management``), if so:
    #: ``provider_kept_all`` does not judge such a request.
    server_edits: str | None = None
    #: Whether the provider may count the tool calls and results well below their text as read here
    #: (Gemini 2.5 and later on Vertex AI count only their keys and string values, as Gemini 2.0 does,
    #: and the request does not say which service it reaches: docs/budget.md, "Gemini"):
    #: ``provider_kept_all`` then leaves them out of what the server must have read.
    loose_tool_counts: bool = False
    #: ``(address, port)`` of the server the request's own arguments send it to, when they name one
    #: (a Mistral call's ``server_url``, the ``api_base`` of LiteLLM's route): it, not the client's
    #: (``Adapter.identity``), is the call's ``server.address`` / ``server.port``.
    server: tuple[str, int] | None = None
    #: What the request asks of the model beyond its messages, under provider-neutral names (the GenAI
    #: conventions' ``gen_ai.request.*`` suffixes: ``temperature``, ``top_p``, ``top_k``,
    #: ``stop_sequences``, ``seed``, ``choice.count``, ``frequency_penalty``, ``presence_penalty``,
    #: ``previous_response.id``; and ``output.type``): only what the request sets, each value already
    #: of the type the span takes (a float, an int, a str or a tuple of str).
    settings: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    text: str
    digest: str
    tokens: int  # raw count including the message framing
    source: str = "message"
    #: Bytes of memory it keeps (its text and refs, and the objects around them): what a cache or
    #: memo holding it counts against its byte budget.
    size: int = 0
    #: ``message_key(role, digest)``: what the conversation memory keeps of it (set by the measurer).
    key: bytes = b""
    #: Its tool refs (``TOOL_REFS``), set by the measurer; the shared empty tuple for a message
    #: without any, which is most of them: one pointer a message, no new object.
    tool_refs: tuple[str, ...] = ()
    #: Its text's UTF-8 bytes plus the framing and cost: at least ``tokens`` whatever counted them
    #: (``tokens.utf8_bytes``), set by the measurer.
    bound: int = 0
    #: The tokens of it that are not its text's (its framing, and what its images or files cost):
    #: counted as they are whatever counts the text, set by the measurer.
    fixed: int = 0
    #: Whether it carries a previous answer's reasoning, which providers leave out of the prompt: a
    #: part with one of ``REASONING_REFS``, or in an assistant message a ``</think>`` (the open reasoning
    #: models' way, which their chat templates cut from earlier turns: DeepSeek R1's, Qwen3's). Set by
    #: the measurer; ``provider_kept_all`` does not take its text as read.
    reasoning: bool = False


@dataclass(slots=True)
class Payload:
    """A measured request: the object every check reads (``Measurer.measure`` of a ``RequestView``).

    >>> from ctxguard.digest import Digester
    >>> from ctxguard.measure import Measurer
    >>> from ctxguard.tokens import Calibration, EstimateCounter
    >>> view = RequestView("openai", "chat.completions", "gpt-4o",
    ...                    [("system", "Be brief.", (), "message", 0), ("user", "Hi", (), "message", 0)])
    >>> payload = Measurer(Digester(b"key"), EstimateCounter(), Calibration()).measure(view)
    >>> payload.system.text, [m.role for m in payload.messages], payload.tokens > 0
    ('Be brief.', ['system', 'user'], True)
    """

    provider: str
    operation: str
    model: str | None
    messages: list[Message]
    digests: list[str]  # per message, in order (computed once, shared by the digest and the diff)
    digest: str
    raw_tokens: int  # uncalibrated count, kept for calibration against reported usage
    tokens: int  # count used for the budget (calibrated when a factor is known)
    tokens_source: str
    tools_tokens: int
    max_output_tokens: int | None
    stream: bool
    history_elsewhere: str | None
    unreadable: str | None
    reply_room: int | None = None
    #: The digest of the payload this one continues, if known: the previous call measured with the
    #: same memo, all of whose messages this one begins with (``measure``).
    extends: str | None = None
    #: The index of the first message with tool refs (``Message.tool_refs``), None if none has any
    #: (set by the measurer: ``tool_pairs_intact`` reads nothing else of a payload without tools).
    first_tool: int | None = None
    #: ``RequestView.window``.
    window: int | None = None
    #: ``(address, port)`` of the server the call is sent to, when known (``RequestView.server``, else
    #: set by the guard from the provider's ``identity``): ``server.address`` / ``server.port`` on the span.
    server: tuple[str, int | None] | None = None
    #: ``RequestView.tool_results``.
    tool_results: str = "next"
    #: ``RequestView.server_edits``.
    server_edits: str | None = None
    #: ``RequestView.loose_tool_counts``.
    loose_tool_counts: bool = False
    #: What counted ``raw_tokens`` (``TokenCounter.name``): ``"bound"`` while the measurer counts
    #: byte bounds, which prove most verdicts without the exact counts (docs/budget.md).
    basis: str = ""
    #: The view it was measured from, kept for a bound payload: measured again exactly when a
    #: verdict needs it (``Measurer.exact``).
    view: RequestView | None = None
    #: Its UTF-8 bytes, framing and costs: at least any exact count of it (``tokens.utf8_bytes``).
    bound: int = 0
    #: The most tokens it shows, counted exactly and calibrated (``measure.ceiling``): what a verdict
    #: the bounds prove holds below.
    ceiling: int = 0
    #: The tokens of it that are not text (framing, images and files, reply priming, the provider's
    #: prompt overhead): in ``raw_tokens`` and ``bound`` alike, since they are tokens already.
    fixed: int = 0
    #: What a bound payload shows a byte of its text (``measure.shown``); what a counted one shows a
    #: counted token of its text at before calibration (``RequestView.text_scale``), else 1.0.
    scale: float = 1.0
    #: ``RequestView.prompt_overhead``: the fixed part of ``tools_tokens``, shown as it is at any scale.
    prompt_overhead: int = 0
    #: ``"under-counted"`` / ``"over-counted"`` while its model's reports stay past what calibration
    #: corrects (``Calibration.outside``): its count, and the budget verdict on it, are not to be trusted.
    out_of_range: str | None = None
    #: ``RequestView.settings`` (the same dict, never changed after measuring).
    settings: dict[str, object] = field(default_factory=dict)
    #: The first message (set from ``messages``, which is never changed after construction).
    head: Message | None = field(init=False)
    #: The instruction at the head, if the head is one.
    system: Message | None = field(init=False)

    def __post_init__(self) -> None:
        head = self.head = self.messages[0] if self.messages else None
        self.system = head if head is not None and head.role in SYSTEM_ROLES else None


#: The most ctxguard holds of one answer, in bytes of memory: a streamed answer's text as it
#: accumulates, one event of a streamed body, a whole body read at its end. Past it the answer's text
#: is not kept (``AnswerText``, ``Answer.unread``); its id, usage and finish reasons still are.
ANSWER_LIMIT = 16 * 1024 * 1024
#: Why an answer past ``ANSWER_LIMIT`` is not judged (``Answer.unread``).
UNREAD = f"the answer passed the {ANSWER_LIMIT // (1024 * 1024)} MiB ctxguard keeps of one answer"
#: The finish reasons a streamed answer keeps: one a choice, and OpenAI's ``n`` asks for at most 128
#: choices; a stream that reports more is not believed further.
CHOICES_KEPT = 128


@dataclass
class Answer:
    """What came back, provider-neutral (for the span, calibration and answer checks)."""

    model: str | None = None
    id: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    #: Every input token, the cached ones included (the GenAI conventions' ``gen_ai.usage.input_tokens``:
    #: a provider that reports cached reads and writes apart, as Anthropic does, has them added).
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: Of ``input_tokens``: read from the provider's prompt cache, and written to it, where it says.
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    #: Of ``output_tokens``: spent on reasoning (thinking), where the provider says.
    reasoning_tokens: int | None = None
    text: str = ""
    #: The error the provider reported inside the answer (a stream's error event, a failed
    #: Responses response), as its low-cardinality type or code; the call ends in error.
    error: str | None = None
    #: Why ``text`` is not the answer's text (``UNREAD``: it passed ``ANSWER_LIMIT``), if so.
    unread: str | None = None


#: Pieces of a streamed text joined into one string this many at a time: a streamed piece is often a
#: token of a few characters, which alone in a list costs some 60 bytes more.
_JOINED = 256
#: A string's slot in a list.
_SLOT = 8


class AnswerText:
    """A streamed answer's text, piece by piece, held within ``ANSWER_LIMIT`` bytes of memory
    (counted as ``sys.getsizeof`` counts the strings, and their slots); past it, none is held.

    >>> text = AnswerText()
    >>> for piece in ("The parcel ", "is in ", "Pune."):
    ...     text.add(piece)
    >>> text.fill(Answer()).text
    'The parcel is in Pune.'
    """

    __slots__ = ("_held", "_joined", "_kept", "_pieces")

    def __init__(self) -> None:
        #: The text so far, joined a few hundred pieces at a time; None once it passed the limit.
        self._joined: list[str] | None = []
        self._pieces: list[str] = []  # the pieces since
        self._kept = 0  # bytes of the joined strings and their slots
        self._held = 0  # and of the pieces since

    def add(self, piece: str) -> None:
        joined = self._joined
        if joined is None or not piece:
            return
        pieces = self._pieces
        pieces.append(piece)
        self._held += sys.getsizeof(piece) + _SLOT
        if len(pieces) == _JOINED:
            joined.append("".join(pieces))
            pieces.clear()
            self._kept += sys.getsizeof(joined[-1]) + _SLOT
            self._held = self._kept
        if self._held > ANSWER_LIMIT:
            self._joined, self._pieces = None, []

    def fill(self, answer: Answer) -> Answer:
        """``answer`` with the text, or past ``ANSWER_LIMIT`` none and ``unread`` saying why."""
        if self._joined is None:
            answer.text, answer.unread = "", UNREAD
        else:
            answer.text = "".join([*self._joined, *self._pieces])
        return answer
