"""Reading SDK arguments (ctxguard/providers/_read.py): string parts of a content list, Mappings and proxies."""

from __future__ import annotations


def test_string_parts_of_a_content_list_are_read_in_order():
    from ctxguard.providers import anthropic as anthropic_provider
    from ctxguard.providers import openai as openai_provider

    content = ["Ship to Lyon", {"type": "text", "text": "please"}, "today"]
    chat = openai_provider.ADAPTER.normalise("chat.completions", {"model": "gpt-4o", "messages": [
        {"role": "user", "content": content}]})
    claude = anthropic_provider.ADAPTER.normalise("messages", {"model": "claude-sonnet-4-20250514", "max_tokens": 5,
                                                               "messages": [{"role": "user", "content": content}]})
    assert [i[:2] for i in chat.items] == [("user", "Ship to Lyon\nplease\ntoday")]
    assert [i[:2] for i in claude.items] == [("user", "Ship to Lyon\nplease\ntoday")]


def test_mappings_and_proxies_of_dicts_read_like_dicts():
    """Messages and arguments may be any Mapping, or a proxy (wrapt) around a dict: the reader's
    per-type cache must not take a proxy's type for the type of what it proxies."""
    from collections.abc import Iterator, Mapping
    from types import SimpleNamespace
    from typing import Any

    import wrapt

    from ctxguard.providers import openai as openai_provider

    class Frozen(Mapping[str, Any]):
        def __init__(self, **items: Any) -> None:
            self._items = items

        def __getitem__(self, key: str) -> Any:
            return self._items[key]

        def __iter__(self) -> Iterator[str]:
            return iter(self._items)

        def __len__(self) -> int:
            return len(self._items)

    messages = [
        Frozen(role="system", content="Be brief."),
        wrapt.ObjectProxy({"role": "user", "content": "Ship to Lyon", "name": "ann"}),
        wrapt.ObjectProxy({"role": "user", "content": "again"}),
        wrapt.ObjectProxy(SimpleNamespace(role="assistant", content="ok")),  # same proxy type, no Mapping
    ]
    for _ in range(2):  # the second time through, from the per-type cache
        view = openai_provider.ADAPTER.normalise(
            "chat.completions", wrapt.ObjectProxy({"model": "gpt-4o", "messages": messages}))
        assert view.model == "gpt-4o"
        assert [i[:3] for i in view.items] == [
            ("system", "Be brief.", ()), ("user", "Ship to Lyon", ("id:name=ann",)), ("user", "again", ()),
            ("assistant", "ok", ())]


def _tool(**parameters: object) -> dict[str, object]:
    return {"type": "function", "function": {"name": "lookup_order", "description": "Look an order up.",
                                             "parameters": {"type": "object", "properties": {
                                                 "order_id": {"type": "string"}}, **parameters}}}


def test_tools_sent_again_are_read_once_and_each_call_gets_its_own_list(monkeypatch):
    """Apps resend the same tools on every call: their reading is cached by value (``exact_key``),
    so ``canonical`` does not run again; each view still gets a list of its own (a response format
    is appended to it), and a schema edited in place is read again."""
    from ctxguard.providers import _read
    from ctxguard.providers import anthropic as anthropic_provider
    from ctxguard.providers import openai as openai_provider

    tools = [_tool(required=["order_id"]), {"type": "web_search"}]
    calls: list[object] = []
    real = _read.canonical

    def counted(obj: object) -> str:
        calls.append(obj)
        return real(obj)

    monkeypatch.setattr(_read, "canonical", counted)
    monkeypatch.setattr(openai_provider, "canonical", counted)

    def read(**kwargs: object) -> list[str]:
        return openai_provider.ADAPTER.normalise("chat.completions", {
            "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": tools, **kwargs}).tools

    first = read(response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}})
    assert len(first) == 4  # the function, the built-in tool, the functions frame, the format
    read_first = len(calls)
    assert read() == first[:3] and len(calls) == read_first  # read again: no canonical JSON at all
    tools[0]["function"]["description"] = "Look an order up by its id."  # type: ignore[index]
    edited = read()
    assert len(calls) > read_first and "by its id" in edited[0]
    claude = [{"name": "lookup_order", "input_schema": {"type": "object"}}]
    before = len(calls)
    for _ in range(3):
        view = anthropic_provider.ADAPTER.normalise("messages", {
            "model": "claude-sonnet-4-20250514", "max_tokens": 5, "tools": claude,
            "messages": [{"role": "user", "content": "hi"}]})
    assert len(calls) == before + 1 and view.tools == [real(claude[0])]


