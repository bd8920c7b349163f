"""Many tokens on the compiled engine: the streamed kernel in the loops, its threads, its memory.

From ``STREAM_MIN_TOKENS`` tokens the compiled engine's explicit steppers evaluate the streamed
kernel (riemattn.solvers.compiled._stream). The engines must take the same steps and agree to
rounding: as in tests/solvers/test_compiled.py, within ``ROUNDING = 1e3 eps`` per step (and the
step times within ``100 eps / rtol`` relative, the states at them that times |F| <= 1 more) on these
contractive, short solves (each evaluation's rounding is bounded in tests/dynamics/test_kernel_stream.py,
relative ``8 eps (h l + ...)`` of the row sums; at l = 300 that is ~2.4e3 eps at the very worst
per evaluation, measured ~1 eps; the per-step bound of test_compiled is kept, and the measured
differences are 10-100 times below it). Results are the same bits whatever the threads:
one trajectory (query tiles on numba's threads), two (one per thread), one thread.
"""

from __future__ import annotations

import subprocess
import sys

import numba
import numpy as np
import pytest

import riemattn as ra
from riemattn.dynamics import kernels as kk
from riemattn.solvers.compiled import _dispatch, _engine, _stream
from riemattn.solvers.steppers import STEPPERS

EPS = np.finfo(float).eps
ROUNDING = 1e3 * EPS
L = _stream.STREAM_MIN_TOKENS + 44  # streamed, not a multiple of the blocks of eight


def _field(mask, normalization):
    return ra.AttentionField(np.eye(3), beta=2.0, mask=mask, normalization=normalization)


def _y0(field, batch=()):
    return field.manifold.projection(np.random.default_rng(0).normal(size=batch + (L, 3)))


@pytest.mark.parametrize("mask, normalization", [("full", "softmax"), ("causal", "paper"), ("full", "mean")])
def test_dopri5_agrees_with_numpy(mask, normalization):
    field = _field(mask, normalization)
    y0 = _y0(field)
    fast = ra.integrate(field, y0, (0.0, 0.5), "dopri5", rtol=1e-8, engine="compiled")
    ref = ra.integrate(field, y0, (0.0, 0.5), "dopri5", rtol=1e-8, engine="numpy")
    assert fast.engine == "compiled"
    assert fast.n_steps == ref.n_steps and fast.per_trajectory.n_rejected == ref.per_trajectory.n_rejected
    tol_t = 100 * EPS / 1e-8  # step times (test_compiled.py: the step sizes inherit eps / rtol), |F| <= 1
    np.testing.assert_allclose(fast.t, ref.t, rtol=tol_t)
    n = fast.n_steps + fast.n_rejected
    np.testing.assert_allclose(fast.y, ref.y, rtol=0, atol=ROUNDING * n + tol_t * np.abs(ref.t).max())


@pytest.mark.parametrize("stepper", ["rk4", "layer"])
def test_fixed_steps_agree_with_numpy(stepper):
    field = _field("causal", "softmax")
    y0 = _y0(field)
    fast = ra.integrate(field, y0, (0.0, 0.2), stepper, dt=0.05, engine="compiled")
    ref = ra.integrate(field, y0, (0.0, 0.2), stepper, dt=0.05, engine="numpy")
    np.testing.assert_allclose(fast.y, ref.y, rtol=0, atol=ROUNDING * 4)


def test_threads_do_not_change_bits():
    """One trajectory (query tiles on two threads, or on one), the same one in a batch of two (one
    trajectory per thread): the same bits."""
    field = _field("full", "softmax")
    y0 = _y0(field)
    run = dict(t_span=(0.0, 0.3), stepper="dopri5", rtol=1e-9, engine="compiled", saveat=[0.0, 0.15, 0.3])
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        one = ra.integrate(field, y0, **run)
        two = ra.integrate(field, np.stack([y0, y0[::-1]]), **run)
        numba.set_num_threads(1)
        single = ra.integrate(field, y0, **run)
    finally:
        numba.set_num_threads(before)
    assert np.array_equal(one.y, single.y) and np.array_equal(one.y, two.y[:, 0])
    assert one.per_trajectory.n_steps == two.per_trajectory.n_steps[0]


