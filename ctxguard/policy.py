"""What the checks demand. Immutable: swap ``guard.policy`` to change it at run time."""

from __future__ import annotations

from dataclasses import dataclass

from .budget import Budget

__all__ = ["Pinned", "Policy"]


@dataclass(frozen=True)
class Pinned:
    """The pinned facts block: the message whose text contains ``marker``, capped.

    >>> Pinned(marker="Pinned facts", max_tokens=400).required
    True
    """

    marker: str = "Pinned facts"
    max_tokens: int = 800
    max_entries: int | None = None
    required: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.marker, str) or not self.marker.strip():
            raise ValueError("Pinned.marker must be a non-empty string")
        if not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise ValueError("Pinned.max_tokens must be a positive int")
        if self.max_entries is not None and (not isinstance(self.max_entries, int) or self.max_entries < 0):
            raise ValueError("Pinned.max_entries must be a non-negative int or None")


@dataclass(frozen=True)
class Policy:
    """What every check demands of a call; the defaults check the head and the window.

    >>> policy = Policy(pinned=Pinned(max_tokens=400), budget=Budget(reserved_output=2000))
    >>> policy.system_at_head, policy.pinned.max_tokens, policy.budget.reserved_output
    (True, 400, 2000)

    ``budget=None`` still checks the payload against the model's window, with
    every term derived from the request. A mistake raises where the policy is written:

    >>> Policy(budget=2000)
    Traceback (most recent call last):
    ...
    TypeError: Policy.budget must be a Budget or None
    """

    system_at_head: bool = True
    pinned: Pinned | None = None
    budget: Budget | None = None
    require_facts: bool = True

    def __post_init__(self) -> None:
        if self.pinned is not None and not isinstance(self.pinned, Pinned):
            raise TypeError("Policy.pinned must be a Pinned or None")
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise TypeError("Policy.budget must be a Budget or None")
