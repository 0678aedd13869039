"""Tool and structured-output schemas are counted as the provider shows them to the model, and
the prompts a provider adds for them are counted too (docs/budget.md, "Tools and schemas").

Counted through the real SDKs over loopback HTTP: ``ctxguard.budget.tools`` is the tools term of
the budget equation, what these requests carry beyond their messages.
"""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from ctxguard import Budget, Policy
from ctxguard.providers import anthropic as anthropic_provider
from ctxguard.providers import openai as openai_provider
from ctxguard.providers.anthropic import text_scale
from ctxguard.tokens import default_counter

WEATHER = {
    "name": "get_current_weather",
    "description": "Get the current weather in a given location",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. Boston, MA"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["location"],
    },
}
#: How OpenAI declares that function to the model (TypeScript in a ``functions`` namespace).
WEATHER_TS = """// Get the current weather in a given location
type get_current_weather = (_: {
// The city and state, e.g. Boston, MA
location: string,
unit?: "celsius" | "fahrenheit",
days?: number[],
}) => any;"""
FRAME = "# Tools\n\n## functions\n\nnamespace functions {\n\n} // namespace functions"
CITY = {
    "type": "json_schema",
    "json_schema": {
        "name": "CityLocation",
        "description": "A city and its country.",
        "schema": {"type": "object", "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
                   "required": ["city", "country"], "additionalProperties": False},
        "strict": True,
    },
}
CITY_TEXT = """# Response Formats

## CityLocation

// A city and its country.
{"type":"object","properties":{"city":{"type":"string"},"country":{"type":"string"}},"required":["city","country"],"additionalProperties":false}"""
USER = [{"role": "user", "content": "weather in Pune?"}]


@pytest.fixture(autouse=True)
def _exact(monkeypatch) -> None:
    """Exact counts, compared with tiktoken's of the rendering: a lazy guard shows these terms as
    bytes scaled (docs/budget.md, "What the span shows"), which says nothing about the rendering."""
    monkeypatch.setenv("CTXGUARD_TOKENIZER", "eager")


def count(*texts: str) -> int:
    counter = default_counter()
    return sum(counter.count(text) for text in texts)


def tools_term(harness) -> int:
    return harness.spans()[-1].attributes["ctxguard.budget.tools"]


def test_chat_function_tools_are_counted_as_typescript_declarations(harness, llm, client):
    harness.start(mode="observe")
    client.chat.completions.create(model="gpt-4o", messages=USER, tools=[{"type": "function", "function": WEATHER}])
    assert tools_term(harness) == count(WEATHER_TS, FRAME)


def test_responses_function_tools_and_legacy_functions_read_the_same(harness, llm, client):
    harness.start(mode="observe")
    client.responses.create(model="gpt-4o", input="weather in Pune?", tools=[{"type": "function", **WEATHER}])
    responses = tools_term(harness)
    client.chat.completions.create(model="gpt-4o", messages=USER, functions=[WEATHER])
    assert responses == tools_term(harness) == count(WEATHER_TS, FRAME)


def test_a_function_without_parameters_and_a_built_in_tool():
    """No parameters: ``() => any``. A tool that is no function (web search) is counted as its JSON;
    the ``functions`` namespace is counted once, and only when there is a function."""
    view = openai_provider.ADAPTER.normalise("responses", {"model": "gpt-4o", "input": "hi", "tools": [
        {"type": "function", "name": "now", "description": "The time", "parameters": {"type": "object"}},
        {"type": "web_search"},
    ]})
    assert view.tools == ["// The time\ntype now = () => any;", '{"type": "web_search"}', FRAME]
    only_search = openai_provider.ADAPTER.normalise("responses", {"model": "gpt-4o", "input": "hi",
                                                                  "tools": [{"type": "web_search"}]})
    assert only_search.tools == ['{"type": "web_search"}']


