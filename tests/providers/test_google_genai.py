"""The Google GenAI SDK (google-genai), driven for real over loopback HTTP."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import subprocess
import sys
import textwrap
from urllib.parse import urlsplit

import pytest

genai = pytest.importorskip("google.genai", reason="google-genai is not installed (extra 'google')")

from google.genai import _api_client, errors, types  # noqa: E402
from google.genai.models import AsyncModels, Models  # noqa: E402

import ctxguard  # noqa: E402
from ctxguard.digest import Digester  # noqa: E402
from ctxguard.testing import FakeLLM, Reply  # noqa: E402
from tests.conftest import KEY, guard_spans, message_digest, only_guard_span, replace_body  # noqa: E402

MODEL = "gemini-2.5-flash"
SYSTEM = "You are the order assistant.\nAnswer in English."
# The HTTP library this google-genai release is built on (httpx2 for 3.x, httpx for 1.x).
http = getattr(_api_client, "httpx2", None) or _api_client.httpx
CALL_SITES = [(cls, name) for cls in (Models, AsyncModels) for name in ("generate_content", "generate_content_stream")]


@pytest.fixture
def gemini(llm):
    return genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})


def body_digests(body):
    """Per message, the digest of what arrived: systemInstruction first, then each content."""
    def text(content):
        return "\n".join(p["text"] for p in content["parts"] if "text" in p)

    digests = [message_digest("system", text(body["systemInstruction"]))] if "systemInstruction" in body else []
    roles = {"model": "assistant"}
    return digests + [message_digest(roles.get(c["role"], c["role"]), text(c)) for c in body["contents"]]


def test_system_instruction_is_the_head_and_span_matches_the_body(harness, llm, gemini):
    harness.start(mode="observe")
    with ctxguard.conversation("g1"):
        reply = gemini.models.generate_content(
            model=MODEL,
            contents=[types.Content(role="user", parts=[types.Part(text="where is my parcel?")]),
                      {"role": "model", "parts": [{"text": "Which order?"}]},
                      "A-1041"],
            config=types.GenerateContentConfig(system_instruction=SYSTEM, max_output_tokens=300),
        )
    assert reply.text == "ok 1"
    sent = llm.bodies(":generateContent")[0]
    a = only_guard_span(harness).attributes
    assert a["gen_ai.provider.name"] == "gcp.gemini"  # the Gemini Developer API (docs/supported.md)
    assert a["gen_ai.request.model"] == MODEL == llm.requests[0].path.split("models/")[1].split(":")[0]
    assert list(a["ctxguard.message.roles"]) == ["system", "user", "assistant", "user"]
    assert list(a["ctxguard.message.hashes"]) == body_digests(sent)
    assert a["ctxguard.budget.window"] == 1_048_576
    assert a["ctxguard.budget.reserved_output"] == sent["generationConfig"]["maxOutputTokens"] == 300
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[0].body)
    assert a["gen_ai.response.id"] == reply.response_id == llm.responses[0].id
    assert list(a["gen_ai.response.finish_reasons"]) == ["STOP"]
    assert a["gen_ai.usage.input_tokens"] == reply.usage_metadata.prompt_token_count
    assert a["gen_ai.usage.input_tokens"] == llm.responses[0].input_tokens > 0
    assert list(a["ctxguard.violations"]) == []
    assert harness.metric("ctxguard_calls_total", provider="gcp.gemini", operation="chat") == 1
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 1


def vertex_clients(llm) -> list:
    """Vertex AI clients pointed at the fake, which answers Vertex's paths too: express mode (an
    API key) and a project and location (with an access token: no Google credentials looked up)."""
    from google.oauth2.credentials import Credentials

    options = {"base_url": llm.gemini_base_url}
    return [genai.Client(vertexai=True, api_key="t", http_options=options),
            genai.Client(vertexai=True, project="p", location="us-central1", credentials=Credentials(token="t"),
                         http_options=options)]


def test_the_provider_is_the_api_the_client_reaches_gemini_or_vertex_ai(harness, llm, gemini):
    """The client's own ``vertexai`` flag says which API its requests are made for (issue 39):
    ``gcp.gemini`` for the Gemini Developer API, ``gcp.vertex_ai`` for Vertex AI, sync and async,
    with the server its base URL names (before: ``gcp.gen_ai`` whatever the endpoint)."""
    harness.start(mode="observe")
    express, project = vertex_clients(llm)
    for client in (gemini, express, project):
        client.models.generate_content(model=MODEL, contents="hi", config={"system_instruction": SYSTEM})
    asyncio.run(express.aio.models.generate_content(model=MODEL, contents="hi",
                                                    config={"system_instruction": SYSTEM}))
    # The Gemini Developer API's path (``/v1/models/…``, ``/v1beta`` in google-genai 1.x), then Vertex AI's.
    paths = [r.path.split("/models/")[0] for r in llm.requests]
    assert paths[0] in ("/v1", "/v1beta")
    assert paths[1:] == ["/v1beta1/publishers/google", "/v1beta1/projects/p/locations/us-central1/publishers/google",
                         "/v1beta1/publishers/google"]
    fake = urlsplit(llm.gemini_base_url)
    spans = [s.attributes for s in guard_spans(harness)]
    assert [a["gen_ai.provider.name"] for a in spans] == ["gcp.gemini"] + ["gcp.vertex_ai"] * 3
    assert {(a["server.address"], a["server.port"]) for a in spans} == {(fake.hostname, fake.port)}
    assert harness.metric("ctxguard_calls_total", provider="gcp.gemini", operation="chat") == 1
    assert harness.metric("ctxguard_calls_total", provider="gcp.vertex_ai", operation="chat") == 3
    assert harness.metric("ctxguard_calls_total", provider="gcp.gen_ai", operation="chat") == 0


def test_identity_is_read_off_the_client_and_unknown_stays_gcp_gen_ai():
    from google.oauth2.credentials import Credentials

    from ctxguard.providers.google_genai import ADAPTER, PROVIDER

    assert ADAPTER.identity(genai.Client(api_key="t").models) == ("gcp.gemini", "generativelanguage.googleapis.com",
                                                                   443)
    vertex = genai.Client(vertexai=True, project="p", location="europe-west4", credentials=Credentials(token="t"))
    assert ADAPTER.identity(vertex.aio.models) == ("gcp.vertex_ai", "europe-west4-aiplatform.googleapis.com", 443)
    assert ADAPTER.identity(genai.Client(vertexai=True, api_key="t").models) == (
        "gcp.vertex_ai", "aiplatform.googleapis.com", 443)
    assert ADAPTER.identity(object()) is None  # not a google-genai module: the SDK's own label stays
    assert PROVIDER.labels == ("gcp.gen_ai", "gcp.gemini", "gcp.vertex_ai")


def _track_history(signature: bytes) -> tuple[list, types.GenerateContentConfig]:
    """A turn of a tool loop given back to the model: the question, the model's function call with the
    thought signature its answer carried, the function's result; the function declared."""
    call = types.Part(function_call=types.FunctionCall(name="track", args={"order": "A-1041"}),
                      thought_signature=signature)
    contents = [types.Content(role="user", parts=[types.Part(text="Where is order A-1041?")]),
                types.Content(role="model", parts=[call]),
                types.Content(role="user", parts=[types.Part.from_function_response(
                    name="track", response={"status": "in transit", "city": "Lyon"})])]
    declaration = types.FunctionDeclaration(name="track", description="Track an order by its id.",
                                            parameters_json_schema={"type": "object", "required": ["order"],
                                                                    "properties": {"order": {"type": "string",
                                                                                             "description": "its id"}}})
    return contents, types.GenerateContentConfig(
        system_instruction=SYSTEM, tools=[types.Tool(function_declarations=[declaration])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))