def test_the_same_tools_read_by_two_providers_read_as_each_reads_them():
    """One app sending the same tools to OpenAI and to Anthropic (LiteLLM, a fallback chain): each
    provider's reading is its own (OpenAI's TypeScript rendering, Anthropic's canonical JSON),
    whichever read them first."""
    from ctxguard.providers import anthropic as anthropic_provider
    from ctxguard.providers import openai as openai_provider
    from ctxguard.providers._read import canonical

    def claude(tools: object) -> list[str]:
        return anthropic_provider.ADAPTER.normalise("messages", {
            "model": "claude-sonnet-4-20250514", "max_tokens": 5, "tools": tools,
            "messages": [{"role": "user", "content": "hi"}]}).tools

    def gpt(tools: object) -> list[str]:
        return openai_provider.ADAPTER.normalise("chat.completions", {
            "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": tools}).tools

    for first in (gpt, claude):
        tools = [{"name": f"lookup_{first.__name__}", "description": "Look up.", "type": "function"}]
        first(tools)
        assert claude(tools) == [canonical(tools[0])]
        assert gpt(tools)[0] == f"// Look up.\ntype lookup_{first.__name__} = () => any;"


def test_tools_that_compare_equal_but_read_differently_are_read_apart():
    """``True == 1 == 1.0`` and ``[1] == (1,)`` for ``==``, not for ``exact_key``: a cached reading is
    reused only for a value that reads the same."""
    from ctxguard.providers import anthropic as anthropic_provider
    from ctxguard.providers._read import exact_key

    def read(flag: object) -> list[str]:
        return anthropic_provider.ADAPTER.normalise("messages", {
            "model": "claude-sonnet-4-20250514", "max_tokens": 5,
            "tools": [{"name": "t", "input_schema": {"type": "object", "additionalProperties": flag}}],
            "messages": [{"role": "user", "content": "hi"}]}).tools

    flags = (True, 1, 1.0, False, 0)
    texts = [read(flag)[0] for flag in flags]  # (not a dict by flag: True, 1 and 1.0 are one key)
    assert [read(flag)[0] for flag in flags] == texts  # read again, from the cache
    assert len(set(texts)) == 5 and '"additionalProperties": true,' in texts[0]
    assert exact_key([1]) != exact_key((1,)) and exact_key({"a": 1}) != exact_key({"a": True})


def test_tools_that_are_not_plain_values_are_read_every_time_and_read_right():
    """A pydantic tool, or a str subclass inside one, has no ``exact_key``: no code of the app's runs
    to make a key, and the tool is read as before, on every call."""
    from pydantic import BaseModel

    from ctxguard.providers import openai as openai_provider
    from ctxguard.providers._read import exact_key

    class Name(str):
        pass

    class Function(BaseModel):
        name: str
        description: str

    plain = {"type": "function", "function": {"name": "lookup", "description": "Look up."}}
    odd = [{"type": "function", "function": {"name": Name("lookup"), "description": "Look up."}}]
    modelled = [{"type": "function", "function": Function(name="lookup", description="Look up.")}]
    assert exact_key(odd) is None and exact_key(modelled) is None

    def read(tools: object) -> list[str]:
        return openai_provider.ADAPTER.normalise("chat.completions", {
            "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "tools": tools}).tools

    expected = read([plain])
    assert read(odd) == expected and read(modelled) == expected and read(odd) == expected


def test_the_per_type_mapping_memo_is_bounded_and_right():
    """Whether a type is a Mapping is remembered per type (``_read._is_mapping``), at most its cap."""
    from collections import UserDict
    from typing import Any

    from ctxguard.providers import _read

    classes: list[type[Any]] = [type(f"Response{i}", (), {}) for i in range(1100)]
    assert not any(_read._is_mapping[cls] for cls in classes)
    assert 0 < len(_read._is_mapping) <= 1024
    assert _read._is_mapping[UserDict] and _read.get(UserDict({"model": "m"}), "model") == "m"
    assert _read.fields(classes[0](), "model") == [None]
