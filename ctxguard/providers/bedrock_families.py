"""The prompt template of the model behind a Bedrock model id, in tokens.

Bedrock serves many vendors' models behind one API. Converse takes the same request for all of
them and renders it into each model's own prompt format; ``invoke_model`` takes the model's own
body. What a request costs in input tokens is its texts plus what that format adds: the role
markers around each message, a begin-of-text token and the reply's header once a request, a
default system block some templates always write, the prompt a template adds when tools are
given. ``family(model_id)`` says which format a model id has (``us.meta.llama3-2-1b-instruct-v1:0``
is Llama 3.1's), and ``Family`` holds its numbers; ``bedrock.py`` puts them on the
``RequestView`` (``message_framing``, ``reply_priming``, ``prompt_overhead``, the per-message
``cost`` of tool calls and results).

Where a model card publishes its chat template (Hugging Face ``tokenizer_config.json``
``chat_template``: Llama, Mistral, Qwen, Gemma, DeepSeek, MiniMax, gpt-oss's harmony format), the numbers
are that template's tokens; the fixed texts it adds are kept here as text (``*_TEXT``) and their
``cl100k_base`` counts next to them (tests/providers/test_bedrock_families.py recounts them).
Amazon's own models (Nova, Titan) publish no template: their numbers are measured on the
recorded corpus (tests/data/recorded/), fitted on one half of it and checked on the other
(docs/budget.md, "Bedrock"). A model id of no family here is counted with OpenAI Chat's framing,
as before; an ARN that names no model (an application inference profile's) with none.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..tokens import digit_surplus
from ._image import Size
from ._read import canonical, jsonable
from .anthropic import TOOL_BLOCK_MARKUP
from .mistral import image_tokens as pixtral_tokens
from .mistral import tokenizer_surplus as mistral_surplus

__all__ = ["ANTHROPIC", "FAMILIES", "OTHER", "UNNAMED", "Family", "family", "nova_image_tokens"]


def spec_json(spec: Mapping[str, Any]) -> str:
    """A Converse ``toolSpec`` as its canonical JSON: the stand-in where a template's own rendering
    of a tool is not known."""
    return canonical(spec)


def _function(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A Converse ``toolSpec`` as the OpenAI-style function the Hugging Face chat templates take:
    ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
    function: dict[str, Any] = {"name": spec.get("name")}
    if spec.get("description"):
        function["description"] = spec["description"]
    schema = spec.get("inputSchema")
    function["parameters"] = schema.get("json") if isinstance(schema, Mapping) else None
    return {"type": "function", "function": function}


def llama_tool(spec: Mapping[str, Any]) -> str:
    """Llama 3.1+ and 4 write each tool as ``tool | tojson(indent=4)`` followed by a blank line."""
    return json.dumps(_function(spec), indent=4, default=jsonable, ensure_ascii=False) + "\n\n"


def qwen_tool(spec: Mapping[str, Any]) -> str:
    """Qwen3 writes each tool as ``tool | tojson`` on its own line inside ``<tools>``."""
    return "\n" + json.dumps(_function(spec), default=jsonable, ensure_ascii=False)


def minimax_tool(spec: Mapping[str, Any]) -> str:
    """MiniMax M2 writes each tool as ``<tool>{{ tool.function | tojson }}</tool>`` on its own line."""
    return "<tool>" + json.dumps(_function(spec)["function"], default=jsonable, ensure_ascii=False) + "</tool>\n"


def mistral_tool(spec: Mapping[str, Any]) -> str:
    """Mistral writes its tools as one JSON list between ``[AVAILABLE_TOOLS]`` markers."""
    return json.dumps(_function(spec), default=jsonable, ensure_ascii=False)


# -- Amazon Nova's images ("Image understanding", Nova User Guide) ----------------------------------

#: Nova rescales an image to the closest of its aspect ratios, then charges by the size it reaches.
#: The guide's table (resolution -> approximate tokens): 900x450 ~800, 900x900 ~1300, 1400x900
#: ~1800, 1800x900 ~2400, 1300x1300 ~2600. By aspect ratio (longer side / shorter side), the
#: entries for that ratio, smallest first, each with the longer side it is reached from.
_NOVA_IMAGES: tuple[tuple[float, tuple[tuple[int, int], ...]], ...] = (
    (1.0, ((900, 1300), (1300, 2600))),
    (1.5, ((1400, 1800),)),
    (2.0, ((900, 800), (1800, 2400))),
)
#: The most the table charges: an image whose size is not known.
NOVA_IMAGE_BOUND = 2600
#: Nova 2 (its user guide, "Multimodal understanding", Image-token estimation): "usage is billed at
#: a flat rate of 230 tokens per image", whatever its size.
NOVA2_IMAGE = 230


def nova_image_tokens(size: Size | None) -> int:
    """``nova_image_tokens((3008, 2000))`` -> 1800: the table's entry for the image's closest aspect
    ratio (and, where the table has two, the larger one once the image's longer side passes the
    smaller's); an image of unknown size, or longer than 2:1, the table's largest."""
    if size is None or min(size) <= 0:
        return NOVA_IMAGE_BOUND
    longer, shorter = max(size), min(size)
    ratio = longer / shorter
    if ratio > 2.5:
        return NOVA_IMAGE_BOUND
    entries = min(_NOVA_IMAGES, key=lambda entry: abs(math.log(entry[0] / ratio)))[1]
    return next((tokens for side, tokens in entries if longer <= side), entries[-1][1])


@dataclass(frozen=True)
class Family:
    """How one model family's prompt format frames a request, in tokens.

    >>> family("us.meta.llama3-2-1b-instruct-v1:0").name, family("amazon.nova-micro-v1:0").message
    ('llama3', 0)
    """

    name: str
    #: Around each message (its role header, its end of turn): ``RequestView.message_framing``.
    message: int = 3
    #: Once a request: begin-of-text, the reply's header, a default system block the template
    #: always writes (``RequestView.reply_priming``).
    request: int = 3
    #: More when the request has no system message (a template that writes its system header anyway).
    no_system: int = 0
    #: More per assistant message (a turn marker beyond the message's own framing).
    assistant: int = 0
    #: Per tool call and per tool result, beyond their texts (their markers).
    tool_call: int = 0
    tool_result: int = 0
    #: The prompt the template adds once when the request has tools (``RequestView.prompt_overhead``).
    tool_prompt: int = 0
    #: How the template writes a tool into the prompt (a Converse ``toolSpec`` in, a text out).
    tool_text: Callable[[Mapping[str, Any]], str] = spec_json
    #: The ``invoke_model`` body it takes, by the key holding its text, where the format is documented
    #: and read: ``messages`` (Nova's, Converse's shape), ``prompt`` or ``inputText`` (a prompt
    #: string), ``message`` (Cohere Command R's chat); none: not read.
    invoke: frozenset[str] = frozenset()
    #: Once a request, for a prompt string body (what the tokenizer adds to it: a begin-of-text token).
    prompt_request: int = 0
    #: What an image costs this family (None: Claude's formula, the stand-in used so far).
    image: Callable[[Size | None], int] | None = None
    #: The template drops an answer's thinking (its text up to the last ``</think>``) from the
    #: assistant turns before the last user message (Qwen3's ``last_query_index``; DeepSeek-R1's
    #: from every answer).
    drops_earlier_thinking: bool = False
    #: What the family's tokenizer reads of a text beyond cl100k (a cost of the message): each digit a
    #: token (``tokens.digit_surplus``: Nova's, Titan's), Mistral's all-caps words and digits
    #: (``mistral.tokenizer_surplus``); None where no published tokenizer says otherwise.
    tokenizer_surplus: Callable[[str], int] | None = None

    def surplus(self, text: str) -> int:
        """What the family's tokenizer reads of ``text`` beyond cl100k."""
        return self.tokenizer_surplus(text) if self.tokenizer_surplus is not None else 0


# -- Published chat templates (Hugging Face tokenizer_config.json ``chat_template``) -----------------

#: Llama 3.1, 3.2, 3.3: the system block is always written, with this text before the system prompt.
LLAMA_DATE_TEXT = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
LLAMA_DATE = 20
#: With tools: this line in Llama 3.1+'s system block (Llama 4's has one only when the app sends a
#: system prompt) ...
LLAMA_IPYTHON_TEXT = "Environment: ipython\n"
LLAMA_IPYTHON = 5
#: ... and this guidance before the tools, in the first user message (``tools_in_user_message``).
LLAMA_TOOLS_TEXT = (
    "Given the following functions, please respond with a JSON for a function call with its proper "
    "arguments that best answers the given prompt.\n\n"
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.'
    "Do not use variables.\n\n"
)
LLAMA_TOOLS = 51
#: Bedrock's Llama 4 reports more for a request with tools than Meta's template renders for it (the
#: same on both recorded requests, so not the tools' size): measured, fitted on the corpus's fit half.
LLAMA4_TOOLS_EXTRA = 20
#: A tool call is written ``{"name": "<name>", "parameters": <arguments>}``; read here as
#: ``<name> <arguments>``, the difference is 8 tokens.
LLAMA_CALL = 8
#: Qwen3: with tools, a system turn (its own when the request has no system prompt) holding this
#: text around them (``<tool_call>`` and ``</tool_call>`` are one token each).
QWEN_TOOLS_TEXT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>\n</tools>\n\nFor each function call, return "
    "a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
QWEN_TOOLS = 77
#: gpt-oss (harmony): its system message, written whatever the request (the date varies, not its
#: length); the app's system prompt goes into a developer message.
HARMONY_SYSTEM_TEXT = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: 2025-08-05\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.<|end|>"
)
HARMONY_SYSTEM = 62

