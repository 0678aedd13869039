"""The command line, run as a user runs it (a subprocess)."""

from __future__ import annotations

import subprocess
import sys
import time


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxguard.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_demo_finds_the_flip_point_and_prints_totals():
    out = run("demo")  # within run()'s timeout: how long it takes is bench/footprint.py's to say, not a test's
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines.count("flip point: turn 4") == 1
    assert "flip point: none (system prompt kept)" in lines
    buggy_turn4 = next(line for line in lines if line.strip().startswith("turn  4"))
    assert "head=assistant" in buggy_turn4 and "system_at_head" in buggy_turn4 and "evicted=system" in buggy_turn4
    assert 'ctxguard_evictions_total{kind="system"} 1' in out.stdout
    assert 'ctxguard_violations_total{check="system_at_head",provider="openai"} 5' in out.stdout
    assert out.stderr == ""


def test_budget_prints_the_equation_and_turns():
    out = run("budget", "--model", "gpt-4o", "--system", "1200", "--tools", "800", "--max-tokens", "4000",
              "--median-turn", "350")
    assert out.returncode == 0, out.stderr
    assert "window                   128,000" in out.stdout
    assert "= history available        122,000" in out.stdout
    assert "turns that fit: 348 (median turn 350 tokens)" in out.stdout


def test_budget_unknown_model_needs_a_window():
    out = run("budget", "--model", "mystery")
    assert out.returncode == 2
    # The command line's own flag, not the Python argument (before: "pass window=").
    assert out.stderr.startswith("ctxguard budget: unknown context window for model 'mystery'")
    assert out.stderr.endswith("; pass --window N\n")
    assert run("budget", "--model", "mystery", "--window", "8000", "--max-tokens", "9000").returncode == 1


def test_budget_says_when_the_window_is_inferred_and_which_flag_overrides_it():
    out = run("budget", "--model", "gemini-3.9-flash", "--max-tokens", "1000")
    assert out.returncode == 0, out.stderr
    assert "window                 1,048,576  inferred from gemini-3.8-flash" in out.stdout
    assert "gemini-3.9-flash is not in the window table" in out.stdout and "pass --window N" in out.stdout
    plain = run("budget", "--model", "gemini-3.8-flash")
    assert plain.returncode == 0 and "inferred" not in plain.stdout


def test_demo_serve_keeps_metrics_up_until_interrupted():
    import signal
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "ctxguard.cli", "demo", "--serve", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        body = ""
        while time.monotonic() < deadline:
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.2)
        assert 'ctxguard_evictions_total{kind="system"} 1.0' in body
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "flip point: turn 4" in out
