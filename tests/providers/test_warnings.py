"""A warning the SDK raises points at the app's line under ctxguard, as it does without it, so
the app's warning filters (keyed on its own module) behave the same."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import FrameType, FunctionType

import anthropic
import openai
import pytest
import wrapt

from ctxguard.intercept import frames

MODEL = "claude-mythos-preview"  # deprecated in every supported anthropic major: the SDK warns
ROOT = Path(__file__).resolve().parent.parent.parent
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
        "through the class": lambda: anthropic.resources.Messages.create(claude.messages, **REQUEST),
    }


@pytest.mark.parametrize("path", ["create", "stream=True", "stream helper", "raw", "through the class"])
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


def test_without_wrapts_c_extension_its_python_frames_are_left_out_too():
    """wrapt without its C extension (``WRAPT_DISABLE_EXTENSIONS=1``, or no wheel for the platform)
    calls a bound method's wrapper through Python frames of its own."""
    tests = [f"{__file__}::{name}" for name in (
        "test_wrapt_runs_without_its_c_extension_here",
        "test_sdk_warnings_point_where_they_would_without_ctxguard",
        "test_a_filter_keyed_on_the_apps_module_still_matches",
        "test_an_apps_warning_from_inside_an_sdk_call_lands_where_it_would_without_ctxguard",
    )]
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
                         cwd=ROOT, env={**os.environ, "WRAPT_DISABLE_EXTENSIONS": "1"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.skipif(os.environ.get("WRAPT_DISABLE_EXTENSIONS") != "1", reason="the test above runs it")
def test_wrapt_runs_without_its_c_extension_here():
    assert isinstance(wrapt.BoundFunctionWrapper.__call__, FunctionType)


# -- the app's own warnings: every form warnings.warn takes ----------------------------------


class _ModuleSpy:
    """A filter's module pattern that never matches and notes what it was asked: the module each
    warning is attributed to, as the app's ``filterwarnings(module=...)`` sees it."""

    def __init__(self) -> None:
        self.modules: list[str] = []

    def match(self, module: str) -> bool:
        self.modules.append(module)
        return False


def _attributed(call) -> list[tuple[str, str, int, str]]:
    """Each warning ``call`` raises: (message, filename, line, module as filters see it)."""
    spy = _ModuleSpy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filters.insert(0, ("error", None, Warning, spy, 0))
        call()
    return [(str(w.message), w.filename, w.lineno, module) for w, module in zip(caught, spy.modules, strict=True)]


def _same_without_and_with_ctxguard(harness, call) -> list[tuple[str, str, int, str]]:
    runs = []
    for instrumented in (False, True):
        if instrumented:
            harness.start(mode="observe")
        runs.append(_attributed(call))  # both from this line: a level may reach it
    assert runs[1] == runs[0]
    return runs[0]


def _app_warns(*args, **kwargs) -> None:
    """The app's code: the frame a warning's stacklevel counts from."""
    warnings.warn("from the app", UserWarning, *args, **kwargs)


def _levels_to_the_top() -> int:
    """The stacklevel, counted by its caller's ``warn``, of the outermost frame."""
    frame, level = sys._getframe(1), 0
    while frame is not None:
        frame, level = frame.f_back, level + 1
    return level


STACKLEVELS = {
    "default": ((), {}),
    "0": ((), {"stacklevel": 0}),
    "1": ((), {"stacklevel": 1}),
    "True": ((), {"stacklevel": True}),
    "-3": ((), {"stacklevel": -3}),
    "2": ((), {"stacklevel": 2}),
    "3": ((), {"stacklevel": 3}),
    "far past the top": ((), {"stacklevel": 10_000}),
    "0 positional": ((0,), {}),
    "True positional": ((True,), {}),
    "2 positional": ((2,), {}),
    "-3 positional, with source": ((-3, None), {}),
}


@pytest.mark.parametrize("form", list(STACKLEVELS))
def test_the_apps_warning_lands_where_it_would_without_ctxguard_at_every_stacklevel(harness, form):
    args, kwargs = STACKLEVELS[form]
    landed = _same_without_and_with_ctxguard(harness, lambda: _app_warns(*args, **kwargs))
    assert len(landed) == 1


@pytest.mark.parametrize("beyond", [0, 1], ids=["the outermost frame", "one past it"])
def test_a_stacklevel_at_or_just_past_the_top_of_the_stack(harness, beyond):
    def warn() -> None:
        warnings.warn("at the top", UserWarning, stacklevel=_levels_to_the_top() + beyond)

    [(_, filename, _, _)] = _same_without_and_with_ctxguard(harness, warn)
    assert (filename == "sys" or filename == "<sys>") == (beyond == 1)  # "<sys>" from 3.13


@pytest.mark.parametrize("stacklevel", ["2", 1.5, None, 2**64], ids=["str", "float", "None", "too big for C"])
def test_a_stacklevel_warn_refuses_raises_the_same_error(harness, stacklevel):
    def raised() -> tuple[type, str]:
        with pytest.raises(Exception) as info:
            _app_warns(stacklevel=stacklevel)
        return type(info.value), str(info.value)

    plain = raised()
    harness.start(mode="observe")
    assert raised() == plain


@pytest.mark.parametrize("stacklevel", [0, True, -3, 1, 2])
def test_a_filter_on_the_apps_module_turns_its_own_warning_into_an_error(harness, stacklevel):
    harness.start(mode="observe")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=UserWarning, module=re.escape(__name__) + r"\Z")
        with pytest.raises(UserWarning, match="from the app"):
            _app_warns(stacklevel=stacklevel)


