"""lost-in-the-middle: the model built from riemattn's parts against the paper's equation written out in
the angle (the particle model of Duerinckx, Geshkovski & Rossi's code, re-implemented here from its
formula, not imported), and the closed form against its defining series."""

from __future__ import annotations

import math

import numpy as np
import pytest

from riemattn.experiments import lost_in_the_middle as lim
from riemattn.solvers.core.integrate import integrate

EPS = np.finfo(float).eps


def weights(n, lam):
    """w_jk = e^{-(lam/n)(j - k)} / sum_{k' < j} e^{-(lam/n)(j - k')} for k < j; row 0 empty."""
    w = np.zeros((n, n))
    for j in range(1, n):
        c = [math.exp(-(lam / n) * (j - k)) for k in range(j)]
        w[j, :j] = np.array(c) / sum(c)
    return w


def force(theta, beta, w):
    """dtheta_j/dt = sum_{k<j} w_jk (-beta sin(theta_j - theta_k) e^{beta cos(theta_j - theta_k)})."""
    out = np.zeros_like(theta)
    for j in range(1, len(theta)):
        for k in range(j):
            diff = theta[j] - theta[k]
            out[j] += w[j, k] * (-beta * math.sin(diff) * math.exp(beta * math.cos(diff)))
    return out


def angular_velocity(field, theta):
    y = np.stack([np.cos(theta), np.sin(theta)], -1)
    F = field(0.0, y)
    return y[:, 0] * F[:, 1] - y[:, 1] * F[:, 0]


@pytest.mark.parametrize("n, beta, lam", [(2, 1.0, 1.0), (7, 0.3, 0.0), (16, 1.0, 1.0), (16, 4.0, 3.0), (33, 2.0, 0.5)])
def test_the_parts_are_the_papers_force(n, beta, lam):
    """Each term is a few roundings of beta e^beta (times its weight), n terms a row."""
    theta = np.random.default_rng(n).uniform(0, 2 * np.pi, n)
    got = angular_velocity(lim.field(n, beta, lam), theta)
    want = force(theta, beta, weights(n, lam))
    np.testing.assert_allclose(got, want, rtol=0, atol=16 * n * EPS * beta * math.exp(beta))
    assert got[0] == 0.0


def test_rkmk4_on_the_circle_is_the_authors_rk4_in_the_angle():
    """SO(2) is abelian: RKMK4's stages are rotations by the classical RK4 combinations of the angular
    velocities, so the trajectories agree to rounding: 400 steps, each a few roundings of the angle
    (|theta| <= 2 pi) and of the field (beta e^beta), amplified at most by the flow's growth e^{L t} with
    L <= 2 beta e^beta = 5.4 over t = 1 (a factor <= 230): bound 400 * 16 eps * 2 pi * 230 ~ 2e-9;
    measured 9.5e-15 (and 5.6e-15 at t = 10, N = 64 against the authors' script itself, run once by hand)."""
    n, beta, lam, dt, steps = 16, 1.0, 1.0, 0.0025, 400
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(4), 4)
    theta = np.linspace(0.1, 1.9, 4)[labels] * np.pi + rng.normal(0.0, 0.075, n)
    w = weights(n, lam)
    ref = theta.copy()
    for _ in range(steps):
        k1 = force(ref, beta, w)
        k2 = force(ref + 0.5 * dt * k1, beta, w)
        k3 = force(ref + 0.5 * dt * k2, beta, w)
        k4 = force(ref + dt * k3, beta, w)
        ref = ref + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    y0 = np.stack([np.cos(theta), np.sin(theta)], -1)
    y = integrate(lim.field(n, beta, lam), y0, (0.0, steps * dt), "rkmk4", dt=dt, engine="numpy").y[-1]
    diff = np.angle(np.exp(1j * (np.arctan2(y[:, 1], y[:, 0]) - ref)))
    assert np.abs(diff).max() <= 1e-10  # the bar, below the derived bound above
    assert np.abs(ref - theta).max() > 0.05  # the tokens moved


def psi_series(c, y, terms=200):
    total, term = 0.0, c
    for k in range(terms):
        total += term
        term *= c * y / ((k + 1) * (k + 2))
    return total


@pytest.mark.parametrize("lam", [0.0, 1.0, 2.5])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_closed_form_against_its_series(lam, n):
    """The Bessel form sqrt(c / y) I_1(2 sqrt(c y)) against the series sum c^{k+1} y^k / (k! (k+1)!)."""
    from scipy.special import iv

    beta, t = 1.3, 0.8
    s = np.linspace(0.02, 0.98, 25)
    got = lim.closed_form(s, t, beta, lam, n)
    for si, g in zip(s, got):
        Y = math.log(math.expm1(lam) / math.expm1(lam * si)) if lam else math.log(1 / si)
        pre = lam * math.exp(lam * si) / math.expm1(lam) if lam else 1.0
        want = pre * psi_series(n * n * iv(n, beta) * t, Y)
        assert abs(g - want) <= 64 * EPS * abs(want)


def test_the_closed_form_is_u_shaped_where_the_claim_is_checked():
    """beta = lambda = t = 1: interior minimum, both ends above it (the shape the claim looks for)."""
    s = np.linspace(0.01, 0.99, 99)
    c = lim.closed_form(s, 1.0, 1.0, 1.0)
    low = int(np.argmin(c))
    assert 0 < low < len(s) - 1 and c[0] > c[low] and c[-1] > c[low]