def test_nested_objects_unions_and_refs_render_as_types():
    schema = {"type": "object", "properties": {
        "address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"]},
        "when": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "kind": {"$ref": "#/$defs/Kind"},
        "tags": {"type": ["string", "null"]},
    }, "required": ["address"]}
    assert openai_provider._typescript(schema) == (
        "{\naddress: {\nzip: string,\n},\nwhen?: string | null,\nkind?: Kind,\ntags?: string | null,\n}"
    )


def test_chat_response_format_schema_is_counted_under_its_heading(harness, llm, client):
    harness.start(mode="observe")
    client.chat.completions.create(model="gpt-4o", messages=USER)
    assert tools_term(harness) == 0
    client.chat.completions.create(model="gpt-4o", messages=USER, response_format=CITY)
    assert tools_term(harness) == count(CITY_TEXT)


def test_responses_text_format_schema_is_counted(harness, llm, client):
    harness.start(mode="observe")
    text_format = {"format": {"type": "json_schema", **CITY["json_schema"]}}
    client.responses.create(model="gpt-4o", input="weather in Pune?", text=text_format)
    assert tools_term(harness) == count(CITY_TEXT)


class Answer(BaseModel):
    city: str


#: ``Answer`` as the SDK converts it before sending (strict JSON schema, named after the class).
ANSWER_TEXT = """# Response Formats

## Answer

{"properties":{"city":{"title":"City","type":"string"}},"required":["city"],"title":"Answer","type":"object","additionalProperties":false}"""


def test_parse_with_a_pydantic_class_counts_the_schema_the_sdk_sends(harness, llm, client):
    harness.start(mode="observe")
    llm.script('{"city": "Pune"}', '{"city": "Pune"}')
    client.chat.completions.parse(model="gpt-4o", messages=USER, response_format=Answer)
    chat = tools_term(harness)
    client.responses.parse(model="gpt-4o", input="weather in Pune?", text_format=Answer)
    assert chat == tools_term(harness) == count(ANSWER_TEXT)
    sent = llm.bodies("/chat/completions")[0]["response_format"]["json_schema"]["schema"]
    assert ANSWER_TEXT.endswith(json.dumps(sent, separators=(",", ":")))  # what the SDK sent, as it sent it


def test_a_json_object_format_adds_no_schema(harness, llm, client):
    harness.start(mode="observe")
    client.chat.completions.create(model="gpt-4o", messages=USER, response_format={"type": "json_object"})
    assert tools_term(harness) == 0


@pytest.mark.parametrize("calls", [1, 3])
def test_a_messages_tool_calls_are_charged_as_the_model_reads_them(calls):
    """One call: its framing, its name and arguments. Several: one call of the parallel wrapper
    (its framing once), naming each function with its arguments, compact (otel-chat-tools-2 in the
    recorded corpus: 94 counted so for 99 reported, 78 with a framing a call)."""
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": f"f{i}", "arguments": f'{{"n": {i}}}'}}
        for i in range(calls)]}
    view = openai_provider.ADAPTER.normalise("chat.completions", {"model": "gpt-4o", "messages": [message]})
    _, text, refs, _, cost = view.items[0]
    assert cost == openai_provider.TOOL_CALL_FRAMING
    if calls == 1:
        assert text == 'f0 {"n":0}'
    else:
        assert text.startswith("multi_tool_use.parallel ")
        assert all(f'"recipient_name":"functions.f{i}","parameters":{{"n":{i}}}' in text for i in range(calls))
    assert len(refs) == calls  # each call still pairs with its result


def test_tool_call_arguments_are_read_compact_and_as_sent_when_they_cannot_be_parsed():
    """Pretty-printed arguments are counted as OpenAI reads them, compact; arguments that are not
    JSON, or nest past the parser's recursion limit, are read as sent (no error of ctxguard's)."""
    pretty = '{\n  "city": "Lyon",\n  "items": [1, 2]\n}'
    deep = "[" * 50_000 + "1, 2" + "]" * 50_000
    assert openai_provider.arguments_as_read(pretty) == '{"city":"Lyon","items":[1,2]}'
    assert openai_provider.arguments_as_read("{not json, really}") == "{not json, really}"
    assert openai_provider.arguments_as_read(deep) == deep