def test_a_request_is_counted_as_the_api_its_client_reaches_counts_it(harness, llm, gemini, tmp_path):
    """Who a call reaches is read off its client before the request is measured (issue 39,
    docs/budget.md "Gemini"). The same Gemini 3 tool loop: on the Gemini Developer API its calls and
    declarations counted as their JSON and the function call's thought signature charged, a token a
    ``SIGNATURE_CHARS`` characters of the base64 that arrived; on Vertex AI as Gemini 2.0 counts (the
    texts in them, no token a content, no signature). Each span's count is that of the body that
    arrived, read with its API's accounting; offline, the capture line's label gives the same."""
    from ctxguard.capture import read_capture
    from ctxguard.measure import Measurer
    from ctxguard.offline import CAPTURED_PROVIDERS, Checker
    from ctxguard.providers.google_genai import ADAPTER, GEMINI_API, SIGNATURE_CHARS, VERTEX_AI, as_call
    from ctxguard.tokens import Calibration, default_counter

    model = "gemini-3-flash-preview"
    harness.start(mode="observe", tokenizer="eager", capture_path=str(tmp_path / "capture.jsonl"))
    contents, config = _track_history(bytes(range(256)) * 4)  # 1,024 bytes: 1,368 base64 characters
    express, _ = vertex_clients(llm)
    for client in (gemini, express):
        client.models.generate_content(model=model, contents=contents, config=config)
    developer, vertex = (s.attributes for s in guard_spans(harness))
    assert (developer["gen_ai.provider.name"], vertex["gen_ai.provider.name"]) == (GEMINI_API, VERTEX_AI)
    measurer = Measurer(Digester(KEY), default_counter(), Calibration())

    def counted(adapter, body) -> int:
        api, kwargs = as_call(body, model)
        return measurer.measure(adapter.normalise(api, kwargs)).raw_tokens

    to_gemini, to_vertex = llm.bodies(":generateContent")
    signature = to_gemini["contents"][1]["parts"][0]["thoughtSignature"]
    assert len(signature) == 1_368
    assert developer["ctxguard.payload.tokens"] == counted(ADAPTER.for_route(GEMINI_API), to_gemini)
    assert developer["ctxguard.payload.tokens"] - counted(ADAPTER, to_gemini) == -(-1_368 // SIGNATURE_CHARS)
    assert vertex["ctxguard.payload.tokens"] == counted(ADAPTER.for_route(VERTEX_AI), to_vertex)
    assert vertex["ctxguard.payload.tokens"] < counted(ADAPTER, to_vertex) - 10  # the JSON, a token a content
    with (tmp_path / "capture.jsonl").open("rb") as f:
        offline = [result for _, result in Checker().judge(read_capture(f, CAPTURED_PROVIDERS))]
    assert [(r.provider, r.tokens) for r in offline] == [
        (GEMINI_API, developer["ctxguard.payload.tokens"]), (VERTEX_AI, vertex["ctxguard.payload.tokens"])]


def test_a_json_schema_declaration_counts_its_name_and_description_only_on_gemini_2_0(harness, llm, gemini):
    """Gemini 2.0 counts a declaration's texts as the SDK's local tokenizer reads them: its name, its
    description, and the texts of Gemini's own ``parameters`` schema, not of a ``parameters_json_schema``
    (docs/budget.md, "Gemini": pydantic-ai's requests so declared, +33% with those texts counted).
    The same function declared three ways reaches the fake through the real SDK: as JSON Schema it is
    counted as the one declared with no parameters; as Gemini's schema, its texts more; on Gemini 2.5,
    which counts declarations as their JSON, the JSON Schema counts too."""
    properties = {"city": {"type": "string", "description": "The city whose weather is wanted, as its name in English"},
                  "date": {"type": "string", "description": "The day, as an ISO 8601 date; today when left out"}}
    json_schema = {"type": "object", "properties": properties, "required": ["city"]}
    schema = types.Schema.model_validate({**json_schema, "type": "OBJECT", "properties": {
        name: {**value, "type": "STRING"} for name, value in properties.items()}})
    described = {"name": "weather", "description": "The weather of a day in a city."}
    declared = {"json": types.FunctionDeclaration(**described, parameters_json_schema=json_schema),
                "none": types.FunctionDeclaration(**described),
                "schema": types.FunctionDeclaration(**described, parameters=schema)}
    harness.start(mode="observe")
    for model in ("gemini-2.0-flash", "gemini-2.5-flash"):
        for declaration in declared.values():
            gemini.models.generate_content(model=model, contents="Weather in Lyon?", config=types.GenerateContentConfig(
                system_instruction=SYSTEM, tools=[types.Tool(function_declarations=[declaration])]))
    tokens = [s.attributes["ctxguard.payload.tokens"] for s in guard_spans(harness)]
    (json_2_0, none_2_0, schema_2_0), (json_2_5, none_2_5, _) = tokens[:3], tokens[3:]
    arrived = [body["tools"][0]["functionDeclarations"][0] for body in llm.bodies(":generateContent")]
    assert {"parameters_json_schema", "parametersJsonSchema"} & set(arrived[0]) and "parameters" in arrived[2]
    assert json_2_0 == none_2_0
    assert schema_2_0 - none_2_0 >= 25  # the two descriptions and the names
    assert json_2_5 - none_2_5 >= 40  # the JSON


def test_missing_system_instruction_fails_and_enforce_sends_nothing(harness, llm, gemini):
    harness.start(mode="enforce")
    with pytest.raises(ctxguard.ContextViolation):
        gemini.models.generate_content(model=MODEL, contents="hi")
    with pytest.raises(ctxguard.ContextViolation):
        gemini.models.generate_content(model=MODEL, contents="hi", config={"system_instruction": [" "]})
    assert llm.requests == []
    assert harness.metric("ctxguard_blocked_total", check="system_at_head") == 2
    gemini.models.generate_content(model=MODEL, contents="hi",
                                   config={"system_instruction": {"parts": [{"text": SYSTEM}]}})
    assert len(llm.requests) == 1


def test_chat_session_turns_and_fact_checks(harness, llm, gemini):
    harness.start(mode="observe")
    with ctxguard.conversation("chat-1"):
        ctxguard.record_fact("city", "Pune")
        chat = gemini.chats.create(model=MODEL, config={"system_instruction": SYSTEM})
        chat.send_message("please ship to Pune")
        ctxguard.record_fact("order_id", "A-1041")  # never mentioned: fact_present fails
        chat.send_message("thanks")
        ctxguard.forget_fact("city")  # still in the history the session resends: fact_forgotten fails
        chat.send_message("bye")
    spans = guard_spans(harness)
    assert len(spans) == 3 == len(llm.bodies(":generateContent"))
    for span, body in zip(spans, llm.bodies(":generateContent"), strict=True):
        assert list(span.attributes["ctxguard.message.hashes"]) == body_digests(body)
    last = spans[-1].attributes
    assert list(last["ctxguard.message.roles"]) == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last["ctxguard.messages.added"] == 2
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [
        [], ["fact_present"], ["fact_present", "fact_forgotten"]]
    assert list(spans[0].attributes["ctxguard.facts.present"]) == ["city@1"]
    assert list(last["ctxguard.facts.leaked"]) == ["city@1"]
    assert "Pune" not in json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in last.items()})


