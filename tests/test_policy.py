"""``Policy`` and ``Pinned`` (ctxguard/policy.py) reject mistakes at definition."""

from __future__ import annotations

import pytest

from ctxguard import Pinned, Policy


def test_policy_rejects_mistakes_at_definition():
    with pytest.raises(ValueError):
        Pinned(max_tokens=0)
    with pytest.raises(ValueError):
        Pinned(marker=" ")
    with pytest.raises(TypeError):
        Policy(budget=1000)  # type: ignore[arg-type]
