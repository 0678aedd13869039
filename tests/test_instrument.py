"""``instrument()`` (ctxguard/_instrument.py) returns a guard whatever the environment."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

import ctxguard


def test_instrument_never_raises_because_of_the_environment(monkeypatch, caplog, tmp_path):
    """A taken port, an unwritable capture path, a mistyped variable: instrument() returns a guard."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    monkeypatch.setenv("CTXGUARD_MODE", "enforcee")
    caplog.set_level(logging.WARNING, logger="ctxguard")
    try:
        guard = ctxguard.instrument(registry=CollectorRegistry(), metrics_port=port, digest_key=b"k",
                                    capture_path=str(tmp_path / "missing-dir" / "capture.jsonl"))
    finally:
        taken.close()
    assert guard is not None and guard.config.mode == "observe"
    said = " ".join(r.getMessage() for r in caplog.records)
    assert f"127.0.0.1:{port} cannot be bound" in said and "CTXGUARD_MODE" in said
    ctxguard.uninstrument()
    with pytest.raises(ValueError):  # an impossible port given in code is the code's mistake
        ctxguard.instrument(registry=CollectorRegistry(), metrics_port=70_000, digest_key=b"k")


# -- every variable, every hostile value -------------------------------------------------------

# Run in a child process: a start-up that hangs must fail this test, not hang the suite (a hung
# instrument() would hold its lock for every later test).
_HOSTILE = r'''
import json, logging, os, sys, threading, time
from prometheus_client import CollectorRegistry
import ctxguard
from ctxguard.config import ENVIRONMENT

values = dict(json.loads(sys.stdin.read()))
said = []
class Keep(logging.Handler):
    def emit(self, record):
        if record.levelno >= logging.WARNING:
            said.append(record.getMessage())
logging.getLogger("ctxguard").addHandler(Keep())
for name in ENVIRONMENT:
    for kind, value in values.items():
        before = dict(os.environb)
        os.environb[name.encode()] = value.encode("latin-1")
        said.clear()
        outcome = {}
        def start():
            try:
                outcome["guard"] = ctxguard.instrument(registry=CollectorRegistry(), digest_key=b"k")
            except BaseException as exc:
                outcome["raised"] = repr(exc)[:300]
        began = time.monotonic()
        thread = threading.Thread(target=start, daemon=True)
        thread.start()
        thread.join(5)
        took = time.monotonic() - began
        print(json.dumps({"name": name, "kind": kind, "seconds": took, "hung": thread.is_alive(),
                          "raised": outcome.get("raised"), "said": [s[:300] for s in said]}), flush=True)
        if thread.is_alive():
            os._exit(1)
        ctxguard.uninstrument()
        os.environb.clear()
        os.environb.update(before)
        for made in os.listdir(b"."):  # a capture file a name of garbage made: not a windows file next
            os.remove(made)
'''

#: Values no operator means, for every variable (each a str of bytes 0-255, set as those bytes).
_VALUES = {
    "garbage": "@@ \x1b[31m;rm -rf {pid}",
    "binary": "\xff\xfe\x80\xc3(\x9f garbage",  # not UTF-8: Python reads it with surrogates
    "huge": "9" * (1 << 20),
}


def test_no_environment_value_makes_instrument_raise_or_wait(tmp_path):
    """Every CTXGUARD_* variable (from the one tuple that declares them) set to garbage, binary,
    a megabyte of digits, a FIFO, /dev/zero, a directory or a dangling symlink: instrument()
    returns within a second, never raises, and logs at most one warning, which names the
    variable; where the value cannot be taken, exactly that one warning."""
    import json
    import os
    import subprocess
    import sys

    from ctxguard.config import ENV_CAPTURE_PATH, ENV_DIGEST_KEY, ENVIRONMENT

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "directory").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    values = {**_VALUES, "fifo": str(fifo), "zero": "/dev/zero", "directory": str(tmp_path / "directory"),
              "dangling": str(tmp_path / "dangling")}
    work = tmp_path / "cwd"  # a capture path of garbage is a file name: it lands here
    work.mkdir()
    child = subprocess.run([sys.executable, "-c", _HOSTILE], input=json.dumps(list(values.items())), cwd=work,
                           capture_output=True, text=True, timeout=300,
                           env={k: v for k, v in os.environ.items() if not k.startswith("CTXGUARD_")})
    results = [json.loads(line) for line in child.stdout.splitlines()]
    assert len(results) == len(ENVIRONMENT) * len(values), f"stopped at {results[-1:]}: {child.stderr[-3000:]}"
    # What a variable takes as it is: any bytes are a secret; a plain name is a capture file.
    taken = {(ENV_DIGEST_KEY, kind) for kind in values} | {(ENV_CAPTURE_PATH, "garbage"), (ENV_CAPTURE_PATH, "binary")}
    for r in results:
        case = f"{r['name']}={r['kind']}"
        assert not r["hung"] and r["seconds"] < 1.0, f"{case}: instrument() took {r['seconds']:.2f} s"
        assert r["raised"] is None, f"{case}: raised {r['raised']}"
        assert len(r["said"]) <= 1 and all(r["name"] in s for s in r["said"]), f"{case}: {r['said']}"
        if (r["name"], r["kind"]) not in taken:
            assert len(r["said"]) == 1, f"{case}: not one warning naming it: {r['said']}"
