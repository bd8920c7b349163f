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


def numba_cuda() -> bool:
    """Whether numba-cuda (not numba's older built-in CUDA target) is importable."""
    try:
        from numba import cuda
    except ImportError:
        return False
    return getattr(cuda, "implementation", "") == "NVIDIA"


def simulate_cuda(script: str, timeout: float = 600) -> list:
    """Run ``script`` in a child process under numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1: numba
    reads it once, at import, so it must not leak into the test process); returns the JSON objects
    it printed, one per line starting with "{"."""
    import json

    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=str(ROOT),
                         env=repo_env(NUMBA_ENABLE_CUDASIM=1), timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def ptx_tools():
    """Why the CUDA kernels cannot be compiled to PTX and assembled here (None: they can): numba-cuda,
    libNVVM and NVRTC (numba-cuda's cu12 extra) and ptxas."""
    if not numba_cuda():
        return "numba-cuda is not installed"
    try:
        from numba.cuda.cudadrv import nvrtc, nvvm

        nvvm.NVVM()
        nvrtc.get_supported_ccs()
    except Exception as exc:  # noqa: BLE001 -- the toolkit's wheels are not installed: say so
        return f"libNVVM or NVRTC is not available: {exc}"
    from riemattn.solvers.compiled.cuda._ptx import tool

    return None if tool("ptxas") else "ptxas not found (pip install nvidia-cuda-nvcc-cu12)"