#: MiniMax M2: the system turn is always written, with this identity when the request has no system
#: prompt (MiniMax-M2's ``chat_template.jinja``, ``model_identity``); M2.1 and later name themselves
#: in it ("... Your name is MiniMax-M2.7 and is built by MiniMax.", their templates).
MINIMAX_IDENTITY_TEXT = "You are a helpful assistant."
MINIMAX_IDENTITY = 6
MINIMAX_NAMED_IDENTITY_TEXT = "You are a helpful assistant. Your name is MiniMax-M2.1 and is built by MiniMax."
MINIMAX_NAMED_IDENTITY = 22
#: With tools, its system turn holds this text around them (``<minimax:tool_call>`` and
#: ``</minimax:tool_call>`` one token each), each tool ``minimax_tool``.
MINIMAX_TOOLS_TEXT = (
    "\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the tools available in "
    "JSONSchema format:\n\n<tools>\n</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass "
    'parameters:\n\n<minimax:tool_call>\n<invoke name="tool-name-1">\n<parameter name="param-key-1">param-value-1'
    '</parameter>\n<parameter name="param-key-2">param-value-2</parameter>\n...\n</invoke>\n</minimax:tool_call>'
)
MINIMAX_TOOLS = 97

#: The families whose ``invoke_model`` body is a prompt string.
_PROMPT = frozenset({"prompt"})

