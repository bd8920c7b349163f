"""Compiling the compiled engine before it is needed (issue 42, part 1): the background compile that
``engine="auto"`` starts, its lock, ``ra.warmup()`` and ``riemattn warmup``.

The suite switches the background compile off (tests/conftest.py); the tests here switch it on in
subprocesses with a fresh cache directory (NUMBA_CACHE_DIR), so that nothing compiled before counts.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from _subprocess import ROOT, repo_env


FIRST_CALL = """
    import time, numpy as np, riemattn as ra
    from riemattn.solvers.compiled import _kernel, _warmup  # (imported before the timings)
    f = ra.AttentionField(np.eye(3), beta=2.0)
    y = f.manifold.projection(np.random.default_rng(0).normal(size=(2, 5, 3)))
    call = lambda **kw: ra.integrate(f, y, (0.0, 1.0), "dopri5", **kw)
    call(engine="numpy")
    t = time.perf_counter(); ref = call(engine="numpy"); t_numpy = time.perf_counter() - t
    t = time.perf_counter(); first = call(); t_first = time.perf_counter() - t
    proc = _warmup._STARTED[0]
    print("first", first.engine, t_first, t_numpy, proc.poll() is None, flush=True)
    def cpu():  # the compile process's CPU seconds so far (Linux: /proc; it is still compiling the other loop)
        fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    import os
    start = time.monotonic()
    used = 0.0
    while time.monotonic() - start < 900:
        sol = call()
        if sol.engine == "compiled":
            break
        used = cpu()
        time.sleep(2.0)
    print("later", sol.engine, time.monotonic() - start, used, float(np.abs(sol.y - ref.y).max()), flush=True)
"""


@pytest.mark.slow
def test_first_eligible_call_compiles_in_the_background(tmp_path):
    """A fresh cache: the first eligible "auto" call starts a compile process, says so once, and
    returns at NumPy-engine speed (its time: the NumPy engine's plus starting a process, well under
    half a second); within 3 minutes of the compile process's time the same call in the same
    process runs on the compiled engine,
    with the NumPy engine's result (to rounding: tests/solvers/test_compiled.py's bound, 1e3 eps per step,
    with the steps' times to 100 eps / rtol: 1e-9 covers both for these few steps)."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(FIRST_CALL)], capture_output=True, text=True,
                         timeout=1000, cwd=str(ROOT),
                         env=repo_env(NUMBA_CACHE_DIR=tmp_path / "cache", RIEMATTN_BACKGROUND_COMPILE=1))
    lines = [line.split() for line in out.stdout.splitlines()]
    assert len(lines) == 2, out.stderr
    _, engine, t_first, t_numpy, running = lines[0]
    assert engine == "numpy" and running == "True"
    assert float(t_first) < 2 * float(t_numpy) + 0.5
    assert out.stderr.count("compiles in a background process") == 1, out.stderr
    assert "RIEMATTN_BACKGROUND_COMPILE=0" in out.stderr and "riemattn.warmup()" in out.stderr
    _, engine, waited, used, diff = lines[1]
    assert engine == "compiled", (waited, out.stderr)
    # "within 3 minutes" on a machine with a core to spare; the shared development machine runs at
    # load 5-12 on 2 cores, where the wall time is several times the CPU time: bound the compile
    # process's CPU time (at the last poll before ready) by 3 minutes, the wall time by 15
    assert float(used) < 180, (waited, used)
    assert float(diff) < 1e-9


def test_a_second_process_does_not_compile_while_one_holds_the_lock(tmp_path):
    """The compile lock: while one process holds it, another sees ``compiling()`` and the background
    compile started there exits at once, compiling nothing (no loop in the fresh cache)."""
    env = repo_env(NUMBA_CACHE_DIR=tmp_path / "cache")
    holder = subprocess.Popen([sys.executable, "-c", "from riemattn.solvers.compiled import _warmup\n"
                               "import time\nwith _warmup.locked():\n    print('held', flush=True)\n"
                               "    time.sleep(120)\n"], env=env, stdout=subprocess.PIPE, text=True, cwd=str(ROOT))
    try:
        assert holder.stdout.readline().strip() == "held"
        seen = subprocess.run([sys.executable, "-c", "from riemattn.solvers.compiled import _warmup\n"
                               "print(_warmup.compiling())"], env=env, capture_output=True, text=True, timeout=300)
        assert seen.stdout.split() == ["True"], seen.stderr
        t = time.monotonic()
        bg = subprocess.run([sys.executable, "-m", "riemattn.solvers.compiled._warmup"], env=env,
                            capture_output=True, text=True, timeout=300, cwd=str(ROOT))
        assert bg.returncode == 0, bg.stderr
        assert time.monotonic() - t < 60  # imports only: a compilation takes minutes here
        assert not list((tmp_path / "cache").rglob("*solve_rows*.nbi"))
    finally:
        holder.kill()
        holder.wait()
    free = subprocess.run([sys.executable, "-c", "from riemattn.solvers.compiled import _warmup\n"
                           "print(_warmup.compiling())"], env=env, capture_output=True, text=True, timeout=300)
    assert free.stdout.split() == ["False"], free.stderr


def test_warmup_command_reports_the_time(capsys):
    """``riemattn warmup`` (the suite's cache is usually warm: then it loads in a fraction of a
    second; cold, it compiles)."""
    from riemattn.cli import main

    assert main(["warmup", "--no-progress"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("riemattn: the compiled engine is ready in ") and "adaptive loop" in line, line


def test_warmup_without_jit_is_a_clear_refusal():
    code = ("import riemattn as ra\nfrom riemattn.errors import UnsupportedByEngine\ntry:\n    ra.warmup()\n"
            "except UnsupportedByEngine as exc:\n    print('refused', 'NUMBA_DISABLE_JIT' in str(exc))\n")
    out = subprocess.run([sys.executable, "-c", code], env=repo_env(NUMBA_DISABLE_JIT=1), capture_output=True,
                         text=True, timeout=300, cwd=str(ROOT))
    assert out.stdout.split() == ["refused", "True"], out.stderr