# -- Anthropic ------------------------------------------------------------------------

ORDER_TOOL = {"name": "lookup_order", "description": "Find an order",
              "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}
ORDER_JSON = (
    '{"description": "Find an order", "input_schema": {"properties": {"id": {"type": "string"}}, '
    '"required": ["id"], "type": "object"}, "name": "lookup_order"}'
)


WINDOW = Policy(budget=Budget(window=200_000))


@pytest.fixture
def claude(llm):
    import anthropic

    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


@pytest.mark.parametrize(
    ("model", "tool_choice", "prompt"),
    [
        ("claude-sonnet-4-5-20250929", None, 496),
        ("claude-sonnet-4-5", {"type": "any"}, 588),
        ("claude-sonnet-4-5", {"type": "tool", "name": "lookup_order"}, 588),
        ("claude-sonnet-4-5", {"type": "none"}, 496),
        ("claude-opus-4-7", {"type": "auto"}, 675),
        ("claude-opus-4-8", {"type": "any"}, 410),
        ("claude-3-5-haiku-latest", None, 264),
        ("claude-3-5-sonnet-20240620", None, 294),  # June; the October release is 346
        ("claude-3-5-sonnet-20241022", None, 346),
        ("claude-3-opus-20240229", {"type": "any"}, 281),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", None, 313),  # a Bedrock id
        ("claude-sonnet-4-0", None, 313),  # the 4.0 alias
        ("claude-opus-4-9", None, 675),  # not published yet: the largest published number
    ],
)
def test_anthropic_tool_use_system_prompt_by_model_and_tool_choice(harness, llm, claude, model, tool_choice, prompt):
    harness.start(mode="observe", policy=WINDOW)  # a window for models the table does not know yet
    extra = {"tool_choice": tool_choice} if tool_choice else {}
    claude.messages.create(model=model, max_tokens=100, messages=USER, tools=[ORDER_TOOL], **extra)
    # The schema's text at the model's tokenizer's ratio to cl100k (Opus 4.7 and later: 1.3), the prompt as it is.
    assert tools_term(harness) == round(count(ORDER_JSON) * text_scale(model)) + prompt


def test_a_lazy_guard_shows_the_tool_prompt_as_tokens_and_the_schema_as_bytes_scaled(
        harness, llm, claude, monkeypatch):
    """Before the tokenizer is needed, the schema's bytes show at four a token and the tool-use
    system prompt, tokens already, as it is (a quarter of it was shown before: 124 for 496)."""
    monkeypatch.setenv("CTXGUARD_TOKENIZER", "lazy")
    harness.start(mode="observe")
    claude.messages.create(model="claude-sonnet-4-5-20250929", max_tokens=100, messages=USER, tools=[ORDER_TOOL])
    assert harness.spans()[-1].attributes["ctxguard.payload.tokens_source"] == "estimate"
    assert tools_term(harness) == round(len(ORDER_JSON.encode()) / 4) + 496


def test_anthropic_without_tools_adds_no_tool_prompt(harness, llm, claude):
    harness.start(mode="observe")
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=USER, tool_choice={"type": "none"})
    assert tools_term(harness) == 0


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}
SCHEMA_JSON = '{"additionalProperties": false, "properties": {"city": {"type": "string"}}, "required": ["city"], ' \
              '"type": "object"}'


def test_anthropic_structured_output_schema_and_its_prompt(harness, llm, claude):
    """``output_config.format``: the schema, and the system prompt Anthropic adds to explain it."""
    harness.start(mode="observe")
    fmt = {"type": "json_schema", "schema": SCHEMA}
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=USER, output_config={"format": fmt})
    assert tools_term(harness) == count(SCHEMA_JSON) + anthropic_provider.STRUCTURED_OUTPUT_PROMPT
    # ``extra_body`` is merged into the body the SDK sends: the same schema, the same count.
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=100, messages=USER, extra_body={"output_config": {
        "format": fmt}})
    assert llm.bodies()[-1]["output_config"] == {"format": fmt}
    assert tools_term(harness) == count(SCHEMA_JSON) + anthropic_provider.STRUCTURED_OUTPUT_PROMPT