def test_rule():
    """Streamed from STREAM_MIN_TOKENS tokens, for explicit steppers; query tiles where one trajectory
    per thread would leave threads idle; no lanes then; "auto" takes it."""
    field = _field("full", "softmax")
    pack = kk.pack_field(field, (L, 3))
    small = kk.pack_field(field, (_stream.STREAM_MIN_TOKENS - 1, 3))
    dopri5, rodas4 = STEPPERS["dopri5"](), STEPPERS["rodas4"]()
    assert _stream.applies(dopri5, pack) and not _stream.applies(dopri5, small)
    assert not _stream.applies(rodas4, pack)  # an (l d, l d) Jacobian: not streamed
    assert _stream.streamed(dopri5, pack, 1, 2) == _stream.TILES
    assert _stream.streamed(dopri5, pack, 2, 2) == _stream.ROWS
    assert _stream.streamed(dopri5, pack, 3, 2) == _stream.TILES  # 3 / 4 of the threads busy
    assert _stream.streamed(dopri5, pack, 5, 2) == _stream.TILES  # 5 / 6 < 0.88
    assert _stream.streamed(dopri5, pack, 9, 2) == _stream.ROWS  # 9 / 10 >= 0.88
    assert _stream.streamed(dopri5, pack, 1, 1) == _stream.ROWS
    assert _stream.streamed(dopri5, small, 1, 2) == _stream.OFF
    y0 = np.zeros((64, L, 3))
    assert not _engine.lanes_apply(dopri5, pack, y0, np.array([0.0, 1.0]), ())
    assert _dispatch.pays(pack, dopri5, 1)


CODE = """
import sys, tracemalloc
import numpy as np
import riemattn as ra
l = int(sys.argv[1])
field = ra.sa(4.0, 3)
rng = np.random.default_rng(0)
warm = field.manifold.projection(rng.normal(size=(300, 3)))  # >= 256 tokens: the streamed kernel, compiled here
ra.integrate(field, warm, (0.0, 0.01), "rk4", dt=0.01, engine="compiled")
y0 = field.manifold.projection(rng.normal(size=(l, 3)))
tracemalloc.start()
sol = ra.integrate(field, y0, (0.0, 0.01), "rk4", dt=0.01, engine="compiled")
peak = tracemalloc.get_traced_memory()[1]
assert sol.success and np.isfinite(sol.y).all()
print(peak)
"""


def test_memory_is_linear_in_tokens():
    """One rk4 step of 12 000 tokens: one (l, l) attention matrix alone would be 1.15 GB; the arrays the
    solve allocates (tracemalloc traces NumPy's allocations, the engine's scratch included) peak below
    64 MB: the tokens (0.3 MB), the stages and saved states (a few times that) and the O(l d) scratch.
    (The process's resident peak is no measure here: compiling the kernels in a cold numba cache takes
    ~1 GB of LLVM's memory, measured.)"""
    l = 12_000
    out = subprocess.run([sys.executable, "-c", CODE, str(l)], capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "RIEMATTN_BACKGROUND_COMPILE": "0"})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.split()[-1]) < 64 * 2**20 < 8 * l * l


CTRL_C = """
    import signal, sys, numpy as np, riemattn as ra
    signal.signal(signal.SIGINT, signal.default_int_handler)  # (see test_compiled_user.py's CTRL_C)
    # a rotation that never settles (zero scores, skew U), 300 tokens: streamed, its query tiles on
    # numba's threads; at rtol 1e-12 the solve to 1e6 takes millions of steps of ~1 ms
    U = np.array([[0., -1, 0], [1, 0, 0], [0, 0, 0]])
    f = ra.AttentionField(np.zeros((3, 3)), U=U)
    y0 = f.manifold.projection(np.random.default_rng(1).normal(size=(300, 3)))
    ra.integrate(f, y0, (0, 0.1), "dopri5", engine="compiled")  # compiled (or loaded) before the signal
    print("go", flush=True)
    try:
        ra.integrate(f, y0, (0, 1e6), "dopri5", rtol=1e-12, atol=1e-12, max_steps=10**9, engine="compiled")
        print("finished", flush=True)
    except KeyboardInterrupt as exc:
        sol = exc.trajectory
        print("stopped", sol.engine, sol.success, set(sol.per_trajectory.status.ravel().tolist()), flush=True)
"""


def test_ctrl_c_stops_a_streamed_solve():
    """SIGINT during a long streamed solve of one trajectory (query tiles on numba's threads): the
    process gets KeyboardInterrupt within a second with the result so far, as for small problems."""
    from _subprocess import interrupt_after_go

    line, waited, err = interrupt_after_go(CTRL_C)
    assert line == ["stopped", "compiled", "False", "{1}"], (line, err)
    assert waited < 1.0


def test_auto_runs_streamed_once_compiled(monkeypatch):
    """"auto" takes the compiled engine for many tokens once the loop and the streamed kernel are
    compiled (here: by the engine="compiled" call first)."""
    monkeypatch.delenv("RIEMATTN_ENGINE", raising=False)
    field = _field("causal", "mean")
    y0 = _y0(field)
    ra.integrate(field, y0, (0.0, 0.1), "rk4", dt=0.05, engine="compiled")
    assert _dispatch.stream_ready() and _dispatch.ready(False)
    assert ra.integrate(field, y0, (0.0, 0.1), "rk4", dt=0.05).engine == "compiled"
