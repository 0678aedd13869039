"""What a provider module gives the guard: translation only, no decisions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..memo import Memo
from ..payload import Reply, RequestView

__all__ = ["Adapter", "StreamReader"]


class StreamReader(Protocol):
    """Accumulates a streamed answer chunk by chunk."""

    def feed(self, chunk: Any) -> None: ...

    def reply(self) -> Reply: ...


class Adapter(Protocol):
    provider: str

    def normalise(self, operation: str, kwargs: Mapping[str, Any], memo: Memo | None = None) -> RequestView:
        """``memo``: the conversation's previous call, to skip what is unchanged (see ``ctxguard.memo``)."""
        ...

    def read_response(self, operation: str, result: Any) -> Reply | None: ...

    def stream_reader(self, operation: str) -> StreamReader: ...
