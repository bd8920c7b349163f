"""Long metastable plateaus on the sphere: the stiff steppers' field form and their precision limit.

The configuration is the published dynamic-metastability code's (Geshkovski, Koubbi, Polyanskiy,
Rigollet, arXiv 2410.06833; github HugoKoubbi/2024-transformers-dotm, ``staircase`` script): n = 5
particles at angles 0.5 (0, 0.5, 2, 4, 7) log(2000) / sqrt(2000), integrated with rescaled USA at
beta = 1000 on S^1 in R^2. Its merges (cluster count 5 -> 4 -> 3 -> 2) come at rescaled times
s = 5.0, 5.27e3 and 4.56e12; the plateau before the third lasts 4.5e12.
"""

import numpy as np

import riemattn as ra
from riemattn.analysis.events import cluster_merges
from riemattn.dynamics._tangent import on_manifold
from riemattn.dynamics.circle import CircleField, to_points
from riemattn.solvers.rosenbrock import SOLVE_LIMIT, ProjectedRodas4P

BETA = 1000.0
TH0 = 0.5 * np.array([0.0, 0.5, 2.0, 4.0, 7.0]) * np.log(2000.0) / np.sqrt(2000.0)
#: SciPy Radau on the angle equations with their exact Jacobian, rtol 1e-10, atol 1e-12, merge
#: events on the largest edges of the minimum spanning tree of chord lengths (crossing 0.01),
#: measured once (about 11 s; the solver of tests/suites/test_low_temperature.py::_radau_merge_time).
#: LSODA at the same tolerance gives 5.000189471, 5274.330865, 4.556052464e12 (3.4e-7 relative
#: on the third: that merge time's own conditioning, see below).
RADAU_MERGES = np.array([5.000189469470925, 5274.331072067328, 4556054014510.574])


def test_difference_form_is_the_field_with_relative_rounding():
    """At a collapsed cluster (3 bitwise-equal tokens) and far tokens, the field's tangent part is
    e^{-beta delta^2/2}-small (about 1e-17 here); ``__call__`` projects an update of size 3/5 and
    carries an absolute rounding of eps * 3/5 ~ 1e-16, the difference form (D) a relative one.
    Reference: the angle equations (sin of exact angle differences), mapped to the tangent lines."""
    th = np.array([0.0708, 0.0708, 0.0708, 0.3399, 0.5948])
    y = to_points(th)
    field = ra.usa(BETA, 2, rescaled=True)
    tang = np.stack([-np.sin(th), np.cos(th)], -1)
    ref = CircleField(BETA, "usa", rescaled=True)(0.0, th[:, None])[:, 0]
    D = on_manifold(field, 0.0, y)
    # rounding: the angle -> point map and the far weights, a few eps relative (|ref| is the scale)
    np.testing.assert_allclose(np.sum(D * tang, -1), ref, rtol=1e-12, atol=0)
    assert np.max(np.abs(np.sum(D * y, -1))) <= 4 * np.finfo(float).eps * np.max(np.abs(ref))  # no normal part
    # the same function: equal to __call__ within __call__'s own rounding eps |f_i|
    np.testing.assert_allclose(D, field(0.0, y), rtol=0, atol=4 * np.finfo(float).eps)


