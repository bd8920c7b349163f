"""Test problems with references that do not use riemattn's integrators.

- GLPR's SA/USA on S^1 against the angle ODE (GLPR eq. 7.1) solved by SciPy's DOP853;
- any field on the sphere against SciPy's DOP853 on the lifted field G(x) = |x| F(x / |x|)
  (the field evaluated on the sphere, so the tight reference is not slowed down by the stiff
  radial mode that the raw field has off the sphere).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy.integrate import solve_ivp

import riemattn as ra
from riemattn.dynamics.circle import CircleField, from_points, to_points, wrap

TIGHT = dict(method="DOP853", rtol=2.5e-14, atol=1e-14)


def lifted_reference(field, y0, T, t0=0.0, t_eval=None):
    """SciPy DOP853 at its tightest tolerances on G(t, x) = |x| F(t, x / |x|), shape of y0 (or (m,) + shape)."""
    shape = y0.shape

    def rhs(t, x):
        X = x.reshape(shape)
        r = np.linalg.norm(X, axis=-1, keepdims=True)
        return (r * field(t, X / r)).ravel()

    sol = solve_ivp(rhs, (t0, T), y0.ravel(), t_eval=t_eval, **TIGHT)
    assert sol.success
    if t_eval is None:
        out = sol.y[:, -1].reshape(shape)
        return out / np.linalg.norm(out, axis=-1, keepdims=True)
    out = sol.y.T.reshape((-1,) + shape)
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def glpr_field(model, beta, d):
    return (ra.sa if model == "sa" else ra.usa)(beta, d)


@lru_cache(maxsize=None)
def circle_case(model, beta, n=5, T=1.0, seed=3):
    """(field, y0, reference y(T)) for SA/USA on S^1 with n random tokens; reference from the angle ODE."""
    theta0 = np.random.default_rng(seed).uniform(-np.pi, np.pi, n)
    _, theta = CircleField(beta, model).solve(theta0, (0.0, T), rtol=1e-13, atol=1e-13)
    return glpr_field(model, beta, 2), to_points(theta0), to_points(theta[-1])


@lru_cache(maxsize=None)
def sphere_case(model, beta, n=6, T=1.0, seed=4):
    """(field, y0, reference y(T)) for SA/USA on S^2 with n random tokens."""
    rng = np.random.default_rng(seed)
    y0 = ra.Sphere(2).projection(rng.normal(size=(n, 3)))
    field = glpr_field(model, beta, 3)
    return field, y0, lifted_reference(field, y0, T)


def angle_error(y, ref):
    """Largest angle difference between two configurations on S^1."""
    return float(np.max(np.abs(wrap(from_points(y) - from_points(ref)))))
