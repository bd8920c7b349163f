"""Python child processes of the tests: the repository's environment, and Ctrl-C sent mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def repo_env(**extra) -> dict:
    """os.environ with this checkout first on PYTHONPATH, no RIEMATTN_ENGINE, and ``extra``."""
    env = dict(os.environ)
    env.pop("RIEMATTN_ENGINE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update({k: str(v) for k, v in extra.items()})
    return env


def interrupt_after_go(code: str, *args: str, pause: float = 1.0):
    """Run ``code`` (dedented) with ``args``; once it prints "go", wait ``pause`` seconds, send
    SIGINT and read its next line. Returns (that line split, seconds from the signal to the line,
    the child's stderr). The child is killed in any case."""
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], env=repo_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        first = proc.stdout.readline().strip()
        if first != "go":
            proc.kill()
            raise AssertionError(f"the child did not start: {first!r} {proc.stderr.read()}")
        time.sleep(pause)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        line = proc.stdout.readline().split()
        waited = time.monotonic() - sent
    finally:
        proc.kill()
        proc.wait()
    return line, waited, proc.stderr.read()