FAMILIES: dict[str, Family] = {
    # <|begin_of_text|>, <|start_header_id|>role<|end_header_id|>\n\n ... <|eot_id|>, the reply's header.
    "llama3": Family("llama3", message=5, request=1 + LLAMA_DATE + 4, no_system=5, tool_call=LLAMA_CALL,
                     tool_result=5, tool_prompt=LLAMA_IPYTHON + LLAMA_TOOLS, tool_text=llama_tool, invoke=_PROMPT),
    # Llama 3 (3.0): no system block of its own, no tools.
    "llama3.0": Family("llama3.0", message=5, request=5, invoke=_PROMPT),
    # Llama 4: <|header_start|>role<|header_end|>\n\n ... <|eot|>; no date block; a tool call is
    # also wrapped in <|python_start|><|python_end|>.
    "llama4": Family("llama4", message=5, request=5, tool_call=LLAMA_CALL + 2, tool_result=5,
                     tool_prompt=LLAMA_TOOLS + LLAMA4_TOOLS_EXTRA, tool_text=llama_tool, invoke=_PROMPT),
    # Llama 2: <s>[INST] <<SYS>> ... <</SYS>> ... [/INST]: an invoke_model prompt on Bedrock.
    "llama2": Family("llama2", message=4, request=1, invoke=_PROMPT, prompt_request=1),
    # Mistral: <s>[INST] ... [/INST], an answer then </s>; tools between [AVAILABLE_TOOLS] markers,
    # a call [TOOL_CALLS]name[ARGS]{...}, a result between [TOOL_RESULTS] markers; Pixtral's images.
    "mistral": Family("mistral", message=2, request=1, tool_call=2, tool_result=2, tool_prompt=2,
                      tool_text=mistral_tool, invoke=_PROMPT, prompt_request=1, image=pixtral_tokens,
                      tokenizer_surplus=mistral_surplus),
    # Qwen3: <|im_start|>role\n ... <|im_end|>\n; the reply <|im_start|>assistant\n, and with thinking
    # off (Bedrock's default) an empty <think>\n\n</think>\n\n. Tools in a system turn (counted as its
    # own); a call <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>, a result between
    # <tool_response> markers. An earlier answer's thinking is dropped.
    "qwen": Family("qwen", message=5, request=3 + 4, tool_call=11, tool_result=5, tool_prompt=QWEN_TOOLS + 5,
                   tool_text=qwen_tool, drops_earlier_thinking=True),
    # DeepSeek-R1: a begin-of-sentence token, the system prompt, then each turn after a User or
    # Assistant token (an answer closed by end-of-sentence); the reply: Assistant, <think>, \n. An
    # answer is written from its last </think> on: what comes before, thinking or not, is dropped.
    "deepseek": Family("deepseek", message=1, request=4, drops_earlier_thinking=True),
    # Gemma 3: <bos><start_of_turn>role\n ... <end_of_turn>\n, the reply <start_of_turn>model\n.
    "gemma": Family("gemma", message=5, request=4),
    # gpt-oss: <|start|>role<|message|> ... <|end|> (an answer also names its channel), its system
    # message, the reply <|start|>assistant.
    "gpt-oss": Family("gpt-oss", message=4, request=HARMONY_SYSTEM + 2, assistant=2),
    # Kimi K2: <|im_user|>user<|im_middle|> ... <|im_end|>, the reply <|im_assistant|>assistant<|im_middle|>.
    "kimi": Family("kimi", message=4, request=3, tool_call=8, tool_result=8),
    # Nemotron Nano 2 (Nemotron-H): <SPECIAL_10>System\n ... \n, <SPECIAL_11>User\n ... \n; the reply
    # <SPECIAL_11>Assistant\n<think>\n (or <think></think>: thinking off), after the begin-of-text token; an
    # answer <SPECIAL_11>Assistant\n ... \n<SPECIAL_12>\n.
    # The system turn is written whether or not the request has a system prompt (its header and
    # newline: 3). Its template, as llama.cpp's chat renderer and NVIDIA's Megatron SFT tokenizer write
    # it (<SPECIAL_1x>, <think> and </think> one token each).
    "nemotron": Family("nemotron", message=4, request=6, no_system=3, assistant=2),
    # MiniMax M2: ]~!b[ (begin-of-text), then ]~b]role\n ... [e~[\n around each turn (]~b] and [e~[ one
    # token each), the system turn always (its identity without a system prompt: its framing and text);
    # the reply ]~b]ai\n<think>\n. An outputConfig schema is decoded to, not written (the recorded
    # request reports its text and this framing exactly). A call <minimax:tool_call>\n<invoke name="...">
    # with a <parameter name="..."> per argument (16 beyond its name and JSON with one argument); a
    # result ]~b]tool\n<response>...\n</response> in place of a user turn. An answer's thinking before the
    # last user message is not written.
    "minimax": Family("minimax", message=5, request=1 + 5, no_system=5 + MINIMAX_IDENTITY, tool_call=16,
                      tool_result=7, tool_prompt=MINIMAX_TOOLS, tool_text=minimax_tool, drops_earlier_thinking=True),
    "minimax-m2.x": Family("minimax-m2.x", message=5, request=1 + 5, no_system=5 + MINIMAX_NAMED_IDENTITY,
                           tool_call=16, tool_result=7, tool_prompt=MINIMAX_TOOLS, tool_text=minimax_tool,
                           drops_earlier_thinking=True),
}