#: The beta ``output_format`` of a recorded request (tests/data/recorded/openllmetry.jsonl,
#: ``openllmetry-anthropic-output-format``: a 251-character schema, 222 input tokens reported).
JOKE_FORMAT = {"type": "json_schema", "schema": {
    "type": "object",
    "properties": {"joke": {"type": "string", "description": "A joke about OpenTelemetry"},
                   "rating": {"type": "integer", "description": "Rating of the joke from 1 to 10"}},
    "required": ["joke", "rating"], "additionalProperties": False}}
JOKE_PROMPT = [{"role": "user", "content": "Tell me a joke about OpenTelemetry and rate it from 1 to 10"}]


class Joke(BaseModel):
    joke: str = Field(description="A joke about OpenTelemetry")
    rating: int = Field(description="Rating of the joke from 1 to 10")


def test_anthropic_beta_output_format_counts_its_schema_as_output_config_does(harness, llm, claude):
    """The beta ``output_format`` as the recorded request sent it: the SDKs that dropped the parameter
    from ``create`` send it through ``extra_body``; counted as the same schema in ``output_config``
    (before: the messages only, 23 tokens for the recorded request)."""
    harness.start(mode="observe")
    kwargs = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 1024, "messages": JOKE_PROMPT}
    claude.messages.create(**kwargs, output_config={"format": JOKE_FORMAT})
    claude.messages.create(**kwargs, extra_body={"output_format": JOKE_FORMAT})
    claude.beta.messages.create(**kwargs, extra_body={"output_format": JOKE_FORMAT},
                                betas=["structured-outputs-2025-11-13"])
    assert [b.get("output_format") for b in llm.bodies()] == [None, JOKE_FORMAT, JOKE_FORMAT]
    schema = count(json.dumps(JOKE_FORMAT["schema"], sort_keys=True)) + anthropic_provider.STRUCTURED_OUTPUT_PROMPT
    assert [s.attributes["ctxguard.budget.tools"] for s in harness.spans()] == [schema] * 3
    # The recorded body itself, as an older SDK's ``beta.messages.create(output_format=...)`` passes it.
    view = anthropic_provider.ADAPTER.normalise("messages", {**kwargs, "output_format": JOKE_FORMAT})
    assert view.tools == [json.dumps(JOKE_FORMAT["schema"], sort_keys=True)]


@pytest.mark.parametrize("beta", [False, True], ids=["messages", "beta.messages"])
def test_anthropic_parse_counts_the_schema_the_sdk_makes_of_its_output_format(harness, llm, claude, beta):
    """``parse(output_format=Model)``: the schema the SDK converts the class to and sends in
    ``output_config`` (before: the text of the class's deprecated ``schema`` method)."""
    harness.start(mode="observe")
    llm.script(json.dumps({"joke": "a span walks into a bar", "rating": 7}))
    resource = claude.beta.messages if beta else claude.messages
    resource.parse(model="claude-sonnet-4-5", max_tokens=1024, messages=JOKE_PROMPT, output_format=Joke)
    sent = llm.bodies()[-1]["output_config"]["format"]["schema"]
    assert sent["properties"]["rating"]["description"] == "Rating of the joke from 1 to 10"
    assert tools_term(harness) == count(json.dumps(sent, sort_keys=True)) + anthropic_provider.STRUCTURED_OUTPUT_PROMPT


