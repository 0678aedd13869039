"""Shared fixtures. Swallowed in production, fatal in tests: every internal error
that ctxguard swallows fails the test that caused it, unless the test declares
it expects some (``internal_errors`` fixture, then drains the list)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import ctxguard
from ctxguard import _isolation


@pytest.fixture
def internal_errors() -> list[tuple[str, BaseException]]:
    """Errors swallowed during this test; a test that expects some empties the list."""
    return []


@pytest.fixture(autouse=True)
def _fail_on_swallowed_errors(internal_errors: list[tuple[str, BaseException]]) -> Iterator[None]:
    def hook(where: str, exc: BaseException) -> None:
        internal_errors.append((where, exc))

    _isolation.add_error_hook(hook)
    try:
        yield
    finally:
        _isolation.remove_error_hook(hook)
        ctxguard.uninstrument()
    if internal_errors:
        where, exc = internal_errors[0]
        raise AssertionError(f"ctxguard swallowed an internal error in {where!r}: {exc!r}") from exc