needs_skip_file_prefixes = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="warnings.warn takes skip_file_prefixes from Python 3.12")


@needs_skip_file_prefixes
@pytest.mark.parametrize("stacklevel", [1, 2, 3])
@pytest.mark.parametrize("prefix", ["file", "file short of its last character", "directory"])
def test_skip_file_prefixes_lands_where_it_would_without_ctxguard(harness, prefix, stacklevel):
    prefixes = {"file": (__file__,), "file short of its last character": (__file__[:-1],),
                "directory": (os.path.dirname(__file__),)}[prefix]
    _same_without_and_with_ctxguard(harness, lambda: _app_warns(stacklevel, skip_file_prefixes=prefixes))


# -- from inside an instrumented SDK call ----------------------------------------------------------


def test_an_apps_warning_from_inside_an_sdk_call_lands_where_it_would_without_ctxguard(harness, llm):
    """The app's transport hook warns at every level up through the SDK's frames and ctxguard's
    (its call-site wrapper, its transport tap) to past the top of the stack. (openai: anthropic's
    own tracing takes another path through the SDK while ctxguard's span is current.)"""
    levels: list[object] = []

    def hook(request) -> None:
        if not levels:  # counted once, without ctxguard: the same warnings in both runs
            levels.extend([0, True, -3, *range(1, _levels_to_the_top() + 2)])
        for level in levels:
            warnings.warn(f"stacklevel={level!r}", UserWarning, stacklevel=level)
        if sys.version_info >= (3, 12):
            for prefix in (os.path.dirname(openai.__file__), os.path.dirname(os.__file__)):
                for level in (1, 2, 3):
                    warnings.warn(f"{prefix} {level}", UserWarning, stacklevel=level, skip_file_prefixes=(prefix,))

    http = openai.DefaultHttpxClient(event_hooks={"request": [hook]})
    with openai.OpenAI(base_url=llm.base_url, api_key="t", max_retries=0, http_client=http) as client:
        landed = _same_without_and_with_ctxguard(harness, lambda: client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]))
    assert len(llm.requests) == 2
    assert (__file__, __name__) in {(filename, module) for _, filename, _, module in landed}


# -- the reading of CPython's warn, frame by frame ------------------------------------------------
# frames._attributed is CPython's choice of frame restated; these hold it to CPython's own on
# every level (importlib's bootstrap frames included), and to skip_file_prefixes' rules on the
# Pythons that do not have them.


def _relay(relays, then):
    return relays[0](relays[1:], then) if relays else then()


def _through(filenames: list[str], then):
    """``then()``, called through one frame of each file of ``filenames`` (the outermost first)."""
    return _relay([_in_file(_relay, filename) for filename in filenames], then)


def _in_file(function, filename: str):
    """``function`` as if it were written in ``filename``."""
    return FunctionType(function.__code__.replace(co_filename=filename), function.__globals__)


def _stack() -> list[FrameType]:
    """The caller's frame, then its callers."""
    frame, stack = sys._getframe(1), []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    return stack


def _place(frame: FrameType | None) -> tuple[str, int] | None:
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno)


def _cpython_and_emulated(level: int) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """Where CPython's warn, called from here, attributes a warning at ``level``, and where
    ``frames._attributed`` says it does (None: past the top of the stack)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        emulated = warnings.warn("w", UserWarning, level), _place(frames._attributed(_stack(), level, (), None))
    [w] = caught
    return (None if w.filename in ("sys", "<sys>") else (w.filename, w.lineno)), emulated[1]


@pytest.mark.parametrize("caller", ["app", "importlib's bootstrap"])
def test_the_frame_warn_picks_is_read_as_cpython_picks_it_at_every_level(caller):
    caller_file = "/x/importlib/_bootstrap_caller.py" if caller != "app" else "/x/app/caller.py"
    warn_here = _in_file(_cpython_and_emulated, caller_file)
    files = ["/x/app/main.py", "/x/importlib/_bootstrap_outer.py", "/x/lib/lib.py", "/x/importlib/_bootstrap.py"]
    for level in [*range(-2, 3 * len(_stack())), sys.maxsize]:
        cpython, emulated = _through(files, lambda level=level: warn_here(level))
        assert emulated == cpython, level


def test_skip_file_prefixes_pass_over_the_frames_of_the_files_they_name():
    stack: list[FrameType] = []
    _through(["/x/app/main.py", "/x/lib/outer.py", "/x/lib/inner.py"], lambda: stack.extend(_stack()))
    [then, inner, outer, main, above] = stack[:5]
    lib = ("/x/lib",)

    def attributed(level, prefixes, end=None):
        return frames._attributed(stack, level, prefixes, end)

    assert [attributed(level, lib) for level in (-1, 0, 1, 2, 3)] == [main, main, main, main, above]  # at least 2
    assert attributed(2, ("/x/lib/inner",)) is outer  # a prefix of a filename, not a directory
    assert attributed(2, ("/x/lib/inner.py", "/x/lib/outer.py")) is main
    assert attributed(2, ("/x/lib/inner.py", "/x/lib/outer.py"), end=-1) is inner  # gh-126209: not a whole name
    assert attributed(2, ("/x/lib/inner.p", "/x/lib/outer.p"), end=-1) is main
    assert attributed(1, ()) is then and attributed(0, ()) is then  # no prefixes: no least level