def test_pinned_checks_and_budget(harness, llm, gemini):
    harness.start(mode="observe", policy=ctxguard.Policy(pinned=ctxguard.Pinned(max_tokens=40)))
    block = ctxguard.render_pinned({"city": "Pune", "order": "A-1041"}, max_tokens=40)
    config = {"system_instruction": [SYSTEM, block], "max_output_tokens": 100}
    gemini.models.generate_content(model=MODEL, contents="hi", config=config)
    gemini.models.generate_content(model=MODEL, contents="hi", config={"system_instruction": SYSTEM})
    cut = "\n".join(block.splitlines()[:-1])
    gemini.models.generate_content(model=MODEL, contents=[cut, "hi"], config={"system_instruction": SYSTEM})
    big = ctxguard.render_pinned({f"k{i}": "v" * 20 for i in range(20)}, max_tokens=10_000)
    gemini.models.generate_content(model=MODEL, contents=[big], config={"system_instruction": SYSTEM})
    gemini.models.generate_content(model=MODEL, contents="hi",
                                   config={"system_instruction": [SYSTEM, block], "max_output_tokens": 1_048_576})
    gemini.models.generate_content(model="gemini-unreleased", contents="hi",
                                   config={"system_instruction": [SYSTEM, block]})
    spans = guard_spans(harness)
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [
        [], ["pinned_present"], ["pinned_intact"], ["pinned_capped"], ["payload_under_budget"], []]
    assert spans[0].attributes["ctxguard.pinned.present"] is True
    assert "payload_under_budget: " in "\n".join(spans[-1].attributes["ctxguard.checks.skipped"])
    assert harness.metric("ctxguard_violations_total", check="pinned_present", provider="gcp.gemini") == 1