def test_sphere_crosses_the_metastable_plateaus_as_fast_as_the_angles():
    """Before the difference form, the rounding eps |f_i| of the field (1e-16) against a true drift of
    2e-17 held RODAS4P's steps near tol / eps = 1e8 on the third plateau: 54 381 steps to s = 1e13
    (``"auto"``: 64 512), against 748 for the same equations in angles. Now the sphere and the
    angle runs integrate the same ODE with the same method and tolerance, and take the same
    number of steps up to their different error norms (measured 763 against 748; bound 1.5x).
    max_steps = 5 000 makes the run fail fast where the plateau is not crossed in few steps."""
    kw = dict(rtol=1e-8, atol=1e-10, max_steps=5000)
    angles = ra.integrate(CircleField(BETA, "usa", rescaled=True), TH0[:, None], (0.0, 1e13), "rodas4p", **kw)
    assert angles.success
    events = cluster_merges(0.01, [4, 3, 2])
    for stepper in ("rodas4p", "auto"):
        sol = ra.integrate(ra.usa(BETA, 2, rescaled=True), to_points(TH0), (0.0, 1e13), stepper, event_tol=1e-8,
                           events=events, **kw)
        assert sol.success and sol.n_steps <= 1.5 * angles.n_steps, (stepper, sol.n_steps, angles.n_steps)
        # Merge times against Radau. A plateau's length T ~ e^{beta (1 - cos delta)} makes
        # dT / T = beta sin(delta) d(delta) ~ 250 d(delta) for the third merge (delta = 0.255): an
        # angle error of 1e-9 (rtol 1e-8 over the run) moves it by 2.5e-7 relative; Radau and LSODA
        # at rtol 1e-10 differ by 3.4e-7. Bound 5e-6 on the third, 1e-6 on the first two.
        rel = np.abs(sol.events.t - RADAU_MERGES) / RADAU_MERGES
        assert np.all(rel[:2] <= 1e-6) and rel[2] <= 5e-6, (stepper, rel)


def test_steps_beyond_the_precision_of_the_solve_are_rejected():
    """A step with h gamma eps |J|_inf > SOLVE_LIMIT cannot resolve the neutral directions of J (the
    rotation of a cluster, whose eigenvalue 1 / (h gamma) of I / (h gamma) - J falls below the
    rounding eps |J| of the solve): RODAS4P would take it, move nothing and estimate an error of 0,
    so that a plateau longer than about 1e16 (the final merge of the configuration above, at
    s ~ 3.4e31) was stepped over silently. Such steps are rejected (error inf); shorter ones not."""
    y = to_points(np.array([0.0708731, 0.0708731, 0.0708731, 0.4673101, 0.4673101]))
    field = ra.usa(BETA, 2, rescaled=True)
    st = ProjectedRodas4P()
    J = st.step(field, 0.0, y, 1.0).stages[2]
    h_max = SOLVE_LIMIT / (np.finfo(float).eps * st.tableau.gamma * np.max(np.sum(np.abs(J), -1)))
    assert 1e15 < h_max < 1e17
    assert np.all(np.isfinite(st.step(field, 0.0, y, 0.5 * h_max).error))
    assert np.all(np.isinf(st.step(field, 0.0, y, 2.0 * h_max).error))
    # per trajectory: a batch with one long and one short step
    res = st.step(field, 0.0, np.stack([y, y]), np.array([2.0 * h_max, 0.5 * h_max]))
    assert np.isinf(res.error[0]).all() and np.isfinite(res.error[1]).all()


def test_solve_limit_can_be_turned_off_and_the_compiled_engine_refuses_it():
    """``ProjectedRosenbrock(solve_limit=None)`` (for Jacobians whose structure keeps the solve
    accurate, e.g. the triangular causal one) takes the step the default rejects; the compiled
    engine runs the default limit only, so it refuses another one by name."""
    import pytest

    from riemattn.errors import UnsupportedByEngine

    y = to_points(np.array([0.0708731, 0.0708731, 0.0708731, 0.4673101, 0.4673101]))
    field = ra.usa(BETA, 2, rescaled=True)
    default, off = ProjectedRodas4P(), ProjectedRodas4P(solve_limit=None)
    J = default.step(field, 0.0, y, 1.0).stages[2]
    h = 2.0 * SOLVE_LIMIT / (np.finfo(float).eps * default.tableau.gamma * np.max(np.sum(np.abs(J), -1)))
    assert np.all(np.isinf(default.step(field, 0.0, y, h).error))
    assert np.all(np.isfinite(off.step(field, 0.0, y, h).error))
    with pytest.raises(UnsupportedByEngine, match="solve_limit"):
        ra.integrate(field, y, (0.0, 1.0), off, engine="compiled")