# -- Measured: Amazon's models publish no template (docs/budget.md, "Bedrock") ---------------------

#: Nova reports the messages' text and nothing around a single turn (a user message, a system
#: prompt: the count is their text's); each assistant turn adds NOVA_TURN, each tool call and
#: result NOVA_TOOL_BLOCK; tools add NOVA_TOOL_PROMPT (Nova 2: NOVA2_TOOL_PROMPT, fitted on a request
#: that also had Nova 2's code interpreter) beyond their specs. Fitted on the corpus's fit half by
#: bench/bedrock_fit.py, which names the records each rests on.
NOVA_TURN = 5
NOVA_TOOL_BLOCK = 13
NOVA_TOOL_PROMPT = 340
NOVA2_TOOL_PROMPT = 927
#: Titan Text: Converse writes the conversation as ``User: ...\nBot:``, 3 tokens beyond the text
#: however many user messages (fitted likewise); its own ``inputText`` body is counted as its text.
TITAN_REQUEST = 3

FAMILIES.update({
    "nova": Family("nova", message=0, request=0, assistant=NOVA_TURN, tool_call=NOVA_TOOL_BLOCK,
                   tool_result=NOVA_TOOL_BLOCK, tool_prompt=NOVA_TOOL_PROMPT, invoke=frozenset({"messages"}),
                   image=nova_image_tokens, tokenizer_surplus=digit_surplus),
    "nova2": Family("nova2", message=0, request=0, assistant=NOVA_TURN, tool_call=NOVA_TOOL_BLOCK,
                    tool_result=NOVA_TOOL_BLOCK, tool_prompt=NOVA2_TOOL_PROMPT, invoke=frozenset({"messages"}),
                    image=lambda size: NOVA2_IMAGE),
    "titan": Family("titan", message=0, request=TITAN_REQUEST, invoke=frozenset({"inputText"}),
                    tokenizer_surplus=digit_surplus),
    # Cohere on Bedrock: the count Bedrock reports is the message's text (the preamble Cohere adds
    # is not in it: docs/budget.md).
    "cohere": Family("cohere", message=0, request=0, invoke=frozenset({"prompt", "message"})),
})