def test_parts_are_read_and_bytes_never_recorded(harness, llm, gemini):
    harness.start(mode="observe")
    image = b"\x89PNG\r\n\x1a\n" + b"secret-pixels" * 40
    with ctxguard.conversation("parts"):
        ctxguard.record_fact("order_id", "A-1041")
        gemini.models.generate_content(model=MODEL, config={"system_instruction": SYSTEM}, contents=[
            types.Content(role="user", parts=[types.Part.from_text(text="what is this?"),
                                              types.Part.from_bytes(data=image, mime_type="image/png"),
                                              types.Part.from_uri(file_uri="gs://b/doc.pdf",
                                                                  mime_type="application/pdf")]),
            types.Content(role="model", parts=[types.Part.from_function_call(name="lookup",
                                                                             args={"order": "A-1041"})]),
            types.Content(role="user", parts=[types.Part.from_function_response(name="lookup",
                                                                                response={"status": "shipped"})]),
        ])
    a = only_guard_span(harness).attributes
    assert list(a["ctxguard.message.roles"]) == ["system", "user", "assistant", "user"]
    assert list(a["ctxguard.facts.present"]) == ["order_id@1"]  # found in the function_call args
    dumped = str(dict(a))
    assert "secret-pixels" not in dumped and base64.b64encode(image).decode()[:40] not in dumped
    assert base64.b64encode(image) in llm.requests[0].body  # the SDK did send them


