"""meta-staircase: the published normalised-gradient iteration reproduced with riemattn, and the model pieces.

The published code (Geshkovski, Koubbi, Polyanskiy, Rigollet, arXiv 2410.06833, github
HugoKoubbi/2024-transformers-dotm, staircase.py) prints its initial angles with NumPy's 8 decimals;
here they are run at beta = 64 through an independent plain-loop transcription of its final loop
(gradient (1/n^2) sum_j -sin(theta_i - theta_j) e^{beta (cos - 1)}, step lr log(beta) g/|g|, the
snap of pairs within 1e-3 when |g| < 1e-5, energy (1/n^2) sum e^{beta (cos - 1)}), and through
riemattn's CircleField (``published_iteration``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from riemattn.experiments._staircase_model import (greedy_merges, normalised_energy, published_iteration,
                                                   staircase, two_cluster_log_time)

PRINTED = [0.0, 0.04249034, 0.16996135, 0.33992269, 0.59486471]  # print(theta0) of staircase.py


def _published_loop(theta0, beta, lr, iters):
    """The published final loop, written out with Python loops (no riemattn)."""
    theta = list(theta0)
    n = len(theta)
    out = []
    for _ in range(iters):
        g = [sum(-math.sin(theta[i] - theta[j]) * math.exp(beta * (math.cos(theta[i] - theta[j]) - 1.0))
                 for j in range(n)) / n**2 for i in range(n)]
        norm = math.sqrt(sum(v * v for v in g))
        if norm == 0.0:
            break
        theta = [theta[i] + lr * math.log(beta) * g[i] / norm for i in range(n)]
        if norm < 1e-5:
            for j in range(n):
                for k in range(j + 1, n):
                    if abs(theta[j] - theta[k]) < 1e-3:
                        theta[k] = theta[j]
        out.append(sum(math.exp(beta * (math.cos(a - b) - 1.0)) for a in theta for b in theta) / n**2)
    return np.array(out)


def test_published_iteration_reproduced_at_beta_64():
    iters = 6000
    ref = _published_loop(PRINTED, 64.0, 1e-5, iters)
    got = published_iteration(PRINTED, 64.0, 1e-5, iters)
    assert len(ref) == iters
    # same operations in another order: each step moves by lr log(beta) ~ 4e-5 along a direction computed to
    # ~1e-15, so the paths differ by rounding, <~ iters x 1e-16 x (energy Lipschitz ~ beta / n) ~ 1e-10 (measured 8e-16)
    assert np.max(np.abs(got - ref)) < 1e-10
    assert got[-1] > got[0] + 0.25  # and it went somewhere (0.40 -> 0.67): clusters merged


def test_greedy_merges_of_the_published_angles():
    got = greedy_merges(PRINTED)
    assert [(a, b) for a, b, _ in got] == [(1, 1), (2, 1), (1, 1), (3, 2)]
    # second merge: centroid of the first pair (0.02124517) to 0.16996135
    assert got[1][2] == pytest.approx(0.16996135 - 0.04249034 / 2, rel=1e-12)


def test_two_cluster_law_against_a_direct_solve():
    """Two particles: the merge time of the gap ODE, from SciPy's Radau, equals the quadrature."""
    from scipy.integrate import solve_ivp

    beta, gap, n, tol = 200.0, 0.2, 2, 1e-3

    def rhs(s, d):
        return [-(2.0 / n) * math.exp(beta * (math.cos(d[0]) - 1.0)) * math.sin(d[0])]

    hit = lambda s, d: d[0] - tol  # noqa: E731
    hit.terminal = True
    sol = solve_ivp(rhs, (0.0, 1e12), [gap], method="Radau", rtol=1e-10, atol=1e-14, events=hit)
    assert math.log(sol.t_events[0][0]) == pytest.approx(two_cluster_log_time(beta, gap, 2.0, n, tol), rel=1e-7)


def test_staircase_two_pairs_merge_times_and_levels():
    """Four particles in two pairs: energy levels 1/n, 1/2 and 1, merge times against the law."""
    theta0 = [0.0, 0.01, 0.3, 0.31]
    merges, path = staircase(theta0, 1000.0, tol=1e-6, stepper="dopri5", rtol=1e-10, atol=1e-12)
    assert [(m["w_a"], m["w_b"]) for m in merges][-1] == (2.0, 2.0)
    assert merges[-1]["energy"] == pytest.approx(1.0, abs=1e-8)
    assert normalised_energy(np.zeros(2), np.array([2.0, 2.0]), 1000.0, 4) == pytest.approx(1.0)
    law = two_cluster_log_time(1000.0, 0.3, 4.0, 4, 1e-6)
    assert math.log(merges[-1]["s"]) == pytest.approx(law, rel=1e-6)
