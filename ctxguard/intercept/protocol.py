"""What the interception machinery and the call lifecycle say to each other.

``ctxguard.intercept`` finds calls (call sites, the transport, answers as they are read)
and tells the call what happened through ``Observed``; it never inspects or records.
The lifecycle (``ctxguard.call.Call``) implements ``Observed``; the guard, which starts
calls, implements ``CallStarter``. Neither side imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..payload import Answer
from ..providers.base import Provider
from .observation import How

__all__ = ["CallStarter", "Observed"]


class Observed(Protocol):
    """One guarded call, as the interception machinery sees it."""

    #: Seconds of ctxguard's own work on this call (the machinery adds its share).
    elapsed: float
    #: perf_counter() when the answer's first piece arrived (``Observation`` sets it).
    first_chunk: float | None

    @property
    def done(self) -> bool:
        """The call has ended (its span too)."""

    @property
    def provider(self) -> Provider:
        """The provider whose call site started it."""

    @property
    def label(self) -> str:
        """The ``provider`` label of the call (a router's route)."""

    @property
    def streamed(self) -> bool:
        """The request asked for a streamed answer."""

    @property
    def wire_hash(self) -> str | None:
        """The keyed digest of the body the transport sent, once it has (None until then)."""

    def sent(self) -> None:
        """The SDK call returned: ctxguard's span stops being current."""

    def wire(self, body: object) -> None:
        """The transport is sending ``body`` for this call."""

    def from_wire(self, body: bytes, beneath: Any) -> None:
        """This call is guarded from the wire: ``body`` is its request; ``beneath`` the span current then."""

    def provider_said(self, reply: Answer) -> None:
        """The provider's own answer, read off the transport under a delegating call."""

    def end(
        self, how: How, reply: Answer | None = None, *, error: BaseException | None = None, status: int | None = None,
        started: float | None = None,
    ) -> None:
        """The call ended: ``complete``, ``failed`` (``error``), ``abandoned`` by the app, ``refused``
        by the server (``status``); ``reply`` is what it answered, if anything (``observation.How``)."""


class CallStarter(Protocol):
    """Starts calls: the active guard."""

    def before(
        self, provider: Provider, api: str, kwargs: Mapping[str, Any], over: Any = None, *, may_block: bool = True,
        instance: Any = None,
    ) -> Observed | None:
        """Inspect a request about to be sent; None if ctxguard could not (the call goes through)."""
        ...
