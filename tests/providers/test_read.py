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
