"""ctxguard's frames are invisible to warnings: a warning the SDK raises points where it would
without ctxguard.

An SDK warns with a fixed ``stacklevel`` (anthropic: ``stacklevel=3`` for a deprecated model,
counting its own two frames and the caller's), so every frame ctxguard puts between the app
and the SDK would move the warning onto ctxguard's line, and the app's warning filters keyed
on its own module would stop matching. While instrumented, ``warnings.warn`` is wrapped: it
walks the requested number of frames up skipping the frames of the functions marked
``transparent`` here (the call-site wrappers, stream proxies, taps) and warns at the frame it
reaches, which is the frame the warning would have reached without them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType, FunctionType
from typing import Any, TypeVar

import wrapt

__all__ = ["transparent", "warn_through"]

F = TypeVar("F", bound=Callable[..., Any])

#: The code of every ctxguard function that runs between the app and the SDK.
_CODES: set[CodeType] = set()

for _base in wrapt.FunctionWrapper.__mro__:  # wrapt without its C extension calls through Python frames
    _call = vars(_base).get("__call__")
    if isinstance(_call, FunctionType):
        _CODES.add(_call.__code__)


def transparent(function: F) -> F:
    """Mark ``function`` as one whose frame a warning's ``stacklevel`` does not count."""
    _CODES.add(function.__code__)
    return function


def _arguments(
    message: Any, category: Any = None, stacklevel: Any = 1, source: Any = None, **rest: Any
) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    return message, category, stacklevel, source, rest


def warn_through(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
    """The wrapper of ``warnings.warn``."""
    try:
        message, category, level, source, rest = _arguments(*args, **kwargs)
        if type(level) is not int or level < 1 or rest.get("skip_file_prefixes"):
            return wrapped(*args, **kwargs)
        frame = sys._getframe(0)  # this frame: level 1 of the warning we raise below
        distance = 0
        for _ in range(level):  # the caller of warn, then level - 1 more, none of them ours
            frame = frame.f_back  # type: ignore[assignment]
            distance += 1
            while frame is not None and frame.f_code in _CODES:
                frame = frame.f_back  # type: ignore[assignment]
                distance += 1
            if frame is None:
                return wrapped(*args, **kwargs)  # past the top of the stack: the SDK's own affair
    except Exception:
        return wrapped(*args, **kwargs)
    return wrapped(message, category, distance + 1, source, **rest)
