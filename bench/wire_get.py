"""What observing the HTTP clients costs a request that is no model call: a plain loopback GET.

    PYTHONPATH=$PWD .venv/bin/python bench/wire_get.py [--calls 200]   # minutes: ~10 on 2 loaded cores

Every request through an observed client pays the wire hooks' first test (``routes.model_path``:
a method comparison for a GET) and, for http.client, the ``getresponse`` hook's look-up. This counts
it in CPU instructions (valgrind's callgrind, as bench/instructions.py does: each counted request
inside a libffi call that callgrind is told to collect in, after 20 uncounted ones), one child
process per side and client: ``bare`` (ctxguard not instrumented) and ``observed`` (instrumented,
observe mode), GETs of a small JSON body over one kept-alive connection to a server in another
process (its instructions are not the child's). Clients: ``http.client`` alone, and ``requests``
(urllib3 and http.client beneath it, each hooked). Per request: the bare count, the observed one,
the difference and the ratio.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WARM_UP = 20


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b'{"status": "ok"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def serve() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def child(side: str, client: str, port: int, calls: int) -> None:
    import gc
    import http.client

    if side == "observed":
        from prometheus_client import CollectorRegistry

        import ctxguard

        ctxguard.instrument(registry=CollectorRegistry())
    if client == "requests":
        import requests

        session = requests.Session()
        url = f"http://127.0.0.1:{port}/v1/models"

        def get() -> None:
            session.get(url).json()
    else:
        connection = http.client.HTTPConnection("127.0.0.1", port)

        def get() -> None:
            connection.request("GET", "/v1/models")
            connection.getresponse().read()

    for _ in range(WARM_UP):
        get()
    gc.disable()
    counted = ctypes.CFUNCTYPE(None)(get)
    for _ in range(calls):
        counted()


def count(side: str, client: str, port: int, calls: int) -> int:
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--toggle-collect=ffi_call*",
           sys.executable, __file__, "--child", side, client, str(port), str(calls)]
    out = subprocess.run(cmd, env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise RuntimeError(f"{side} {client}: the child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return int(found.group(1))


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return 0
    if sys.argv[1:2] == ["--serve"]:
        serve()
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200, help="counted GETs per side (default 200)")
    calls = parser.parse_args().calls
    server = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        time.sleep(0.2)
        print(f"{'client':<12} {'bare':>12} {'observed':>12} {'added':>8} {'ratio':>7}   (instructions per GET)")
        for client in ("http.client", "requests"):
            bare, observed = (count(side, client, port, calls) / calls for side in ("bare", "observed"))
            print(f"{client:<12} {bare:>12,.0f} {observed:>12,.0f} {observed - bare:>8,.0f} {observed / bare:>7.4f}")
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
