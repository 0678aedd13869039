"""ctxguard's frames are invisible to warnings: a warning points where it would without ctxguard.

An SDK warns with a fixed ``stacklevel`` (anthropic: ``stacklevel=3`` for a deprecated model,
counting its own two frames and the caller's), so every frame ctxguard puts between the app
and the SDK would move the warning onto ctxguard's line, and the app's warning filters keyed
on its own module would stop matching. While instrumented, ``warnings.warn`` is wrapped, and the
wrapper is one more such frame: whatever the app asks for (any ``stacklevel``, 0 and below,
``True``, past the top of the stack; ``skip_file_prefixes``) would otherwise be counted from
ctxguard's line. So the wrapper finds the frame CPython's ``warn`` would pick on the stack as it
is without ctxguard (the frames of the functions marked ``transparent`` here, and wrapt's, left
out), and calls the real ``warn`` with the stacklevel that reaches that very frame from the
wrapper. Arguments ``warn`` refuses go to it as the app gave them: it raises its own error.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import sys
from collections.abc import Callable
from types import CodeType, FrameType, FunctionType
from typing import Any, TypeVar

import wrapt

from .._isolation import report_internal_error

__all__ = ["transparent", "warn_through"]

F = TypeVar("F", bound=Callable[..., Any])

#: The code of every ctxguard function that runs between the app and the SDK, and of wrapt's
#: calls into them when wrapt runs without its C extension (a method's wrapper, bound to its
#: instance or called through the class): Python frames too then. Module-level, filled as
#: ctxguard's modules are imported (``transparent``), and never changed after: the code objects
#: are the modules' own, whichever installation runs them.
_CODES: set[CodeType] = {
    call.__code__
    for kind in (wrapt.FunctionWrapper, wrapt.BoundFunctionWrapper, wrapt.PartialCallableObjectProxy)
    for base in kind.__mro__
    if isinstance(call := vars(base).get("__call__"), FunctionType)
}


def transparent(function: F) -> F:
    """Mark ``function``, and every function defined inside it, as one whose frame a warning's
    ``stacklevel`` does not count. On a factory (a wrapper's, a tap class's), at import: the
    functions it makes at run time share the code objects marked here."""
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        _CODES.add(code)
        codes.extend(const for const in code.co_consts if isinstance(const, CodeType))
    return function


_NOT_GIVEN: Any = object()


def _arguments(
    message: Any, category: Any = None, stacklevel: Any = 1, source: Any = None, *, skip_file_prefixes: Any = _NOT_GIVEN
) -> tuple[Any, Any, Any, Any, Any]:
    return message, category, stacklevel, source, skip_file_prefixes


def warn_through(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``warnings.warn``: the real ``warn``, called with the stacklevel that lands the
    warning from here where it would land without ctxguard."""
    try:
        message, category, stacklevel, source, prefixes = _arguments(*args, **kwargs)
        level = operator.index(stacklevel)  # as warn reads it: True is 1
    except Exception:
        return wrapped(*args, **kwargs)  # warn refuses these arguments: it raises its own error
    if _refused(level, prefixes):
        return wrapped(*args, **kwargs)
    try:
        reach = _stacklevel_from_here(sys._getframe(1), level, () if prefixes is _NOT_GIVEN else prefixes, wrapped)
    except Exception as exc:
        report_internal_error("warnings", exc)
        return wrapped(*args, **kwargs)  # the warning still goes out, counted from this line
    given = {} if prefixes is _NOT_GIVEN else {"skip_file_prefixes": prefixes}
    return wrapped(message, category, reach, source, **given)


def _refused(level: int, prefixes: Any) -> bool:
    """Whether ``warn`` raises for this level or these prefixes, whatever the stack."""
    if not -sys.maxsize - 1 <= level <= sys.maxsize:  # not a C ssize_t
        return True
    if prefixes is _NOT_GIVEN:
        return False
    return sys.version_info < (3, 12) or not (isinstance(prefixes, tuple) and all(isinstance(p, str) for p in prefixes))


def _stacklevel_from_here(caller: FrameType | None, level: int, prefixes: tuple[str, ...], warn: Any) -> int:
    """The stacklevel that makes ``warn``, called by ``warn_through``, attribute the warning to the
    frame it would attribute it to if ``caller`` called it without ctxguard's frames in the stack."""
    stack = []
    while caller is not None:
        stack.append(caller)
        caller = caller.f_back
    end = _prefix_end(warn) if prefixes else None
    target = _attributed([f for f in stack if f.f_code not in _CODES], level, prefixes, end)
    reach = 1  # warn_through's own frame
    found = False
    for frame in stack:
        found = found or frame is target
        if not _passed_over(frame, prefixes, end):
            reach += 1
            if found:
                # The target itself, or, if warn passes over it (importlib's bootstrap or a skipped
                # file, reached by a level counted straight up from a caller in the bootstrap), the
                # nearest frame above it that warn counts: called from here, warn cannot land there.
                return reach
    return reach + 1  # the target is past the top of the stack: so is this


def _attributed(
    stack: list[FrameType], level: int, prefixes: tuple[str, ...], end: int | None
) -> FrameType | None:
    """The frame of ``stack`` (``warn``'s caller first, then its callers) that CPython's ``warn``
    attributes a warning to; None past the top of the stack (it says "sys").

    ``setup_context`` in Python/_warnings.c, the same from 3.10 to 3.13 but for the prefixes (3.12):
    a level of 0 or below, or a caller in importlib's bootstrap, counts ``level - 1`` frames straight
    up; any other level counts only the frames it does not pass over; non-empty
    ``skip_file_prefixes`` make the level at least 2."""
    if prefixes:
        level = max(level, 2)
    straight = level <= 0 or (bool(stack) and _is_internal(stack[0]))
    index = 0
    while level > 1 and index < len(stack):
        index += 1
        while not straight and index < len(stack) and _passed_over(stack[index], prefixes, end):
            index += 1
        level -= 1
    return stack[index] if index < len(stack) else None


def _is_internal(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


def _passed_over(frame: FrameType, prefixes: tuple[str, ...], end: int | None) -> bool:
    """Whether ``warn``'s walk up the stack passes over ``frame`` uncounted (``next_external_frame``)."""
    return _is_internal(frame) or (bool(prefixes) and frame.f_code.co_filename.startswith(prefixes, 0, end))


class _Chosen(Exception):
    """Raised as ``warn`` builds the probe's warning: after it chose the frame, before any filter."""


class _Probe(Warning):
    def __init__(self, *args: object) -> None:
        raise _Chosen


@functools.cache
def _prefix_end(warn: Callable[..., Any]) -> int | None:
    """Where ``warn`` stops reading a filename it compares with ``skip_file_prefixes``: one short of
    its end until CPython fixed gh-126209 (3.12.1 and 3.13.0 do that: a prefix that is a whole
    filename skips nothing), at its end since. Asked of ``warn`` itself, once: is a frame of a file
    named ``name``, one above the caller, passed over for the prefix ``name``?"""
    name = "<ctxguard: is a file passed over for its whole name>"
    probe_globals: dict[str, Any] = {}

    def call(function: Callable[[], object]) -> None:
        function()

    in_named_file = FunctionType(call.__code__.replace(co_filename=name), probe_globals)
    with contextlib.suppress(_Chosen):
        in_named_file(lambda: warn("", _Probe, 2, skip_file_prefixes=(name,)))
    return -1 if "__warningregistry__" in probe_globals else None
