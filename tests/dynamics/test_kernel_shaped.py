"""Field kernels specialised to the tokens' shape (riemattn.dynamics.kernels._kernel_shaped).

The specialised kernel runs the generic kernel's code with l and d as compile-time constants, the
same IEEE operations in the same order (no fastmath), so every operation must give the generic
kernel's bits (``array_equal``, NaN where NaN), for every drawn field of the shape, and a compiled
solve must take the same steps to the same bits with either kernel. One shape, (4, 3), is
compiled for the whole module (seconds; numba's on-disk cache makes later sessions cheap).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import riemattn as ra
from riemattn.dynamics import kernels as kk
from riemattn.dynamics.kernels import _kernel_shaped as shaped
from riemattn.dynamics.circle import CircleField
from riemattn.dynamics.schedules import PiecewiseConstantHeads
from riemattn.errors import InputTypeError, ValidationError
from riemattn.solvers.compiled import _background, _kernel, _tables
from riemattn.testing import strategies as rst

L, D = 4, 3
OPS = ("RHS", "UPDATE", "LIFTED_JAC", "TIME_DERIVATIVE", "RHS_DIFF", "BLOCK")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kernel():
    shaped.compile_now(L, D, _kernel.evaluate_type().signature)
    return shaped.shaped(L, D)


def _both(kernel, field, y, t=0.3, b=0):
    """Every operation through the generic and the specialised kernel: {op: (generic, shaped)}."""
    pack = kk.pack_field(field, y.shape if y.ndim == 2 else y.shape)
    y1 = np.ascontiguousarray(y.reshape((-1, L, D))[b], dtype=float)
    ints, floats, per = (np.array(a, dtype=dt, order="C") for a, dt in
                         ((pack.ints, np.int64), (pack.floats, float), (pack.per, float)))
    out = {}
    for name in OPS:
        op = getattr(kk, name)
        res = []
        for fn in (kk.evaluate, kernel):
            o = np.full((L * D, L * D) if name == "LIFTED_JAC" else (L, D), np.nan)
            if name == "BLOCK":
                o[:] = y1 + 0.25 * _run(kk.evaluate, kk.UPDATE, t, y1, b, ints, floats, per, pack.work)
            fn(op, t, y1, b, ints, floats, per, np.full(max(pack.work, 1), np.nan), o)
            res.append(o)
        out[name] = res
    return out


def _run(fn, op, t, y, b, ints, floats, per, work):
    o = np.full(y.shape, np.nan)
    fn(op, t, y, b, ints, floats, per, np.full(max(work, 1), np.nan), o)
    return o


def _assert_same_bits(got):
    for name, (g, s) in got.items():
        assert np.array_equal(g, s, equal_nan=True), (name, np.nanmax(np.abs(g - s)))


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_operation_gives_the_generic_kernels_bits(kernel, data):
    field = data.draw(rst.attention_fields(dims=D, heads=st.integers(1, 3), values=("identity", "matrices"),
                                           beta=st.floats(0.0, 40.0)), label="field")
    y = data.draw(rst.points(field.manifold, tokens=L), label="y")
    t = data.draw(st.floats(-2.0, 2.0), label="t")
    _assert_same_bits(_both(kernel, field, y, t))


@pytest.mark.parametrize("name", ["sa", "usa", "usa-rescaled", "piecewise", "U-scalar", "per-trajectory", "overflow"])
def test_the_other_forms_give_the_generic_kernels_bits(kernel, name):
    rng = np.random.default_rng(3)
    y = ra.Sphere(D - 1).projection(rng.standard_normal((L, D)))
    b = 0
    if name == "sa":
        field = ra.sa(2.0, D, mask="causal")
    elif name == "usa":
        field = ra.usa(9.0, D)
    elif name == "usa-rescaled":
        field = ra.usa(1e300, D, rescaled=True)
    elif name == "piecewise":
        field = ra.AttentionField(PiecewiseConstantHeads([0.0, 0.2], rng.normal(size=(2, 2, D, D))), beta=1.5)
    elif name == "U-scalar":
        field = ra.AttentionField(rng.normal(size=(1, D, D)), 0.7 * np.eye(D), normalization="softmax")
    elif name == "per-trajectory":
        field = ra.AttentionField(rng.normal(size=(3, 1, D, D)), beta=np.array([0.5, 1.0, 2.0]))
        y = ra.Sphere(D - 1).projection(rng.standard_normal((3, L, D)))
        b = 2
    else:  # scores past the float range: inf / NaN in both
        field = ra.AttentionField(np.eye(D), beta=1e308, normalization="mean")
    _assert_same_bits(_both(kernel, field, y, 0.3, b))


def _solve(stepper, use_shaped, monkeypatch):
    rng = np.random.default_rng(5)
    field = ra.AttentionField(rng.normal(size=(2, D, D)), beta=3.0)
    y0 = ra.Sphere(D - 1).projection(rng.standard_normal((L, D)))
    used = []
    pick = _kernel.field_kernel

    def spy(ints, l, d):
        fn = pick(ints, l, d)
        used.append(fn is not kk.evaluate)
        return fn

    monkeypatch.setattr(_kernel, "field_kernel", spy)
    monkeypatch.setattr(shaped, "SHAPED_MAX_SIZE", L * D if use_shaped else 0)
    kw = dict(dt=0.05) if stepper in ("layer", "euler", "heun", "rk4") else dict(rtol=1e-9, atol=1e-9)
    sol = ra.integrate(field, y0, (0.0, 2.0), stepper, engine="compiled", **kw)
    assert used and all(u == use_shaped for u in used), (stepper, used)
    return sol


@pytest.mark.parametrize("stepper", sorted(_tables.SUPPORTED))
def test_a_solve_takes_the_same_steps_to_the_same_bits(kernel, stepper, monkeypatch):
    a = _solve(stepper, False, monkeypatch)
    b = _solve(stepper, True, monkeypatch)
    assert np.array_equal(a.t, b.t) and np.array_equal(a.y, b.y)
    assert (a.nfev, a.n_steps, a.n_rejected) == (b.nfev, b.n_steps, b.n_rejected)


def test_applies_to_small_attention_shapes_only():
    pack = kk.pack_field(ra.usa(1.0, 3), (4, 3))
    assert shaped.applies(pack.ints, 4, 3) and shaped.applies(pack.ints, 21, 3)
    assert not shaped.applies(pack.ints, 22, 3)  # l d = 66 > SHAPED_MAX_SIZE
    ln = ra.layernorm(ra.usa(1.0, 3), "pre")
    assert not shaped.applies(kk.pack_field(ln, (4, 3)).ints, 4, 3)
    assert not shaped.applies(kk.pack_field(CircleField(1.0, "sa"), (4, 1)).ints, 4, 1)


def test_ready_is_per_shape_and_read_from_the_cache(kernel):
    """Another process finds (4, 3) in the on-disk cache (each shape's kernel has a name, and cache
    entries, of its own) and not (5, 3), which nobody compiled; neither check compiles."""
    code = ("from riemattn.dynamics.kernels import _kernel_shaped as s; "
            "from riemattn.solvers.compiled import _kernel; sig = _kernel.evaluate_type().signature; "
            "print(s.ready(5, 3, sig), s.ready(4, 3, sig), sum(s.shaped(4, 3)._cache_misses.values()), "
            "len(s.shaped(5, 3).overloads))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    # (4, 3) loaded with no cache miss (numba's count of compilations after a failed lookup), and
    # nothing compiled for (5, 3)
    assert out.stdout.split() == ["False", "True", "0", "0"], out.stdout


def test_one_background_shape_compile_at_a_time(monkeypatch):
    """A sweep over shapes starts one process, and the next shape once it has ended (asked again)."""

    class Proc:
        pid, running = 1, True

        def poll(self):
            return None if self.running else 0

    started = []
    monkeypatch.setenv(_background.ENV, "1")
    monkeypatch.setattr(_background, "_SHAPES", {})
    monkeypatch.setattr(_background, "_spawn", lambda argv: started.append(argv) or Proc())
    assert _background.start_shape(7, 3) is True
    assert _background.start_shape(8, 3) is False and _background.start_shape(7, 3) is False
    _background._SHAPES[(7, 3)].running = False
    assert _background.start_shape(8, 3) is True
    assert started == [["shape", "7", "3"], ["shape", "8", "3"]]


def test_warmup_starts_no_shape_compile_of_its_own(monkeypatch):
    """``warmup``'s own solves (2 x 3 tokens) are no shape to compile: before, ``riemattn warmup``
    left a background process compiling 2 x 3."""
    class Proc:
        pid = 1

        def poll(self):
            return None

    started = []
    monkeypatch.setenv(_background.ENV, "1")
    monkeypatch.setattr(_background, "_SHAPES", {})
    monkeypatch.setattr(_background, "_spawn", lambda argv: started.append(argv) or Proc())
    monkeypatch.setattr(_kernel, "_NOT_READY", {})
    monkeypatch.setattr(_kernel, "_READY", set())
    from riemattn.solvers.compiled import _warmup

    # warmup's solve of the adaptive loop (compiled by other tests anyway) is enough to ask for the
    # 2 x 3 shape; the other parts would compile the fixed-step and lane loops here for nothing
    monkeypatch.setattr(_warmup, "TASKS", tuple(t for t in _warmup.TASKS if t[0] == "adaptive loop"))
    assert len(_warmup.TASKS) == 1
    ra.warmup(progress=False)
    assert started == [] and _background._SHAPES == {}
    assert _background.start_shape(7, 3) is True and started == [["shape", "7", "3"]]  # (outside, as before)


def test_no_background_compile_where_switched_off(monkeypatch):
    monkeypatch.setenv(_background.ENV, "0")
    monkeypatch.setattr(_background, "_SHAPES", {})
    assert _background.start_shape(7, 3) is False and _background._SHAPES == {}


@pytest.mark.parametrize("bad,error,message", [
    ((4, 3), ValidationError, r"shapes must be a sequence of \(l, d\) pairs"),
    ([(4,)], ValidationError, r"shapes must be a sequence of \(l, d\) pairs"),
    (7, ValidationError, r"shapes must be a sequence of \(l, d\) pairs"),
    (["4x3"], ValidationError, r"shapes must be a sequence of \(l, d\) pairs"),
    ([(4, 0)], ValidationError, r"shapes\[0\] \(d\) must be >= 1, got 0"),
    ([(3, 2), (4.5, 3)], InputTypeError, r"shapes\[1\] \(l\) must be an integer"),
    ([(True, 3)], InputTypeError, r"shapes\[0\] \(l\) must be an integer"),
])
def test_warmup_shapes_bad_input_names_the_argument(bad, error, message):
    with pytest.raises(error, match=message):
        ra.warmup(progress=False, shapes=bad)


def test_warmup_compiles_the_shapes_asked_for(kernel, capsys):
    """``ra.warmup(shapes=...)`` and ``riemattn warmup --shape LxD`` (4 x 3: compiled by the fixture,
    so loaded here) report the shape's part and leave it ready."""
    from riemattn.cli import main

    seconds = ra.warmup(progress=False, shapes=[(L, D)])
    assert f"shape {L} x {D}" in seconds
    assert main(["warmup", "--no-progress", "--shape", f"{L}x{D}"]) == 0
    assert f"shape {L} x {D}" in capsys.readouterr().out
    assert shaped.ready(L, D, _kernel.evaluate_type().signature)
    with pytest.raises(SystemExit):
        main(["warmup", "--shape", "4by3"])
    assert "expected LxD" in capsys.readouterr().err