#: Claude: Anthropic's own accounting (``anthropic.py``), framing as OpenAI Chat's.
ANTHROPIC = Family("anthropic", tool_call=TOOL_BLOCK_MARKUP, tool_result=TOOL_BLOCK_MARKUP)
#: A model of no family here: OpenAI Chat's framing, as every provider had before its own.
OTHER = Family("other")
#: A model id that names no model: an application inference profile's ARN, provisioned throughput's,
#: an imported model's. Which model answers is set where the resource was made (only the control
#: plane says), so its framing is the least any family adds (Nova's, none): calibration learns the
#: text's ratio once the fixed tokens are taken off each report, and fixed tokens above the model's
#: own make that ratio too low, so a long prompt's calibrated count falls below what the model reads
#: (OpenAI Chat's 6 on a Nova profile's 8-token prompts: a 1,001-token prompt shown as 256); fixed
#: tokens below the model's err the other way, over (docs/budget.md, "Bedrock").
UNNAMED = Family("unnamed", message=0, request=0)
#: The ARN resources that name no model.
_UNNAMED = re.compile(r":(?:application-inference-profile|provisioned-model|imported-model)/")

#: A Bedrock model id: an ARN's resource, a cross-region profile's geography, the vendor, the model.
_ID = re.compile(r"^(?:(?:us|eu|apac|global|us-gov|jp|au|ca)\.)?([a-z0-9-]+)\.(.+)$")
#: (vendor, what the model name begins with) -> family, the longest match first.
_BY_NAME: tuple[tuple[str, str, str], ...] = (
    ("meta", "llama3-1", "llama3"), ("meta", "llama3-2", "llama3"), ("meta", "llama3-3", "llama3"),
    ("meta", "llama3", "llama3.0"), ("meta", "llama4", "llama4"), ("meta", "llama2", "llama2"),
    ("amazon", "nova-2", "nova2"), ("amazon", "nova", "nova"), ("amazon", "titan-text", "titan"),
    ("mistral", "", "mistral"), ("cohere", "command", "cohere"), ("qwen", "qwen3", "qwen"),
    ("deepseek", "r1", "deepseek"), ("google", "gemma", "gemma"), ("openai", "gpt-oss", "gpt-oss"),
    ("moonshot", "kimi", "kimi"), ("moonshotai", "kimi", "kimi"), ("nvidia", "nemotron-nano", "nemotron"),
    ("minimax", "minimax-m2.", "minimax-m2.x"), ("minimax", "minimax-m2", "minimax"),
)


@functools.lru_cache(maxsize=256)
def family(model: str | None) -> Family:
    """The prompt format of the model behind a Bedrock model id (an ARN, a cross-region profile, a
    foundation model id), ``ANTHROPIC`` for Claude, ``UNNAMED`` for an ARN that names no model (an
    application inference profile's), ``OTHER`` for a model of no family here."""
    if _UNNAMED.search((model or "").lower()):
        return UNNAMED
    name = (model or "").lower().rsplit("/", 1)[-1]
    match = _ID.match(name)
    if match is None:
        return ANTHROPIC if "claude" in name else OTHER
    vendor, rest = match.groups()
    if vendor == "anthropic":
        return ANTHROPIC
    for known, prefix, key in _BY_NAME:
        if vendor == known and rest.startswith(prefix):
            return FAMILIES[key]
    return OTHER
