"""The benchmark helpers that measurements rest on (benchmarks/ is not a package: imported by path)."""

import os
import sys

import numpy as np
import pytest

import riemattn as ra
from riemattn.experiments._papers import hemisphere_P

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
work_precision = pytest.importorskip("work_precision")


@pytest.mark.parametrize("stepper", ["dopri5", "dop853"])
def test_field_timer_does_the_same_work(stepper):
    """work_precision.py's zero-cost-engine bound times riemattn through FieldTimer: the run must
    be the run it stands for (same values, step counts and evaluations, compaction included),
    and the timer must see every field call."""
    field = ra.AttentionField(hemisphere_P, time_vectorized=True)
    y0 = work_precision.initial(6, 1)
    kw = dict(stepper=stepper, rtol=1e-7, atol=1e-7, saveat=[0.0, 0.5, 1.0])
    timer = work_precision.FieldTimer(field)
    timed = ra.integrate(timer, y0, (0.0, 1.0), **kw)
    plain = ra.integrate(field, y0, (0.0, 1.0), **kw)
    np.testing.assert_array_equal(timed.y, plain.y)
    np.testing.assert_array_equal(timed.per_trajectory.n_steps, plain.per_trajectory.n_steps)
    np.testing.assert_array_equal(timed.per_trajectory.nfev, plain.per_trajectory.nfev)
    assert timed.per_trajectory.n_steps.min() < timed.per_trajectory.n_steps.max()  # compacted
    assert timer.acc[1] == timed.nfev == plain.nfev
    assert timer.acc[0] > 0.0


def test_compiled_benchmark_mid_size_rhs_is_the_field():
    """benchmarks/compiled.py (e) times SciPy's DOP853 on a plain NumPy right-hand side: it must be
    riemattn's field (softmax attention, one head, sphere), at tokens other than the start too."""
    compiled = pytest.importorskip("compiled")
    field, rhs, y0, T = compiled.mid_problem()  # (asserts the two agree at y0)
    y = np.random.default_rng(5).standard_normal(y0.shape)
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    want = np.asarray(field(0.3, y))
    # the same products in other orders: 2 (l + d) eps times the terms' size (|y_i| = 1, |A| rows sum to 1)
    assert np.max(np.abs(rhs(0.3, y.ravel()).reshape(y.shape) - want)) <= 2 * sum(y0.shape) * np.finfo(float).eps * 4


def _random_tokens(shape, seed, on_sphere=True):
    y = np.random.default_rng(seed).standard_normal(shape)
    return y / np.linalg.norm(y, axis=-1, keepdims=True) if on_sphere else 2.0 * y


def _shapes_bound(l, d, h):
    """The same sums in other orders: per head, scores of d-term products and rows of l terms, so
    O((l + d) eps) relative; h heads add up (|f_i| <= h sum of convex combinations of unit
    vectors); 4 for the exponential, the normalisation and the projection."""
    return 4 * h * (l + d) * np.finfo(float).eps


@pytest.mark.parametrize("on_sphere", [True, False])
def test_compiled_benchmark_shapes_numpy_rhs_is_the_field(on_sphere):
    """benchmarks/compiled.py (g)'s reference solves a vectorised NumPy right-hand side of the whole
    batch: at every shape it must be riemattn's constant-head softmax field (on the sphere, and
    off it: the formula, not only its restriction)."""
    shapes = pytest.importorskip("_shapes")
    for l, d, h, _ in shapes.SHAPES:
        field, y0, _ = shapes.problem(shapes.case_name(l, d, h, 3))
        assert field.normalization == "softmax" and field.mask == "full"
        y = _random_tokens(y0.shape, 5, on_sphere)
        want = np.asarray(field(0.3, y))
        got = shapes.numpy_rhs(shapes.heads(l, d, h), y.shape)(0.3, y.ravel()).reshape(y.shape)
        scale = max(1.0, np.max(np.abs(y)) ** 3)  # off the sphere the terms grow: f_i ~ |y|, <y_i, f_i> y_i ~ |y|^3
        assert np.max(np.abs(got - want)) <= _shapes_bound(l, d, h) * scale, (l, d, h)


def test_compiled_benchmark_shapes_jax_rhs_is_the_field():
    """(g) times diffrax on a JAX field of one trajectory under jax.vmap: it must be the same field."""
    shapes = pytest.importorskip("_shapes")
    pytest.importorskip("jax")
    for l, d, h, _ in shapes.SHAPES:
        field, y0, _ = shapes.problem(shapes.case_name(l, d, h, 3))
        jax, jfield = shapes.jax_field(shapes.heads(l, d, h))
        y = _random_tokens(y0.shape, 6)
        got = np.asarray(jax.vmap(jfield, in_axes=(None, 0))(0.3, y))
        assert np.max(np.abs(got - np.asarray(field(0.3, y)))) <= _shapes_bound(l, d, h), (l, d, h)