def test_two_shapes_from_two_processes_each_run_their_own_code():
    """Two shapes compiled by two processes (as the background compiles do), then both used in a
    third, each twice, alternately: every solve runs its own shape's kernel. numba names machine
    code after the function and a counter of the compiling process, and the loops find a kernel's
    code by that name: with one name for every shape, the first shape ran the second's code once
    both were loaded (NaN here, where l d is the same). The engines take the same steps, and each
    step's values agree to a few ulp: within 100 eps per step."""
    shapes = ((7, 2), (2, 7))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    head = ("from riemattn.dynamics.kernels import _kernel_shaped as s; "
            "from riemattn.solvers.compiled import _kernel; sig = _kernel.evaluate_type().signature; ")
    procs = [subprocess.Popen([sys.executable, "-c", head + f"s.compile_now({l}, {d}, sig)"], env=env, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for l, d in shapes]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    code = head + (
        "import numpy as np, riemattn as ra\n"
        "for l, d in [(7, 2), (2, 7), (7, 2), (2, 7)]:\n"
        "    rng = np.random.default_rng(l)\n"
        "    y0 = rng.normal(size=(l, d)); y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)\n"
        "    f = ra.AttentionField(rng.normal(size=(d, d)))\n"
        "    kw = dict(rtol=1e-9, atol=1e-9, saveat=[1.0])\n"
        "    a = ra.integrate(f, y0, (0, 1), 'dopri5', engine='compiled', **kw)\n"
        "    b = ra.integrate(f, y0, (0, 1), 'dopri5', engine='numpy', **kw)\n"
        "    print(s.ready(l, d, sig), a.engine, a.n_steps == b.n_steps, a.n_steps, float(np.abs(a.y - b.y).max()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line.split() for line in out.stdout.strip().splitlines()]
    assert len(lines) == 4, out.stdout
    for ready, engine, same_steps, steps, diff in lines:
        assert (ready, engine, same_steps) == ("True", "compiled", "True"), out.stdout
        assert float(diff) <= 100 * int(steps) * np.finfo(float).eps, out.stdout
