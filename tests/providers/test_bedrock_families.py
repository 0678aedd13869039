"""Bedrock's model families: the prompt format of the model behind a model id, counted as its chat
template renders a request (``ctxguard.providers.bedrock_families``)."""

from __future__ import annotations

import json
import re

import pytest

from ctxguard.digest import Digester
from ctxguard.measure import Measurer
from ctxguard.providers import bedrock_families as families
from ctxguard.providers.bedrock import ADAPTER
from ctxguard.tokens import Calibration, default_counter

pytestmark = pytest.mark.skipif(default_counter().name != "tiktoken", reason="counts in cl100k_base")

#: A chat template's special tokens (one token each in the model's own vocabulary).
_SPECIAL = re.compile(r"<\|[a-z_]+\|>|\[/?INST\]|\[/?AVAILABLE_TOOLS\]|<s>|</s>|<bos>|<start_of_turn>|<end_of_turn>"
                      r"|</?think>|</?tool_call>|</?tool_response>|<SPECIAL_\d+>"
                      r"|\]~!b\[|\]~b\]|\[e~\[|</?minimax:tool_call>")


def rendered(text: str) -> int:
    """A rendered prompt's tokens: its special tokens one each, the text between them in cl100k."""
    counter = default_counter()
    pieces = _SPECIAL.split(text)
    return sum(counter.count(piece) for piece in pieces if piece) + len(_SPECIAL.findall(text))


def counted(model: str, **request) -> int:
    view = ADAPTER.normalise("converse", {"modelId": model, **request})
    assert view.unreadable is None
    return Measurer(Digester(b"k"), default_counter(), Calibration()).measure(view).raw_tokens


def user(text: str) -> dict:
    return {"role": "user", "content": [{"text": text}]}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"text": text}]}


TOOL = {"toolSpec": {"name": "get_weather", "description": "Get the weather for a city.",
                     "inputSchema": {"json": {"type": "object", "properties": {"city": {"type": "string"}},
                                              "required": ["city"]}}}}
FUNCTION = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a city.",
                                             "parameters": TOOL["toolSpec"]["inputSchema"]["json"]}}


@pytest.mark.parametrize("name", ["LLAMA_DATE", "LLAMA_IPYTHON", "LLAMA_TOOLS", "QWEN_TOOLS", "HARMONY_SYSTEM",
                                  "MINIMAX_IDENTITY", "MINIMAX_NAMED_IDENTITY", "MINIMAX_TOOLS"])
def test_each_template_text_costs_the_tokens_written_beside_it(name):
    assert rendered(getattr(families, f"{name}_TEXT")) == getattr(families, name)


@pytest.mark.parametrize(("model", "expected"), [
    ("meta.llama3-2-1b-instruct-v1:0", "llama3"),
    ("us.meta.llama3-3-70b-instruct-v1:0", "llama3"),
    ("meta.llama3-70b-instruct-v1:0", "llama3.0"),
    ("us.meta.llama4-maverick-17b-instruct-v1:0", "llama4"),
    ("meta.llama2-13b-chat-v1", "llama2"),
    ("amazon.nova-micro-v1:0", "nova"),
    ("us.amazon.nova-2-lite-v1:0", "nova2"),
    ("arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.amazon.nova-pro-v1:0", "nova"),
    ("amazon.titan-text-express-v1", "titan"),
    ("mistral.mistral-7b-instruct-v0:2", "mistral"),
    ("us.mistral.pixtral-large-2502-v1:0", "mistral"),
    ("cohere.command-r-v1:0", "cohere"),
    ("qwen.qwen3-32b-v1:0", "qwen"),
    ("us.deepseek.r1-v1:0", "deepseek"),
    ("google.gemma-3-27b-it", "gemma"),
    ("openai.gpt-oss-120b-1:0", "gpt-oss"),
    ("moonshot.kimi-k2-thinking", "kimi"),
    ("nvidia.nemotron-nano-12b-v2", "nemotron"),
    ("minimax.minimax-m2", "minimax"),
    ("minimax.minimax-m2.1", "minimax-m2.x"),
    ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "anthropic"),
    ("arn:aws:bedrock:us-east-1:123456789012:foundation-model/anthropic.claude-3-haiku-20240307-v1:0", "anthropic"),
    # An application inference profile, provisioned throughput, an imported model: the ARN names no model.
    ("arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/mi1dadi0g15f", "unnamed"),
    ("arn:aws:bedrock:us-east-1:123456789012:provisioned-model/abcdefghijkl", "unnamed"),
    ("arn:aws:bedrock:us-east-1:123456789012:imported-model/abcdefghijkl", "unnamed"),
    # Other vendors have no template here.
    ("writer.palmyra-x4-v1:0", "other"),
    ("ai21.jamba-1-5-large-v1:0", "other"),
    (None, "other"),
])
def test_the_family_is_the_model_behind_the_id(model, expected):
    assert families.family(model).name == expected