def test_stream_output_identical_to_uninstrumented_and_wire_observed(harness, llm, gemini):
    def chunks():
        llm.script("parcel in Pune")
        stream = gemini.models.generate_content_stream(model=MODEL, contents="where?",
                                                       config={"system_instruction": SYSTEM})
        return [c.model_dump(exclude={"sdk_http_response", "response_id"}) for c in stream]

    plain = chunks()
    harness.start(mode="observe")
    guarded = chunks()
    assert guarded == plain
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in guarded) == "parcel in Pune"
    a = only_guard_span(harness).attributes
    # The SDK's stream is a generator that sends on the first chunk: still observed.
    assert a["ctxguard.wire.hash"] == Digester(KEY).bytes(llm.requests[-1].body)
    assert list(a["gen_ai.response.finish_reasons"]) == ["STOP"]
    assert a["gen_ai.usage.output_tokens"] > 0


@pytest.mark.asyncio
async def test_async_generate_and_stream(harness, llm):
    harness.start(mode="observe")
    llm.script("one", "two")
    async with http.AsyncClient() as transport:
        client = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url,
                                                         "httpx_async_client": transport})
        reply = await client.aio.models.generate_content(model=MODEL, contents="hi")
        stream = await client.aio.models.generate_content_stream(model=MODEL, contents="hi",
                                                                 config={"system_instruction": SYSTEM})
        text = "".join([c.text async for c in stream])
    assert (reply.text, text) == ("one", "two")
    spans = guard_spans(harness)
    assert [list(s.attributes["ctxguard.violations"]) for s in spans] == [["system_at_head"], []]
    assert [s.attributes["ctxguard.wire.hash"] for s in spans] == [
        Digester(KEY).bytes(r.body) for r in llm.requests]


def drop_system_instruction(request) -> None:
    """A transport hook that loses the system instruction after the SDK built the body."""
    body = json.loads(request.content)
    body.pop("systemInstruction")
    replace_body(request, body)


def test_instruction_dropped_below_the_sdk_fails_wire_intact(harness, llm):
    harness.start(mode="enforce")  # judged after sending: recorded, never blocking
    with http.Client(event_hooks={"request": [drop_system_instruction]}) as transport:
        client = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url,
                                                         "httpx_client": transport})
        client.models.generate_content(model=MODEL, contents="hi", config={"system_instruction": SYSTEM})
    assert "systemInstruction" not in llm.bodies()[0]
    assert list(only_guard_span(harness).attributes["ctxguard.violations"]) == ["wire_intact"]
    assert harness.metric("ctxguard_violations_total", check="wire_intact", provider="gcp.gemini") == 1


def test_sdk_errors_pass_through(harness, llm, gemini):
    harness.start(mode="observe")
    llm.script(Reply(status=429, text="slow down"))
    with pytest.raises(errors.ClientError) as info:
        gemini.models.generate_content(model=MODEL, contents="hi", config={"system_instruction": SYSTEM})
    assert info.value.code == 429
    assert only_guard_span(harness).attributes["error.type"] == "ClientError"


