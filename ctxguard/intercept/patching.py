"""Wrapping call sites beside other instrumentations, and undoing only what is still ours.

A call site someone else already wrapped with wrapt (OpenTelemetry's, OpenLLMetry's,
OpenLIT's ...) is wrapped too, innermost, directly around the SDK's function, so their span
is current while ctxguard runs and their ``unwrap()`` (which peels the outermost layer)
leaves ctxguard in place. A call site wrapped some other way is wrapped on top.
"""

from __future__ import annotations

from typing import Any

import wrapt

__all__ = ["Site", "unwrap", "wrap"]


class _Wrapper(wrapt.FunctionWrapper):  # type: ignore[misc,type-arg]
    """ctxguard's wrapper of one call site: its own type, so it is found in anyone's chain."""


class Site:
    """A patched attribute: ``owner.name``, and ctxguard's wrapper of it, held by ``holder``
    (None: the attribute itself; else another library's wrapt wrapper, beneath which ours sits)."""

    __slots__ = ("guarded", "holder", "name", "original", "owner")

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name = owner, name
        self.holder: Any = None
        self.original: Any = None
        self.guarded: Any = None

    def wrapped_over(self) -> Any | None:
        """The wrapper someone else put over ctxguard's here, if any (checked per call: another
        instrumentation may be installed after ctxguard)."""
        top = vars(self.owner).get(self.name)
        return None if top is self.guarded else top


def _ours(value: Any) -> bool:
    """Whether ctxguard's wrapper is in ``value``'s chain of wrappers (as it is, or bound, which is
    what another library's ``unwrap()`` may leave behind)."""
    for _ in range(32):
        if isinstance(value, _Wrapper) or isinstance(getattr(value, "_self_parent", None), _Wrapper):
            return True
        value = getattr(value, "__wrapped__", None)
        if value is None:
            return False
    return False


def wrap(owner: Any, name: str, make: Any) -> Site | None:
    """Put ``make(function)`` (a wrapt wrapper function) on ``owner.name``: beneath any wrapt
    wrappers already there, above anything else; nothing if ctxguard's is there already."""
    top = vars(owner).get(name)
    if top is None or _ours(top):
        return None
    site = Site(owner, name)
    holder, inner = None, top
    for _ in range(32):
        if not isinstance(inner, wrapt.FunctionWrapper):
            break
        holder, inner = inner, inner.__wrapped__
    site.holder, site.original = holder, inner
    site.guarded = _Wrapper(inner, make(inner, site))
    if holder is None:
        setattr(owner, name, site.guarded)
    else:
        holder.__wrapped__ = site.guarded
    return site


def unwrap(site: Site) -> None:
    """Undo ``wrap`` if the place still holds ctxguard's wrapper; else leave the chain whole."""
    if site.holder is None:
        if vars(site.owner).get(site.name) is site.guarded:
            setattr(site.owner, site.name, site.original)
    elif site.holder.__wrapped__ is site.guarded:
        site.holder.__wrapped__ = site.original
