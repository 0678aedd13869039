"""Capture files (ctxguard/capture.py): raw content goes only into a file only its owner can read,
opened without ever waiting, and each process's own when its path names the pid."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading

import pytest
from prometheus_client import CollectorRegistry

import ctxguard
from ctxguard.capture import CaptureRefused, CaptureWriter

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "My card ends 4242"}]


def test_a_new_capture_file_is_made_for_its_owner_only(tmp_path):
    path = tmp_path / "capture.jsonl"
    writer = CaptureWriter(str(path))
    writer.request(("c1", None), "openai", {"messages": MESSAGES})
    writer.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["body"]["messages"] == MESSAGES


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o666])
def test_an_existing_file_others_may_read_is_refused_and_never_appended_to(tmp_path, mode, caplog, client):
    """A live capture into a file with group or other permissions: one warning, the file untouched
    (not tightened: who reads it is the operator's call), and the app's calls go on."""
    path = tmp_path / "capture.jsonl"
    path.write_text("kept\n")
    path.chmod(mode)
    caplog.set_level(logging.WARNING, logger="ctxguard")
    guard = ctxguard.instrument(registry=CollectorRegistry(), digest_key=b"k", capture_path=str(path))
    assert guard is not None
    with ctxguard.conversation("c1"):
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "CTXGUARD_CAPTURE_PATH" in warned[0] and f"{mode:04o}" in warned[0], warned
    assert path.read_text() == "kept\n" and stat.S_IMODE(path.stat().st_mode) == mode


def test_a_fifo_is_refused_at_once_with_or_without_a_reader(tmp_path):
    """A FIFO never holds a capture: without a reader, opening it would wait for one forever; with
    one, raw content would stream to whoever reads."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(CaptureRefused, match="FIFO"):
        CaptureWriter(str(fifo))
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(CaptureRefused, match="not a regular file"):
            CaptureWriter(str(fifo))
    finally:
        os.close(reader)


def test_a_symbolic_link_is_not_followed(tmp_path):
    """A link planted at the capture path (dangling or not) would send raw content elsewhere."""
    (tmp_path / "elsewhere.jsonl").write_text("")
    (tmp_path / "elsewhere.jsonl").chmod(0o600)
    for target in ("elsewhere.jsonl", "nowhere.jsonl"):
        link = tmp_path / f"link-{target}"
        link.symlink_to(tmp_path / target)
        with pytest.raises(CaptureRefused, match="symbolic link"):
            CaptureWriter(str(link))
    assert not (tmp_path / "nowhere.jsonl").exists()


def test_a_device_or_directory_is_refused(tmp_path):
    with pytest.raises(OSError):
        CaptureWriter(str(tmp_path))
    with pytest.raises(CaptureRefused, match="not a regular file"):
        CaptureWriter("/dev/null")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_pid_path_gives_a_forked_child_its_own_file(tmp_path):
    """``{pid}`` in the path: each process its own file, a child forked after the writer was made
    included (gunicorn's --preload), its turns counted from 1."""
    writer = CaptureWriter(str(tmp_path / "capture-{pid}.jsonl"))
    writer.request(("c1", None), "openai", {"messages": MESSAGES})
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's code runs in the forked process
        code = 1
        try:
            writer.request(("c1", None), "openai", {"messages": MESSAGES})
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    writer.request(("c1", None), "openai", {"messages": MESSAGES})
    writer.close()
    parent = [json.loads(line)["turn"] for line in (tmp_path / f"capture-{os.getpid()}.jsonl").read_text().splitlines()]
    theirs = [json.loads(line)["turn"] for line in (tmp_path / f"capture-{child}.jsonl").read_text().splitlines()]
    assert (parent, theirs) == ([1, 2], [1])
    assert stat.S_IMODE((tmp_path / f"capture-{child}.jsonl").stat().st_mode) == 0o600


def test_writing_is_safe_from_many_threads(tmp_path):
    writer = CaptureWriter(str(tmp_path / "capture.jsonl"))

    def write() -> None:
        for _ in range(200):
            writer.request(("c1", None), "openai", {"messages": MESSAGES})

    threads = [threading.Thread(target=write) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    turns = sorted(json.loads(line)["turn"] for line in (tmp_path / "capture.jsonl").read_text().splitlines())
    assert turns == list(range(1, 801))


def test_credentials_passed_as_arguments_never_reach_a_capture(tmp_path):
    """A body captured from the call's arguments (its bytes were not seen: LiteLLM's mock_response,
    say) leaves out what carries a credential or where to send one; the request's own fields stay."""
    from ctxguard.capture import capture_body

    kwargs = {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 5, "max_completion_tokens": 9, "top_k": 3,
              "temperature": 0.2, "api_key": "sk-SECRET", "api_base": "https://gw.internal", "base_url": "x",
              "aws_access_key_id": "AKIA", "aws_secret_access_key": "s3cr3t", "aws_session_token": "t",
              "vertex_credentials": "{json}", "headers": {"Authorization": "Bearer sk-SECRET"},
              "client_secret": "c", "password": "p", "extra_headers": {"x-api-key": "sk-SECRET"}}
    body = capture_body(kwargs)
    assert body == {"model": "gpt-4o", "messages": MESSAGES, "max_tokens": 5, "max_completion_tokens": 9,
                    "top_k": 3, "temperature": 0.2}
    assert "SECRET" not in json.dumps(body) and "s3cr3t" not in json.dumps(body)