def test_bad_input_never_crashes(harness, llm, gemini):
    harness.start(mode="observe")
    with pytest.raises(ValueError, match="contents"):
        gemini.models.generate_content(model=MODEL, contents=[], config={"system_instruction": SYSTEM})
    assert list(guard_spans(harness)[-1].attributes["ctxguard.message.roles"]) == ["system"]
    with pytest.raises(ValueError, match="max_output_tokens"):  # the SDK's own validation, unchanged
        gemini.models.generate_content(model=MODEL, contents="hi", config={"system_instruction": [],
                                                                            "max_output_tokens": "many"})
    a = guard_spans(harness)[-1].attributes
    assert list(a["ctxguard.violations"]) == ["system_at_head"]
    assert "gen_ai.request.max_tokens" not in a
    with pytest.raises(ValueError):  # the SDK refuses these; ctxguard read them without failing
        gemini.models.generate_content(model=MODEL, contents=[{"role": "user", "parts": [{"unknown": 1}]}, 7],
                                       config={"system_instruction": SYSTEM})
    assert list(guard_spans(harness)[-1].attributes["ctxguard.message.roles"]) == ["system", "user", "user"]
    assert llm.requests == []


def test_uninstrument_restores_identity(harness):
    originals = {(cls, name): cls.__dict__[name] for cls, name in CALL_SITES}
    harness.start(mode="observe")
    assert all(cls.__dict__[name] is not fn for (cls, name), fn in originals.items())
    ctxguard.uninstrument()
    assert all(cls.__dict__[name] is fn for (cls, name), fn in originals.items())


def test_instrument_before_importing_google_genai():
    with FakeLLM() as llm:
        script = textwrap.dedent(f"""
            import sys
            import ctxguard
            from prometheus_client import CollectorRegistry
            registry = CollectorRegistry()
            ctxguard.instrument(registry=registry, digest_key="k")
            assert "google.genai" not in sys.modules and "litellm" not in sys.modules
            from google import genai
            client = genai.Client(api_key="x", http_options={{"base_url": "{llm.gemini_base_url}"}})
            client.models.generate_content(model="gemini-2.5-flash", contents="hi")
            print(registry.get_sample_value("ctxguard_violations_total",
                                            {{"check": "system_at_head", "provider": "gcp.gemini"}}))
        """)
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.0"


def test_unsupported_version_logs_one_warning_and_is_left_untouched(harness, monkeypatch, caplog):
    from ctxguard import intercept

    monkeypatch.setattr(intercept, "_major", lambda distribution: 9 if distribution == "google-genai" else 1)
    originals = {(cls, name): cls.__dict__[name] for cls, name in CALL_SITES}
    with caplog.at_level("WARNING", logger="ctxguard"):
        harness.start(mode="observe", providers=["google-genai"])
    assert all(cls.__dict__[name] is fn for (cls, name), fn in originals.items())
    warnings = [r for r in caplog.records if "google-genai" in r.getMessage()]
    assert len(warnings) == 1 and "not supported" in warnings[0].getMessage()


def test_a_stream_broken_off_and_dropped_still_ends_its_span(harness, llm, gemini):
    harness.start(mode="observe")
    llm.script("word " * 1000)
    stream = gemini.models.generate_content_stream(model=MODEL, contents="where?",
                                                   config={"system_instruction": SYSTEM})
    for _ in stream:
        break
    assert guard_spans(harness) == []
    del stream
    gc.collect()
    a = only_guard_span(harness).attributes
    assert a["ctxguard.stream.abandoned"] is True
    assert harness.metric("ctxguard_checks_total", check="answer_consistent", outcome="skip") == 1
    assert harness.metric("ctxguard_guard_duration_seconds_count") == 1


@pytest.mark.asyncio
async def test_the_async_client_over_aiohttp_has_its_body_judged_on_the_wire(harness, llm):
    """With aiohttp installed the async client sends through it, not httpx: the body aiohttp
    sends is handed to the call in flight, so ``wire_intact`` is judged rather than skipped."""
    pytest.importorskip("aiohttp")
    harness.start(mode="observe")
    llm.script("one", "two")
    client = genai.Client(api_key="t", http_options={"base_url": llm.gemini_base_url})
    assert client._api_client._use_aiohttp()
    await client.aio.models.generate_content(model=MODEL, contents="hi", config={"system_instruction": SYSTEM})
    stream = await client.aio.models.generate_content_stream(model=MODEL, contents="hi",
                                                             config={"system_instruction": SYSTEM})
    assert "".join([c.text async for c in stream]) == "two"
    spans = guard_spans(harness)
    assert [s.attributes.get("ctxguard.guarded_at") for s in spans] == [None, None]  # at the call site
    assert [s.attributes["ctxguard.wire.hash"] for s in spans] == [Digester(KEY).bytes(r.body) for r in llm.requests]
    assert harness.metric("ctxguard_checks_total", check="wire_intact", outcome="pass") == 2
