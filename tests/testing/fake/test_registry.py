"""The registry (ctxguard/testing/fake/registry.py): every wire format listed once, and every route
answered by one format at most, so the table's order never decides who answers."""

from __future__ import annotations

from ctxguard.testing.fake.registry import FORMATS, UNKNOWN_ROUTE, answering

ROUTES = {
    "openai.chat": ["/v1/chat/completions", "/openai/deployments/gpt/chat/completions", "/mistralx/chat/completions"],
    "openai.responses": ["/v1/responses"],
    "anthropic.messages": ["/v1/messages"],
    "gemini.generate_content": ["/v1beta/models/gemini-2.5-flash:generateContent",
                                "/v1beta/models/gemini-2.5-flash:streamGenerateContent"],
    "mistral.chat": ["/mistral/v1/chat/completions", "/mistral/chat/completions"],
    "ollama.chat": ["/api/chat"],
    "cohere.chat": ["/v2/chat"],
    "bedrock.converse": ["/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse", "/model/m/converse-stream"],
    "bedrock.invoke_model": ["/model/m/invoke", "/model/m/invoke-with-response-stream"],
}


def test_every_format_is_listed_once_and_alone_answers_its_routes() -> None:
    assert [f.name for f in FORMATS] == list(ROUTES)
    for fmt in FORMATS:
        for route in ROUTES[fmt.name]:
            assert [f.name for f in FORMATS if f.path.fullmatch(route)] == [fmt.name], route
            assert answering(route) is fmt


def test_a_route_no_format_knows_is_answered_as_openai_answers_one() -> None:
    for route in ("/v1/embeddings", "/v1beta/models/g:countTokens", "/model/a/b/converse", "/model/m/count-tokens"):
        assert answering(route) is None
    assert UNKNOWN_ROUTE.name == "openai.chat"
