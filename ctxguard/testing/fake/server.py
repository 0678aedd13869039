"""``FakeLLM``: the loopback HTTP server. It records each request, finds the wire format answering
its route (``registry``), takes the scripted reply, and writes what the format's hooks make of it:
an error, a JSON body or a stream, failing where the reply says. It knows no API by name."""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..._nesting import MAX_NESTING, deeper_than
from .registry import ADDRESSES, SERVER_WINDOWS, UNKNOWN_ROUTE, answering, unknown_route
from .script import RecordedRequest, Reply, ServedResponse, coerce
from .wire import Event, Exchange, Headers

__all__ = ["FakeLLM"]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The default backlog of 5 drops the SYNs of a burst of connections: those clients stall, or give up.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], fake: FakeLLM) -> None:
        self.fake = fake
        # The live connections, which server_close() severs: keep-alive connections pooled by SDK clients
        # would otherwise leave handler threads parked in ``readline`` after shutdown.
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up mid-stream and stop() severing sockets are expected; anything else is a bug.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def server_close(self) -> None:
        super().server_close()
        with self.connections_lock:
            conns = list(self.connections)
            self.connections.clear()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    """Translate one HTTP exchange into a RecordedRequest and a rendered Reply."""

    # HTTP/1.1 lets SDK connection pools reuse sockets like they do in production.
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate small writes: with Nagle on, each waits ~40 ms for a delayed ACK.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Access logs on stderr would drown pytest output."""

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while size := int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # the trailers, up to the terminating blank line
        return b"".join(chunks)

    def do_POST(self) -> None:
        # rfile is buffered: read(n) returns n bytes, or fewer only when the client hangs up.
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        body = self._read_chunked() if chunked else self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): ", ".join(self.headers.get_all(k, ())) for k in self.headers}
        req = RecordedRequest(method=self.command, path=self.path, headers=headers, body=body)
        fake = self.server.fake
        n, serial = fake._record(req)

        path = self.path.split("?", 1)[0]
        fmt = answering(path.rstrip("/"))
        ex = Exchange(fmt or UNKNOWN_ROUTE, fake._nonce, serial, path.rstrip("/"),
                      fake.windows.get(fmt.name) if fmt else None)
        if fmt is None or self.command != "POST":
            return self._fail(ex, req, 404, error=unknown_route(self.command, path))
        try:
            # Refused at a depth of its own, as a provider's parser does: Python's reader goes deeper on
            # 3.13 than on 3.11, and past it the fake's walkers would drop the connection on one only.
            if deeper_than(body.decode("utf-8", "replace")):
                raise ValueError(f"nested more than {MAX_NESTING} levels deep")
            payload = json.loads(body) if body else {}
            if not isinstance(payload, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            return self._fail(ex, req, 400, f"Invalid JSON body: {exc}")
        ex = replace(ex, payload=payload)
        if (refusal := fmt.refuse(ex)) is not None:
            return self._fail(ex, req, 400, error=refusal)
        try:
            reply = fake._next_reply(req, n)
        except Exception as exc:
            # Surface bugs in the reply callable to the client instead of hanging it.
            return self._fail(ex, req, 500, f"FakeLLM reply callable failed: {exc!r}")

        ex = replace(ex, reply=reply, stream=fmt.streamed(ex))
        if reply.status != 200:
            return self._fail(ex, req, reply.status, reply.text or None)
        if reply.stream_failure == "error" and not ex.stream:
            # Failing before the first byte, a stream's failure is an HTTP error.
            return self._fail(ex, req, fmt.failure_status, failure="error")
        answer = fmt.stream(ex) if ex.stream else fmt.body(ex)
        fake._served(ex.served(req))
        if isinstance(answer, list):
            return self._send_stream(ex, answer)
        self._send_json(ex, 200, answer, drop=reply.stream_failure == "drop")

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST

    def _fail(self, ex: Exchange, req: RecordedRequest, status: int, message: str | None = None, *,
              error: tuple[dict[str, Any], str] | None = None, failure: str | None = None) -> None:
        """Answer ``status`` with ``error`` (body, type), by default the format's for ``message``."""
        body, error_type = error or ex.format.error(ex, status, message)
        self.server.fake._served(ServedResponse(request=req, status=status, request_id=ex.request_id, model=ex.model,
                                                error_type=error_type, failure=failure))
        self._send_json(ex, status, body, error_type=error_type)

    def _start(self, ex: Exchange, status: int, content_type: str, error_type: str | None, more: Headers) -> None:
        self.send_response(status)
        for name, value in [("Content-Type", content_type), *ex.format.headers(ex, status, error_type), *more]:
            self.send_header(name, value)
        self.end_headers()

    def _send_json(self, ex: Exchange, status: int, obj: Any, *, drop: bool = False,
                   error_type: str | None = None) -> None:
        data = ex.format.json.dumps(obj)
        self._start(ex, status, ex.format.json.content_type, error_type, [("Content-Length", str(len(data)))])
        self.wfile.write(data[: len(data) // 2] if drop else data)
        if drop:  # cut mid-body, as a crashed upstream or a broken proxy does: closed once this returns
            self.close_connection = True

    def _send_stream(self, ex: Exchange, events: list[Event | None]) -> None:
        """One HTTP chunk an event: clients see a stream really arrive, and tell a cut one from its end."""
        framing = ex.format.framing
        self._start(ex, 200, framing.content_type, None, [*framing.headers, ("Transfer-Encoding", "chunked")])
        for item in events:
            if item is None:  # the drop, as above
                self.close_connection = True
                return
            frame = framing.frame(*item)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.write(b"0\r\n\r\n")


class FakeLLM:
    """Loopback server standing in for every provider the registry lists (``registry.FORMATS``).

    Reply precedence is: scripted replies (FIFO), then the ``reply`` callable, then a default
    ``"ok N"`` that makes request ordering visible in asserts. ``requests`` records every request as
    it arrived, ``responses`` what was answered (``ServedResponse``: ids, finish reasons, usage).
    ``seed`` makes the ids reproducible: two servers with the same seed answer the same requests
    with the same ids (to compare a run with ctxguard and one without).

    Usage::

        with FakeLLM() as llm:
            llm.script("hello", Reply(status=429))
            client = openai.OpenAI(base_url=llm.base_url, api_key="x", max_retries=0)
            r = client.chat.completions.create(model="m", messages=[...])
            assert llm.bodies("/chat/completions")[0]["model"] == "m" and r.id == llm.responses[0].id
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0,
                 reply: Callable[[RecordedRequest], Reply | str] | None = None, seed: str | None = None) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            # A fake that answers anyone on the network is a liability.
            raise ValueError(f"FakeLLM binds to loopback only, not {host!r}")
        self._address = ("127.0.0.1" if host == "localhost" else host, port)
        self._reply_fn = reply
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque()
        self._server: _Server | None = None
        # Seeds this server's ids: two servers never hand out the same one, unless seeded alike.
        self._nonce = seed if seed is not None else secrets.token_hex(8)
        self._serial = 0
        self.requests: list[RecordedRequest] = []
        self.responses: list[ServedResponse] = []
        #: Each API's context window in the fake's tokens, by ``WireFormat`` name (defaults: ``server_window``).
        self.windows: dict[str, int] = {name: window for name, window in SERVER_WINDOWS.values()}

    def __getattr__(self, name: str) -> Any:
        """What each wire format declares (``registry``): its SDK's address (``base_url``: the origin and
        the format's path prefix), and its server's default window, which can be set (``ollama_num_ctx``)."""
        if name in ADDRESSES:
            return self.origin + ADDRESSES[name]
        if name in SERVER_WINDOWS:
            return self.windows[SERVER_WINDOWS[name][0]]
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SERVER_WINDOWS:
            self.windows[SERVER_WINDOWS[name][0]] = value
        else:
            super().__setattr__(name, value)

    def start(self) -> FakeLLM:
        """Bind and serve in a background thread; returns self for chaining."""
        if self._server is not None:
            return self
        self._server = _Server(self._address, self)
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         name=f"FakeLLM:{self.port}", daemon=True).start()
        return self

    def stop(self) -> None:
        """Shut down (once the serving thread has stopped) and sever live connections; safe to repeat."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port; only meaningful while started (port=0 picks a free one)."""
        if self._server is None:
            raise RuntimeError("FakeLLM is not running; call start() or use it as a context manager")
        return int(self._server.server_address[1])

    @property
    def origin(self) -> str:
        host = f"[{self._address[0]}]" if ":" in self._address[0] else self._address[0]
        return f"http://{host}:{self.port}"

    def script(self, *replies: Reply | str) -> None:
        """Queue replies consumed one per endpoint request, in order."""
        with self._lock:
            self._script.extend(coerce(r) for r in replies)

    def bodies(self, path_suffix: str | None = None) -> list[Any]:
        """Parsed JSON of recorded bodies; empty bodies (e.g. GETs) are skipped."""
        with self._lock:
            reqs = list(self.requests)
        return [r.json for r in reqs if r.body and r.path.split("?", 1)[0].endswith(path_suffix or "")]

    def clear(self) -> None:
        """Forget recorded requests, answers and pending scripted replies between test phases."""
        with self._lock:
            self.requests.clear()
            self.responses.clear()
            self._script.clear()

    def _record(self, req: RecordedRequest) -> tuple[int, int]:
        """Number the request: its place in ``requests`` and its serial for this server's life."""
        with self._lock:
            self.requests.append(req)
            self._serial += 1
            return len(self.requests), self._serial

    def _served(self, response: ServedResponse) -> None:
        with self._lock:
            self.responses.append(response)

    def _next_reply(self, req: RecordedRequest, n: int) -> Reply:
        with self._lock:
            scripted = self._script.popleft() if self._script else None
        if scripted is not None:
            return scripted
        if self._reply_fn is not None:
            # Called outside the lock so a callable may inspect self.requests.
            return coerce(self._reply_fn(req))
        return Reply(text=f"ok {n}")
