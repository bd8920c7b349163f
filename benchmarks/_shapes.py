"""benchmarks/compiled.py (g): ensembles of constant-head softmax attention at several shapes.

The problem, for a shape (l tokens, d dimensions, h heads): tokens y_i on the sphere S^{d-1},
constant heads P_eta (eta = 1..h) with entries drawn from N(0, 1/d) (fixed seed per shape),
beta = 1, U = identity, full mask, "softmax" normalization (rows of each head's alpha sum to 1)::

    dy_i/dt = f_i - <y_i, f_i> y_i,   f_i = sum_eta sum_j alpha_ij^eta y_j,
    alpha_ij^eta = exp(y_i^T P_eta y_j) / sum_k exp(y_i^T P_eta y_k),

i.e. ``riemattn.AttentionField(P, normalization="softmax")``. B trajectories, tokens drawn from a
standard normal and projected. The horizon T = 20 covers the transient (see :data:`SHAPES`;
compiled.py prints every run's steps).

The same field is written twice more, independently of riemattn: a vectorised NumPy right-hand
side of the flattened batch (the SciPy reference solves it) and a JAX field of one trajectory
(diffrax solves it under ``jax.vmap``). :func:`check_jax` asserts the JAX field equals
riemattn's ``field(t, y)`` to 1e-12 (relative) before timing; tests/suites/test_benchmarks.py
checks both.
"""

from __future__ import annotations

import math

import numpy as np

#: (l, d, h, T), l x d from 8 x 4 to 32 x 8. With U = I the tokens cluster (or settle) within about
#: 10 time units: at tol 1e-9 one trajectory takes 80-95 dopri5 steps to T = 20 (measured on 4
#: trajectories per shape, NumPy engine), most of them in the transient; T = 40 adds about 6 steps,
#: and P scaled 3x adds about 10 (the steps stay accuracy-limited: 1e-5 / 1e-7 / 1e-9 take about
#: 20 / 40 / 90), so "a few hundred" steps is not reachable with constant heads and U = I.
SHAPES = ((8, 4, 1, 20.0), (16, 8, 2, 20.0), (32, 8, 1, 20.0))


def case_name(l, d, h, B):
    return f"shape{l}x{d}x{h}b{B}"


def parse(case):
    """``"shape16x8x2b100"`` -> (16, 8, 2, 100)."""
    dims, B = case[len("shape"):].split("b")
    l, d, h = (int(v) for v in dims.split("x"))
    return l, d, h, int(B)


def heads(l, d, h):
    """P, shape (h, d, d), entries N(0, 1/d), a fixed seed per shape."""
    rng = np.random.default_rng(7000 + 100 * l + 10 * d + h)
    return rng.standard_normal((h, d, d)) / math.sqrt(d)


def horizon(l, d, h):
    return next(T for (l_, d_, h_, T) in SHAPES if (l_, d_, h_) == (l, d, h))


def problem(case):
    """(field, y0 of shape (B, l, d), T) for a case name of :func:`case_name`."""
    import riemattn as ra

    l, d, h, B = parse(case)
    y0 = np.random.default_rng(11 + B).standard_normal((B, l, d))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    return ra.AttentionField(heads(l, d, h), normalization="softmax"), y0, horizon(l, d, h)


def numpy_rhs(P, shape):
    """rhs(t, x) of the flattened batch x (tokens of shape ``shape`` = (..., l, d)), in plain NumPy."""

    def rhs(t, x):
        Y = x.reshape(shape)[..., None, :, :]  # (..., 1, l, d)
        S = (Y @ P) @ np.swapaxes(Y, -1, -2)  # (..., h, l, l): s_ij = y_i^T P_eta y_j
        S -= S.max(axis=-1, keepdims=True)
        A = np.exp(S)
        A /= A.sum(axis=-1, keepdims=True)
        F = (A @ Y).sum(axis=-3)  # f_i = sum_eta sum_j alpha_ij^eta y_j
        Y = Y[..., 0, :, :]
        F -= np.sum(F * Y, axis=-1, keepdims=True) * Y
        return F.ravel()

    return rhs


def jax_field(P):
    """(jax, field) with field(t, y, args) -> F for one trajectory y of shape (l, d), in float64."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    Pj = jnp.asarray(P)

    def field(t, y, args=None):
        S = jnp.einsum("ia,hab,jb->hij", y, Pj, y)  # S[eta, i, j] = y_i^T P_eta y_j
        E = jnp.exp(S - jnp.max(S, axis=-1, keepdims=True))
        alpha = E / jnp.sum(E, axis=-1, keepdims=True)  # "softmax": rows sum to 1
        f = jnp.einsum("hij,jd->id", alpha, y)
        return f - jnp.sum(y * f, axis=-1, keepdims=True) * y

    return jax, field


def check_jax(case, n=16, seed=123):
    """Assert the JAX field equals riemattn's field(t, y) to 1e-12 (relative to max(1, |F|)), on
    random unit tokens and on tokens off the sphere (the formula, not only its restriction)."""
    field, y0, _ = problem(case)
    jax, jfield = jax_field(heads(*parse(case)[:3]))
    rng = np.random.default_rng(seed)
    worst = 0.0
    for scale in (None, 2.0):
        y = rng.standard_normal((n,) + y0.shape[1:])
        y = scale * y if scale else y / np.linalg.norm(y, axis=-1, keepdims=True)
        want = np.asarray(field(0.7, y))
        got = np.asarray(jax.vmap(jfield, in_axes=(None, 0))(0.7, y))
        worst = max(worst, float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want))))))
    assert worst <= 1e-12, f"the JAX field differs from riemattn's by {worst:.2e}"
    return worst


def reference(case, check=3):
    """y(T) by SciPy DOP853 at rtol = atol = 1e-13 on the flattened batch (NumPy right-hand side),
    renormalised, and the max difference to per-trajectory solves of the first ``check``
    trajectories (the batch's RMS error norm shares one step size over all of them)."""
    from scipy.integrate import solve_ivp

    _, y0, T = problem(case)
    P = heads(*parse(case)[:3])

    def solve(y):
        sol = solve_ivp(numpy_rhs(P, y.shape), (0.0, T), y.ravel(), method="DOP853", rtol=1e-13, atol=1e-13)
        assert sol.success, sol.message
        y = sol.y[:, -1].reshape(y.shape)
        return y / np.linalg.norm(y, axis=-1, keepdims=True)

    ref = solve(y0)
    sub = np.stack([solve(y0[b]) for b in range(min(check, len(y0)))])
    return ref, float(np.max(np.abs(sub - ref[:len(sub)])))
