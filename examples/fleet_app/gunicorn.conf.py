"""gunicorn settings for the fleet app: 4 sync workers and prometheus_client's multiprocess recipe.

    PROMETHEUS_MULTIPROC_DIR=/run/fleet-metrics gunicorn -c examples/fleet_app/gunicorn.conf.py
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prometheus_client import multiprocess

# prometheus_client decides at import whether to share values through files: the variable must
# be in the environment gunicorn starts with, so that every worker inherits it.
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    raise RuntimeError("set PROMETHEUS_MULTIPROC_DIR to a directory for the workers' metric files")

wsgi_app = "app:app"
pythonpath = str(Path(__file__).resolve().parent)
bind = "127.0.0.1:8000"
workers = 4
# One request at a time per worker: a worker that dies takes down only the request it was serving
# (the others wait in the listen queue for a live worker). Each worker imports the app, and so calls
# ctxguard.instrument(), after the fork (no preload_app).
worker_class = "sync"


def on_starting(server: Any) -> None:
    # "This directory must be wiped between Gunicorn runs" (prometheus_client): a previous run's
    # files would be summed into this one's counters.
    for path in Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).glob("*.db"):
        path.unlink()


def child_exit(server: Any, worker: Any) -> None:
    # In the master, for every worker that exits, killed ones included: drops the worker's live
    # gauges. Its counters and histograms stay: those calls happened.
    multiprocess.mark_process_dead(worker.pid)