def test_llama_3_counts_its_template_with_the_system_block_it_always_writes():
    header = "<|start_header_id|>{}<|end_header_id|>\n\n"
    date = families.LLAMA_DATE_TEXT
    with_system = ("<|begin_of_text|>" + header.format("system") + date + "Be brief.<|eot_id|>"
                   + header.format("user") + "Tell me a joke<|eot_id|>" + header.format("assistant"))
    assert counted("meta.llama3-2-1b-instruct-v1:0", system=[{"text": "Be brief."}],
                   messages=[user("Tell me a joke")]) == rendered(with_system)
    without = ("<|begin_of_text|>" + header.format("system") + date + "<|eot_id|>"
               + header.format("user") + "Tell me a joke<|eot_id|>" + header.format("assistant"))
    assert counted("meta.llama3-2-1b-instruct-v1:0", messages=[user("Tell me a joke")]) == rendered(without)


def test_llama_4_writes_its_tools_into_the_first_user_message():
    """Meta's template, and what Bedrock's Llama 4 reports for tools beyond it (measured)."""
    prompt = ("<|begin_of_text|><|header_start|>user<|header_end|>\n\n" + families.LLAMA_TOOLS_TEXT
              + json.dumps(FUNCTION, indent=4) + "\n\n" + "What is the weather in Paris?<|eot|>"
              + "<|header_start|>assistant<|header_end|>\n\n")
    assert counted("us.meta.llama4-maverick-17b-instruct-v1:0", messages=[user("What is the weather in Paris?")],
                   toolConfig={"tools": [TOOL]}) == rendered(prompt) + families.LLAMA4_TOOLS_EXTRA


