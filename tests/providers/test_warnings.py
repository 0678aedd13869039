"""A warning the SDK raises points at the app's line under ctxguard, as it does without it, so
the app's warning filters (keyed on its own module) behave the same."""

from __future__ import annotations

import inspect
import warnings

import anthropic
import pytest

MODEL = "claude-mythos-preview"  # deprecated in every supported anthropic major: the SDK warns
REQUEST = {"model": MODEL, "max_tokens": 50, "system": "Be brief.", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def claude(llm):
    with anthropic.Anthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as c:
        yield c


def _where(call) -> list[tuple[str, int]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [(w.filename, w.lineno) for w in caught if issubclass(w.category, DeprecationWarning)]


def _paths(claude):
    def stream_helper() -> None:
        with claude.messages.stream(**REQUEST) as stream:
            stream.get_final_message()

    return {
        "create": lambda: claude.messages.create(**REQUEST),
        "stream=True": lambda: list(claude.messages.create(**REQUEST, stream=True)),
        "stream helper": stream_helper,
        "raw": lambda: claude.messages.with_raw_response.create(**REQUEST).parse(),
    }


@pytest.mark.parametrize("path", ["create", "stream=True", "stream helper", "raw"])
def test_sdk_warnings_point_where_they_would_without_ctxguard(harness, llm, claude, path):
    call = _paths(claude)[path]
    plain = _where(call)
    assert plain
    if path != "raw":  # the SDK's own stacklevel lands in this file (with_raw_response: in the SDK's wrapper)
        assert plain[0][0] == __file__
    harness.start(mode="observe")
    assert _where(call) == plain


def test_a_filter_keyed_on_the_apps_module_still_matches(harness, llm, claude):
    harness.start(mode="observe")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=DeprecationWarning, module=__name__)
        with pytest.raises(DeprecationWarning):
            claude.messages.create(**REQUEST)
    assert llm.requests == []  # the SDK raised before sending, as without ctxguard


@pytest.mark.asyncio
async def test_async_sdk_warnings_point_at_the_app(harness, llm):
    async with anthropic.AsyncAnthropic(base_url=llm.anthropic_base_url, api_key="t", max_retries=0) as claude:
        async def where() -> list[tuple[str, int]]:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                await claude.messages.create(**REQUEST)
            return [(w.filename, w.lineno) for w in caught if issubclass(w.category, DeprecationWarning)]

        seen = []
        for instrumented in (False, True):
            if instrumented:
                harness.start(mode="observe")
            seen.append(await where())  # both from this line: the SDK's stacklevel reaches it
        assert seen[0] and seen[1] == seen[0]


def test_warnings_outside_guarded_calls_are_untouched(harness):
    harness.start(mode="observe")

    def warn_from_here() -> None:
        warnings.warn("two up", UserWarning, stacklevel=2)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        warn_from_here()
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]
