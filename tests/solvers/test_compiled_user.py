"""The compiled engine where a user's machine or call differs from ours (issue 42, part 3).

Each test is one case a user meets: a read-only install, Ctrl-C, a cache built for another CPU,
``max_steps`` on a long fixed-step span, numba's JIT switched off, an empty batch, the refusal's
text, many event crossings, an overflow. Cases that depend on the process's environment (numba
reads its configuration at import; signals) run in a subprocess.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

import riemattn as ra
from riemattn.analysis import events as rae
from riemattn.errors import UnsupportedByEngine, ValidationError

from _subprocess import ROOT, interrupt_after_go, repo_env

EPS = np.finfo(float).eps


def _python(code, timeout=600, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=repo_env(**env), capture_output=True,
                          text=True, timeout=timeout, cwd=str(ROOT))


def _read_only_copy(tmp_path):
    """A copy of the package whose ``__pycache__`` directories cannot be created (a file stands there)."""
    pkg = tmp_path / "site" / "riemattn"
    shutil.copytree(ROOT / "riemattn", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for d in [pkg, *[p for p in pkg.rglob("*") if p.is_dir()]]:
        (d / "__pycache__").write_text("blocked")
    return pkg


def test_read_only_package_caches_in_the_user_cache_directory(tmp_path):
    """Package directory not writable, a writable user cache directory: the engine is cached
    there (numba's user-wide locator), and so is the compile lock."""
    pkg = _read_only_copy(tmp_path)
    code = """
        from riemattn.dynamics import kernels
        from riemattn.dynamics.kernels import _kernel_cache
        from riemattn.solvers.compiled import _warmup
        print(_kernel_cache.CACHED, _kernel_cache.cache_dir(kernels.evaluate), _warmup._lock_path())
    """
    env = dict(repo_env(), PYTHONPATH=str(pkg.parent), XDG_CACHE_HOME=str(tmp_path / "xdg"),
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=600, cwd=str(tmp_path))
    cached, where, lock = out.stdout.split()
    assert cached == "True", out.stderr
    assert where.startswith(str(tmp_path / "xdg" / "numba")) and lock.startswith(where)


def test_default_call_works_without_a_writable_cache(tmp_path):
    """A read-only install: no directory where numba could write a cache. The tests run as root,
    which ignores file permissions, so each place numba would create is blocked by a plain file of
    that name (creating a directory there fails as on a read-only file system): the package's
    ``__pycache__`` directories, NUMBA_CACHE_DIR and the user cache directory. The default call
    runs (on the NumPy engine), and says once why the compiled engine is not cached."""
    pkg = _read_only_copy(tmp_path)
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a directory")
    code = """
        import numpy as np, riemattn as ra
        assert ra.__file__.startswith(%r), ra.__file__
        y0 = ra.Sphere(2).projection(np.random.default_rng(0).normal(size=(4, 3)))
        sol = ra.integrate(ra.AttentionField(np.eye(3)), y0, (0, 5), "rk4", dt=.05)
        print(sol.engine, sol.success)
    """ % str(pkg)
    env = dict(PYTHONPATH=str(pkg.parent), NUMBA_CACHE_DIR=blocked / "numba", XDG_CACHE_HOME=blocked / "xdg",
               HOME=blocked / "home", PYTHONDONTWRITEBYTECODE=1, RIEMATTN_BACKGROUND_COMPILE=1)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=dict(repo_env(), **{k: str(v) for k, v in
                         env.items()}), capture_output=True, text=True, timeout=600, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["numpy", "True"]
    assert out.stderr.count("no writable cache directory") == 1, out.stderr
    assert "background" not in out.stderr  # nothing could be cached: no background compile


def test_readiness_counts_only_code_for_this_cpu(tmp_path):
    """A cache filled for another CPU (NUMBA_CPU_NAME=generic) is not ready here; filled here, it is."""
    (tmp_path / "tiny_mod.py").write_text("import numba\n\n@numba.njit(cache=True)\ndef f(x):\n    return x + 1\n")
    ask = ("import sys; sys.path.insert(0, %r); import tiny_mod\n"
           "from riemattn.dynamics.kernels._kernel_cache import cached_for_this_cpu\n"
           "print(cached_for_this_cpu(tiny_mod.f)); tiny_mod.f(1)\n") % str(tmp_path)
    cache = tmp_path / "cache"
    other = _python(ask, NUMBA_CACHE_DIR=cache, NUMBA_CPU_NAME="generic")
    assert other.stdout.split() == ["False"], other.stderr  # empty cache; fills it for "generic"
    here = _python(ask, NUMBA_CACHE_DIR=cache)
    assert here.stdout.split() == ["False"], here.stderr  # only "generic" code: not ready; fills it for this CPU
    again = _python(ask, NUMBA_CACHE_DIR=cache)
    assert again.stdout.split() == ["True"], again.stderr


CTRL_C = """
    import signal, sys, time, numpy as np, riemattn as ra
    # like a terminal's Ctrl-C whatever started the tests: a background job (CI runners, `cmd &`)
    # inherits SIGINT ignored, and the interrupt below would then be lost (as in tests/runs/test_sweep.py)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # one token under a skew U: dy/dt = U y, a rotation that never settles, so at rtol 1e-12 the
    # solve to 1e6 takes ~3e7 steps (~100 s; measured 3411 steps per 100 time units) on any machine:
    # the signal always arrives inside it (a converging field let step sizes grow and finished first)
    U = np.array([[0., -1, 0], [1, 0, 0], [0, 0, 0]])
    f = ra.AttentionField(np.zeros((3, 3)), U=U)
    batch = int(sys.argv[1])
    shape = (1, 3) if batch == 0 else (batch, 1, 3)
    y0 = f.manifold.projection(np.random.default_rng(1).normal(size=shape))
    kw = {} if batch == 0 else dict(saveat=np.linspace(0, 1e6, 11))
    warm = {} if batch == 0 else dict(saveat=np.linspace(0, 1, 3))
    ra.integrate(f, y0, (0, 1.0), "dopri5", engine="compiled", **warm)  # compiled (or loaded) before the signal
    print("go", flush=True)
    try:
        ra.integrate(f, y0, (0, 1e6), "dopri5", rtol=1e-12, atol=1e-12, max_steps=10**9, engine="compiled", **kw)
        print("finished", flush=True)
    except KeyboardInterrupt as exc:
        sol = exc.trajectory
        last = sol.t[-1] < 1e6 if batch == 0 else np.isnan(sol.y[-1]).all()  # every step / saveat
        print("stopped", sol.engine, sol.success, int(sol.n_steps), set(sol.per_trajectory.status.ravel().tolist()),
              bool(np.isfinite(sol.y[0]).all()), bool(last), flush=True)
"""


@pytest.mark.parametrize("batch", [0, 4])
def test_ctrl_c_stops_a_compiled_solve_within_a_second(batch):
    """SIGINT during a long compiled solve (one trajectory, and a batch on worker threads): the
    process gets KeyboardInterrupt within a second, with what was computed so far (the trajectories
    "not finished", status 1; the first saved state y0; one trajectory: its steps so far, a batch
    with saveat: NaN at the last save time, not reached)."""
    line, waited, err = interrupt_after_go(CTRL_C, str(batch))  # SIGINT 1 s after "go": inside the long solve
    assert line[:4] == ["stopped", "compiled", "False"] + line[3:4] and int(line[3]) > 0, (line, err)
    assert line[4:] == ["{1}", "True", "True"]
    assert waited < 1.0  # the loops check for the signal before every step (microseconds apart)


def _problem(B=2, l=5, d=3, seed=0):
    field = ra.AttentionField(np.eye(d), beta=2.0)
    y = field.manifold.projection(np.random.default_rng(seed).normal(size=(B, l, d)))
    return field, y


def test_max_steps_bounds_time_and_memory_before_any_grid():
    """rk4, dt = 1e-3 over (0, 1e4) (1e7 steps) with max_steps = 1000: the compiled engine builds
    the first 1000 steps of the grid only. Memory: the result is 1001 x 2 x 5 x 3 float64 (240 kB);
    the whole grid would be 4 x 1e7 entries (320 MB as arrays, more as the Python lists it is
    built from), so a peak under 20 MB tells them apart with room for NumPy's temporaries."""
    field, y = _problem()
    kw = dict(dt=1e-3, max_steps=1000)
    ra.integrate(field, y, (0.0, 0.01), "rk4", engine="compiled", dt=1e-3)  # compile/load outside the measure
    tracemalloc.start()
    try:
        sol = ra.integrate(field, y, (0.0, 1e4), "rk4", engine="compiled", **kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    ref = ra.integrate(field, y, (0.0, 1e4), "rk4", engine="numpy", **kw)
    assert peak < 20e6
    assert sol.engine == "compiled" and sol.y.shape == ref.y.shape == (1001, 2, 5, 3)
    np.testing.assert_array_equal(sol.per_trajectory.status, ref.per_trajectory.status)
    assert sol.message == ref.message and "max_steps" in sol.message
    np.testing.assert_allclose(sol.t, ref.t, rtol=0, atol=0)
    np.testing.assert_allclose(sol.y, ref.y, rtol=0, atol=1e3 * EPS * 1000)  # test_compiled's rounding bound


def test_disabled_jit_is_a_clear_refusal():
    code = """
        import numpy as np, riemattn as ra
        from riemattn.errors import UnsupportedByEngine
        f = ra.AttentionField(np.eye(3))
        y0 = f.manifold.projection(np.random.default_rng(0).normal(size=(4, 3)))
        print(ra.integrate(f, y0, (0, 1), "rk4", dt=.1).engine)
        try:
            ra.integrate(f, y0, (0, 1), "rk4", dt=.1, engine="compiled")
        except UnsupportedByEngine as exc:
            print("refused:", exc)
    """
    out = _python(code, NUMBA_DISABLE_JIT=1, RIEMATTN_ENGINE="compiled")
    lines = out.stdout.splitlines()
    assert lines[0] == "numpy", out.stderr
    assert lines[1].startswith("refused:") and "NUMBA_DISABLE_JIT=1" in lines[1], out.stderr


def test_empty_batch_is_the_numpy_result_on_the_compiled_engine():
    field, y = _problem()
    empty = y[:0]
    a = ra.integrate(field, empty, (0.0, 1.0), "dopri5", engine="numpy")
    b = ra.integrate(field, empty, (0.0, 1.0), "dopri5", engine="compiled")
    assert (a.engine, b.engine) == ("numpy", "compiled")
    assert b.y.shape == a.y.shape and b.message == a.message and b.success
    np.testing.assert_array_equal(b.t, a.t)
    with pytest.raises(UnsupportedByEngine, match="save_fn"):  # refused as a non-empty batch is
        ra.integrate(field, empty, (0.0, 1.0), "dopri5", engine="compiled", save_fn=lambda t, y: y)


def test_refusal_gives_its_advice_once():
    field, y = _problem()
    timed = ra.AttentionField(lambda t: np.cos(t) * np.eye(3))
    for f, kw in ((timed, {}), (field, dict(save_fn=lambda t, y: y)), (timed, dict(progress=True))):
        with pytest.raises(UnsupportedByEngine) as info:
            ra.integrate(f, y, (0.0, 1.0), "rk4", dt=0.1, engine="compiled", **kw)
        text = str(info.value)
        assert text.count("engine='numpy'") == 1 and text.count("compiled engine cannot run") == 0, text


def test_many_crossings_rerun_only_their_rows(monkeypatch):
    """Room for 4 crossings per trajectory: the rows with more run again alone (with room for all),
    the others are not run again; the events and states equal the NumPy engine's."""
    from riemattn.solvers.compiled import _engine

    monkeypatch.setattr(_engine, "EVENT_CAPACITY", 4)
    monkeypatch.setattr(_engine, "EVENT_MEMORY", 0)
    rows = []
    real = _engine._run_adaptive
    monkeypatch.setattr(_engine, "_run_adaptive", lambda *a: rows.append(a[1].shape[0]) or real(*a))
    # rotation about the z axis: the tokens of row 0 circle round, leaving the hemisphere x > 0 about
    # once per turn (8 times by T = 80); row 1 sits at the pole (g = 0 throughout: no crossing)
    field = ra.AttentionField(np.zeros((3, 3)), U=np.array([[0.0, -1, 0], [1, 0, 0], [0, 0, 0]]), beta=0.0)
    y0 = field.manifold.projection(np.array([[[1.0, 0.1, 0.2], [0.9, -0.2, 0.1]], [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]]))
    ev = [rae.leave_hemisphere(np.array([1.0, 0.0, 0.0]))]
    kw = dict(events=ev, saveat=np.linspace(0.0, 80.0, 5), rtol=1e-10, atol=1e-10)
    a = ra.integrate(field, y0, (0.0, 80.0), "dopri5", engine="numpy", **kw)
    b = ra.integrate(field, y0, (0.0, 80.0), "dopri5", engine="compiled", **kw)
    counts = a.events.count
    assert counts.max() > 4 and rows[0] == 2 and rows[1:] == [int((counts > 4).sum())]
    np.testing.assert_array_equal(b.events.count, counts)
    np.testing.assert_allclose(b.events.t, a.events.t, rtol=0, atol=1e-8, equal_nan=True)
    np.testing.assert_allclose(b.y, a.y, rtol=0, atol=1e-10)


def test_overflow_is_the_numpy_engines_validation_error():
    """beta = 800 with the "mean" normalization: exp(score) overflows; the NumPy engine raises a
    ValidationError naming beta, the compiled engine raises the same."""
    field = ra.AttentionField(np.eye(3), beta=800.0, normalization="mean")
    y0 = field.manifold.projection(np.random.default_rng(0).normal(size=(4, 3)))
    with pytest.raises(ValidationError) as on_numpy:
        ra.integrate(field, y0, (0.0, 1.0), "dopri5", engine="numpy")
    with pytest.raises(ValidationError) as compiled:
        ra.integrate(field, y0, (0.0, 1.0), "dopri5", engine="compiled")
    assert str(compiled.value) == str(on_numpy.value)


def test_every_module_with_compiled_code_is_in_the_cache_stamp():
    """numba's cache is stamped with the engine's sources (riemattn.dynamics.kernels._kernel_cache): a
    module with compiled functions left out would let a stale cache survive an edit of it."""
    from riemattn.dynamics.kernels import _kernel_cache

    stamped = set(_kernel_cache.engine_sources())
    compiled = {p.resolve() for p in (ROOT / "riemattn").rglob("*.py")
                if "@njit" in p.read_text() or "@jit\n" in p.read_text()}
    assert compiled and compiled <= stamped, sorted(map(str, compiled - stamped))


def test_same_steps_until_rounding_changes_a_decision():
    """docs/performance.md, "What agreement the engines promise", on a rounding-sensitive problem:
    stiff USA beta = 20, 12 tokens on S^2, "auto" at rtol = atol = 1e-6 over T = 100 (measured on
    the development machine: the accepted step times part after about 150 steps and the end states
    differ by 1.6). From the start up to the first step at which they part, the accepted step
    times agree to 100 eps / rtol relative (tests/solvers/test_compiled.py's bound for step times), and the
    states at those steps agree far below the solve's tolerance: within rtol (measured: at most
    2e-10), i.e. the engines drift apart only after a decision split, not step by step before it."""
    rtol = 1e-6
    field = ra.usa(20.0, 3)
    y0 = field.manifold.projection(np.random.default_rng(3).normal(size=(12, 3)))
    kw = dict(rtol=rtol, atol=rtol, max_steps=20000)
    a = ra.integrate(field, y0, (0.0, 100.0), "auto", engine="numpy", **kw)
    b = ra.integrate(field, y0, (0.0, 100.0), "auto", engine="compiled", **kw)
    n = min(len(a.t), len(b.t))
    parted = np.abs(a.t[:n] - b.t[:n]) > 100 * EPS / rtol * np.abs(a.t[:n])
    k = int(np.argmax(parted)) if parted.any() else n
    assert k >= 2  # t0 and at least one common step
    np.testing.assert_allclose(b.y[:k], a.y[:k], rtol=0, atol=rtol)