def test_anthropic_deprecated_output_format_reads_the_same():
    """The beta ``output_format`` parameter (older SDKs' ``beta.messages``) carries the same schema."""
    kwargs = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": USER}
    old = anthropic_provider.ADAPTER.normalise("messages", {**kwargs, "output_format": {"type": "json_schema",
                                                                                        "schema": SCHEMA}})
    new = anthropic_provider.ADAPTER.normalise("messages", {**kwargs, "output_config": {"format": {
        "type": "json_schema", "schema": SCHEMA}}})
    assert old.tools == new.tools == [SCHEMA_JSON]
    assert old.prompt_overhead == new.prompt_overhead == anthropic_provider.STRUCTURED_OUTPUT_PROMPT


def test_anthropic_thinking_adds_its_prompt(harness, llm, claude):
    harness.start(mode="observe")
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=2048, messages=USER,
                           thinking={"type": "enabled", "budget_tokens": 1024})
    assert tools_term(harness) == anthropic_provider.THINKING_PROMPT
    claude.messages.create(model="claude-sonnet-4-5", max_tokens=2048, messages=USER, thinking={"type": "disabled"})
    assert tools_term(harness) == 0


# -- Google Gemini --------------------------------------------------------------------


#: ``WEATHER`` as the Gemini API takes it, and what Gemini 2.0 counts of it: its name, its
#: description, and its parameters' descriptions, enum values, required and property names, as the
#: SDK's own local tokenizer reads them (``google.genai.local_tokenizer``); types are not counted.
GEMINI_WEATHER_TEXTS = ("get_current_weather Get the current weather in a given location location "
                        "The city and state, e.g. Boston, MA unit celsius fahrenheit days location")


def test_gemini_response_schema_is_not_in_the_prompt(harness, llm):
    """``promptTokenCount`` leaves a response schema out: "Hi" with a 40-token schema is 2 tokens
    (tests/data/recorded/logfire.jsonl), and seven structured requests of the corpus agree."""
    genai = pytest.importorskip("google.genai", reason="google-genai is not installed (extra 'google')")
    from google.genai import types

    gemini = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})
    harness.start(mode="observe")
    for config in [types.GenerateContentConfig(), types.GenerateContentConfig(response_json_schema=SCHEMA),
                   types.GenerateContentConfig(response_mime_type="application/json", response_schema=Answer)]:
        gemini.models.generate_content(model="gemini-2.5-flash", contents="weather in Pune?", config=config)
    spans = [s.attributes for s in harness.spans() if "ctxguard.budget.tools" in s.attributes]
    assert [a["ctxguard.budget.tools"] for a in spans] == [0, 0, 0]
    assert len({a["ctxguard.payload.tokens"] for a in spans}) == 1


def test_gemini_function_declarations_are_counted_as_the_models_generation_reads_them(harness, llm):
    """Gemini 2.0 counts the texts in a declaration and a few tokens more; Gemini 2.5 and later
    count near its JSON (docs/budget.md, "Gemini")."""
    genai = pytest.importorskip("google.genai", reason="google-genai is not installed (extra 'google')")
    from google.genai import types

    from ctxguard.providers import google_genai

    gemini = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})
    harness.start(mode="observe")
    tools = [types.Tool(function_declarations=[types.FunctionDeclaration(**WEATHER)])]
    for model in ("gemini-2.0-flash", "gemini-2.5-flash"):
        gemini.models.generate_content(model=model, contents="weather in Pune?",
                                       config=types.GenerateContentConfig(tools=tools))
    classic, current = [s.attributes["ctxguard.budget.tools"] for s in harness.spans()
                        if "ctxguard.budget.tools" in s.attributes]
    assert classic == count(GEMINI_WEATHER_TEXTS) + google_genai.CLASSIC.tools
    declared = json.loads(json.dumps(types.FunctionDeclaration(**WEATHER).model_dump(mode="json", exclude_none=True)))
    assert current == count(json.dumps(declared, sort_keys=True, separators=(",", ":"))) + google_genai.CURRENT.tools
    assert classic < current < count(json.dumps({"functionDeclarations": [WEATHER]}, indent=1))