@pytest.mark.parametrize(("model", "prompt"), [
    ("qwen.qwen3-32b-v1:0", "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
                            "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
    ("google.gemma-3-27b-it", "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello"
                              "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"),
    ("openai.gpt-oss-120b-1:0", families.HARMONY_SYSTEM_TEXT + "<|start|>user<|message|>Hi there<|end|>"
                                "<|start|>assistant<|channel|>final<|message|>Hello<|end|>"
                                "<|start|>user<|message|>Bye<|end|><|start|>assistant"),
    # The system turn is written without a system prompt too.
    ("nvidia.nemotron-nano-12b-v2", "<s><SPECIAL_10>System\n\n<SPECIAL_11>User\nHi there\n<SPECIAL_11>Assistant\n"
                                    "Hello\n<SPECIAL_12>\n<SPECIAL_11>User\nBye\n<SPECIAL_11>Assistant\n<think>\n"),
    # The system turn is written without a system prompt too, with the template's identity.
    ("minimax.minimax-m2", "]~!b[]~b]system\n" + families.MINIMAX_IDENTITY_TEXT + "[e~[\n]~b]user\nHi there[e~[\n"
                           "]~b]ai\nHello[e~[\n]~b]user\nBye[e~[\n]~b]ai\n<think>\n"),
    ("minimax.minimax-m2.1", "]~!b[]~b]system\n" + families.MINIMAX_NAMED_IDENTITY_TEXT + "[e~[\n]~b]user\n"
                             "Hi there[e~[\n]~b]ai\nHello[e~[\n]~b]user\nBye[e~[\n]~b]ai\n<think>\n"),
])
def test_a_conversation_costs_what_its_chat_template_renders(model, prompt):
    assert counted(model, messages=[user("Hi there"), assistant("Hello"), user("Bye")]) == rendered(prompt)


def test_minimax_writes_its_system_turn_and_tools_as_its_template_does():
    """MiniMax M2's template: the app's system prompt in place of its identity; the tools in the system
    turn, each ``<tool>{function}</tool>``, inside its tools text."""
    tools = families.MINIMAX_TOOLS_TEXT.replace("<tools>\n", "<tools>\n<tool>" + json.dumps(FUNCTION["function"])
                                                + "</tool>\n")
    prompt = ("]~!b[]~b]system\nBe brief." + tools + "[e~[\n]~b]user\nWeather in Paris?[e~[\n]~b]ai\n<think>\n")
    assert abs(counted("minimax.minimax-m2", system=[{"text": "Be brief."}], toolConfig={"tools": [TOOL]},
                       messages=[user("Weather in Paris?")]) - rendered(prompt)) <= 1  # texts may merge where they join


def test_minimax_writes_its_tool_calls_and_results_as_its_template_does():
    call = {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Paris"}}}
    result = {"toolResult": {"toolUseId": "t1", "content": [{"text": "30C"}]}}
    tools = families.MINIMAX_TOOLS_TEXT.replace("<tools>\n", "<tools>\n<tool>" + json.dumps(FUNCTION["function"])
                                                + "</tool>\n")
    head = "]~!b[]~b]system\n" + families.MINIMAX_IDENTITY_TEXT + tools + "[e~[\n]~b]user\nWeather in Paris?[e~[\n"
    exchange = (']~b]ai\n<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                "</invoke>\n</minimax:tool_call>[e~[\n]~b]tool\n<response>30C\n</response>[e~[\n")
    asked = [user("Weather in Paris?")]
    answered = [*asked, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    model, config = "minimax.minimax-m2", {"tools": [TOOL]}
    costs = counted(model, toolConfig=config, messages=answered) - counted(model, toolConfig=config, messages=asked)
    written = rendered(head + exchange + "]~b]ai\n<think>\n") - rendered(head + "]~b]ai\n<think>\n")
    assert abs(costs - written) <= 1  # where the texts join, a token may merge


def test_qwen_writes_its_tools_calls_and_results_as_its_template_does():
    call = {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Paris"}}}
    result = {"toolResult": {"toolUseId": "t1", "content": [{"text": "30C"}]}}
    tools = families.QWEN_TOOLS_TEXT.replace("<tools>\n", "<tools>\n" + json.dumps(FUNCTION) + "\n")
    prompt = ("<|im_start|>system\n" + tools + "<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n"
              '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
              "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n30C\n</tool_response><|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert abs(counted("qwen.qwen3-32b-v1:0", toolConfig={"tools": [TOOL]}, messages=[
        user("Weather in Paris?"), {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}],
    ) - rendered(prompt)) <= 1  # where the texts join, a token may merge


THOUGHT = "<think>\nThe user wants one word. Just say ok, nothing more, and stop there.\n</think>\n\n"


def test_qwen_and_deepseek_drop_an_earlier_answers_thinking_as_their_templates_do():
    """Qwen3's template writes an answer before the last user query from its last </think> on
    (DeepSeek-R1's every answer): the thinking an app sends back is not read, so not counted."""
    messages = [user("Reply with ok"), assistant(THOUGHT + "ok"), user("Again")]
    prompt = ("<|im_start|>user\nReply with ok<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
              "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert counted("qwen.qwen3-32b-v1:0", messages=messages) == rendered(prompt)
    plain = [user("Reply with ok"), assistant("ok"), user("Again")]
    assert counted("us.deepseek.r1-v1:0", messages=messages) == counted("us.deepseek.r1-v1:0", messages=plain)
    assert counted("minimax.minimax-m2", messages=messages) == counted("minimax.minimax-m2", messages=plain)


def test_qwen_keeps_the_thinking_of_an_agent_loop_since_the_last_query():
    """A tool result is not a query (Qwen3's ``last_query_index``): the answer that called the tool,
    after the last user query, is written with its thinking."""
    call = {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Paris"}}}
    result = {"toolResult": {"toolUseId": "t1", "content": [{"text": "30C"}]}}
    looping = [user("Weather in Paris?"), {"role": "assistant", "content": [{"text": THOUGHT}, call]},
               {"role": "user", "content": [result]}]
    bare = [user("Weather in Paris?"), {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}]
    model, tools = "qwen.qwen3-32b-v1:0", {"tools": [TOOL]}
    assert counted(model, toolConfig=tools, messages=looping) - counted(model, toolConfig=tools, messages=bare) >= 15


#: A ten-digit number: 4 tokens to cl100k (555 123 456 7), 10 to Nova's and Titan's tokenizers.
PHONE = "Call me back at 5551234567, please."


@pytest.mark.parametrize("model", ["amazon.nova-lite-v1:0", "amazon.titan-text-express-v1"])
def test_nova_and_titan_count_each_digit_as_a_token(model):
    """Nova and Titan read a digit a token (two recorded guardrail requests with a ten-digit number:
    Titan 28 reported, 21 counted before; Nova 54, 42), on Converse and in an ``invoke_model`` prompt."""
    without = PHONE.replace("5551234567", "five")
    assert counted(model, messages=[user(PHONE)]) - counted(model, messages=[user(without)]) == (
        default_counter().count(PHONE) - default_counter().count(without) + 6)
    assert counted("us.meta.llama3-2-1b-instruct-v1:0", messages=[user(PHONE)]) - counted(
        "us.meta.llama3-2-1b-instruct-v1:0", messages=[user(without)]) == (
        default_counter().count(PHONE) - default_counter().count(without))  # Llama's tokenizer is cl100k's kind


def test_titans_prompt_body_counts_each_digit_as_a_token():
    _, tokens = invoked("amazon.titan-text-express-v1", {"inputText": PHONE})
    assert tokens == default_counter().count(PHONE) + 6


#: 26 capitals in runs: round(26 x 0.12) = 3 tokens more to Mistral's tokenizers than to cl100k.
SHOUT = "ONLY SINGLE NUMBER IN RESPONSE"


def test_mistral_reads_all_caps_words_finer_than_cl100k():
    """Mistral's tokenizers split all-caps words that cl100k keeps whole (``mistral.CAPITALS_PER_LETTER``,
    measured on general text: docs/budget.md, "All-caps text"), on Converse and in an ``invoke_model``
    prompt; the same words in lower case are what cl100k counts. Nova and Claude get no such rate (no
    tokenizer of theirs published that reads like them), Llama's is cl100k's kind."""
    count = default_counter().count
    plain = count(SHOUT) - count(SHOUT.lower())
    model = "mistral.mistral-large-2407-v1:0"
    assert counted(model, messages=[user(SHOUT)]) - counted(model, messages=[user(SHOUT.lower())]) == plain + 3
    assert counted(model, system=[{"text": SHOUT}], messages=[user("hi")]) - counted(
        model, system=[{"text": SHOUT.lower()}], messages=[user("hi")]) == plain + 3
    assert invoked("mistral.mistral-7b-instruct-v0:2", {"prompt": SHOUT})[1] - invoked(
        "mistral.mistral-7b-instruct-v0:2", {"prompt": SHOUT.lower()})[1] == plain + 3
    for other in ("us.amazon.nova-lite-v1:0", "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
                  "us.meta.llama3-2-1b-instruct-v1:0"):
        assert counted(other, messages=[user(SHOUT)]) - counted(other, messages=[user(SHOUT.lower())]) == plain


def test_mistral_writes_its_tools_between_markers():
    prompt = ("<s>[AVAILABLE_TOOLS]" + json.dumps([FUNCTION]) + "[/AVAILABLE_TOOLS][INST]What is the weather in "
              "Paris?[/INST]")
    assert abs(counted("mistral.mistral-large-2407-v1:0", messages=[user("What is the weather in Paris?")],
                       toolConfig={"tools": [TOOL]}) - rendered(prompt)) <= 2  # the list's brackets and joins


def test_nova_counts_a_single_turn_as_its_text_and_adds_its_tool_prompt():
    counter = default_counter()
    text = counter.count("What is the capital of France?") + counter.count("You are a helpful chatbot.")
    assert counted("us.amazon.nova-micro-v1:0", system=[{"text": "You are a helpful chatbot."}],
                   messages=[user("What is the capital of France?")]) == text
    with_tools = counted("us.amazon.nova-micro-v1:0", system=[{"text": "You are a helpful chatbot."}],
                         messages=[user("What is the capital of France?")], toolConfig={"tools": [TOOL]})
    assert with_tools == text + counter.count(json.dumps(TOOL["toolSpec"], sort_keys=True)) + families.NOVA_TOOL_PROMPT


def test_a_model_of_no_family_keeps_openai_chats_framing():
    counter = default_counter()
    assert counted("writer.palmyra-x4-v1:0", messages=[user("Hi there")]) == counter.count("Hi there") + 3 + 3


PROFILE = "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/mi1dadi0g15f"


@pytest.mark.parametrize(("behind", "reported"), [("Nova Micro, as recorded", 8), ("Claude", 15), ("Qwen3", 20)])
def test_a_profile_that_names_no_model_never_calibrates_a_long_prompt_below_its_text(behind, reported):
    """An application inference profile's ARN names no model, so its framing is the least any family
    adds (none): calibration learns the text's ratio once the fixed tokens are off each report, so
    after short prompts a long one is counted at least as its text, whichever model the profile copies
    (OpenAI Chat's 6 fixed tokens on the recorded Nova profile, 8 reported for 8 of text, showed a
    1,001-token prompt as 256)."""
    measurer = Measurer(Digester(b"k"), default_counter(), Calibration())
    short = ADAPTER.normalise("converse", {"modelId": PROFILE, "messages": [user('Say "hello" and nothing else.')]})
    for _ in range(6):
        measurer.observe(measurer.measure(short), reported)
    text = "The quick brown fox jumps over the lazy dog. " * 100
    long = measurer.measure(ADAPTER.normalise("converse", {"modelId": PROFILE, "messages": [user(text)]}))
    assert long.tokens >= default_counter().count(text), behind


@pytest.mark.parametrize(("size", "tokens"), [((3008, 2000), 1800), ((800, 400), 800), ((900, 900), 1300),
                                              ((1200, 1200), 2600), ((1800, 900), 2400), ((100, 900), 2600),
                                              (None, 2600)])
def test_nova_prices_an_image_by_its_guides_table(size, tokens):
    assert families.nova_image_tokens(size) == tokens


CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
OUTPUT = {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {"name": "City",
                                                                            "schema": json.dumps(SCHEMA)}}}}


def test_claude_reads_an_output_schema_the_other_families_decode_to():
    """On Claude, Converse's ``outputConfig`` schema is counted with the prompt Anthropic adds for it,
    as on Anthropic's own API; the open-weight families constrain their decoding to it instead."""
    from ctxguard.providers.anthropic import STRUCTURED_OUTPUT_PROMPT

    schema = default_counter().count(json.dumps(SCHEMA, sort_keys=True))
    for model, added in ((CLAUDE, schema + STRUCTURED_OUTPUT_PROMPT), ("qwen.qwen3-32b-v1:0", 0),
                         ("mistral.mistral-large-3-675b-instruct", 0)):
        assert counted(model, messages=[user("Where is Paris?")], outputConfig=OUTPUT) - counted(
            model, messages=[user("Where is Paris?")]) == added, model


def test_claude_thinking_and_citations_add_their_prompts_on_converse():
    from ctxguard.providers.anthropic import THINKING_PROMPT
    from ctxguard.providers.bedrock import CITATIONS_PROMPT

    plain = counted(CLAUDE, messages=[user("How do I cross the street?")])
    thinking = counted(CLAUDE, messages=[user("How do I cross the street?")],
                       additionalModelRequestFields={"thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert thinking - plain == THINKING_PROMPT
    document = {"document": {"format": "txt", "name": "policy", "source": {"text": "20 days of leave."}}}
    cited = {"document": {**document["document"], "citations": {"enabled": True}}}
    asked = [{"role": "user", "content": [document, {"text": "How many days?"}]}]
    assert counted(CLAUDE, messages=[{"role": "user", "content": [cited, {"text": "How many days?"}]}]) - counted(
        CLAUDE, messages=asked) == CITATIONS_PROMPT
    # Not Claude: no citations prompt of Anthropic's.
    assert counted("amazon.nova-pro-v1:0", messages=[{"role": "user", "content": [cited, {"text": "x"}]}]) == counted(
        "amazon.nova-pro-v1:0", messages=[{"role": "user", "content": [document, {"text": "x"}]}])


def invoked(model: str, body: dict):
    view = ADAPTER.normalise("invoke_model", {"modelId": model, "body": json.dumps(body)})
    payload = Measurer(Digester(b"k"), default_counter(), Calibration()).measure(view)
    return view, payload.raw_tokens


@pytest.mark.parametrize(("model", "body", "reserved"), [
    ("meta.llama3-70b-instruct-v1:0", {"prompt": "Tell me a joke", "max_gen_len": 128}, 128),
    ("mistral.mistral-7b-instruct-v0:2", {"prompt": "Tell me a joke", "max_tokens": 64}, 64),
    ("cohere.command-text-v14", {"prompt": "Tell me a joke", "max_tokens": 200}, 200),
    ("amazon.titan-text-express-v1", {"inputText": "Tell me a joke",
                                      "textGenerationConfig": {"maxTokenCount": 512}}, 512),
])
def test_an_invoke_prompt_body_is_one_message_with_its_tokenizers_start(model, body, reserved):
    view, tokens = invoked(model, body)
    assert view.unreadable is None and view.max_output_tokens == reserved
    assert [item[:2] for item in view.items] == [("user", "Tell me a joke")]
    assert tokens == default_counter().count("Tell me a joke") + families.family(model).prompt_request


def test_novas_invoke_body_reads_as_its_converse_request():
    messages = [user("Say this is a test"), assistant("This is a test"), user("Again")]
    body = {"schemaVersion": "messages-v1", "system": [{"text": "Be friendly"}], "messages": messages,
            "toolConfig": {"tools": [TOOL]}, "inferenceConfig": {"max_new_tokens": 100}}
    view, tokens = invoked("amazon.nova-micro-v1:0", body)
    assert view.max_output_tokens == 100 and [item[0] for item in view.items] == ["system", "user", "assistant", "user"]
    assert tokens == counted("amazon.nova-micro-v1:0", system=body["system"], messages=messages,
                             toolConfig=body["toolConfig"])


def test_cohere_command_r_reads_its_preamble_history_and_message():
    body = {"preamble": "Be brief.", "chat_history": [{"role": "USER", "message": "Hi"},
                                                      {"role": "CHATBOT", "message": "Hello"}],
            "message": "Say this is a test", "max_tokens": 10}
    view, tokens = invoked("cohere.command-r-v1:0", body)
    assert [item[:2] for item in view.items] == [("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello"),
                                                 ("user", "Say this is a test")]
    counter = default_counter()
    assert tokens == sum(counter.count(text) for text in ("Be brief.", "Hi", "Hello", "Say this is a test"))


@pytest.mark.parametrize(("model", "body", "why"), [
    ("ai21.j2-ultra-v1", {"prompt": "Hi", "maxTokens": 10}, "whose format is not read here"),
    ("meta.llama3-70b-instruct-v1:0", {"inputs": "Hi"}, "no prompt string"),
    ("us.meta.llama3-2-11b-instruct-v1:0", {"prompt": "<|image|>What is this?", "images": ["iVBORw0K"]},
     "images"),
    ("amazon.titan-text-express-v1", {"prompt": "Hi"}, "no inputText string"),
    ("cohere.command-r-v1:0", {"message": "Hi", "chat_history": [{"role": "USER"}]}, "without a message"),
    ("openai.gpt-oss-120b-1:0", {"messages": [{"role": "user", "content": "Hi"}]}, "not read here"),
])
def test_an_invoke_body_not_understood_stays_unread(model, body, why):
    view = ADAPTER.normalise("invoke_model", {"modelId": model, "body": json.dumps(body)})
    assert view.unreadable is not None and why in view.unreadable and view.items == []
