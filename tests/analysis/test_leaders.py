"""riemattn.diagnostics.leaders against an independent computation, ties included, and the dynamics.

The reference is a plain double loop over the tokens in Python floats (``fractions``-free: the
scores of the cases with ties are exact in binary, e.g. small integers and halves), applying the
definition: i is a leader when no j != i has s_ij >= s_ii - rtol max_k |s_ik| and s_ii is the row's
maximum within that tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import riemattn as ra
from riemattn.errors import RiemattnError

RTOL = 2.0**-40


def reference(y, P=None, rtol=RTOL):
    y = np.asarray(y, dtype=float)
    ell, d = y.shape
    P = np.eye(d) if P is None else np.asarray(P, dtype=float)
    out = []
    for i in range(ell):
        row = [sum(y[i, a] * P[a, b] * y[j, b] for a in range(d) for b in range(d)) for j in range(ell)]
        top, size = max(row), max(abs(s) for s in row)
        maximisers = [j for j in range(ell) if row[j] >= top - rtol * size]
        out.append(maximisers == [i])
    return np.array(out)


def test_exact_ties_by_hand():
    # two coincident tokens tie with each other: neither leads; the third is its own maximiser
    y = [[1.0, 0.0], [1.0, 0.0], [0.0, 2.0], [0.5, 0.5]]
    assert ra.diagnostics.leaders(y).tolist() == [False, False, True, False] == reference(y).tolist()
    # an exact tie with another token: <y0, y0> = 1 = <y0, y1> for y1 = (1, 1): y0 is not a leader
    y = [[1.0, 0.0], [1.0, 1.0]]
    assert ra.diagnostics.leaders(y).tolist() == [False, True] == reference(y).tolist()
    # one token is always its own unique maximiser
    assert ra.diagnostics.leaders([[0.3, -0.2]]).tolist() == [True]


def test_the_tie_tolerance_is_hardmax_s():
    # s_00 = 1, s_01 = 1 - 2^-42: a tie within rtol = 2^-40 (no leader), not within rtol = 0
    y = np.array([[1.0, 0.0], [1.0 - 2.0**-42, 0.0]])
    assert not ra.diagnostics.leaders(y)[0]
    assert ra.diagnostics.leaders(y, tie_rtol=0.0)[0]
    assert reference(y)[0] == ra.diagnostics.leaders(y)[0]
    # the field's own rule: hardmax attention of a leader's row is e_i
    field = ra.AttentionField(np.eye(2), W="flat", normalization="hardmax")
    A = field.attention(0.0, y)[0]
    assert A[0, 0] == 0.5 and A[0, 1] == 0.5


@given(arrays(np.int8, st.tuples(st.integers(1, 7), st.integers(1, 3)), elements=st.integers(-3, 3)),
       st.sampled_from([None, "spd", "indefinite", "nonsymmetric"]), st.integers(0, 2**32 - 1))
def test_agrees_with_the_reference_on_integer_clouds_full_of_ties(y, kind, seed):
    """Small integer tokens (and P with half-integer entries): every score is exact, ties are frequent."""
    y = y.astype(float) / 2
    d = y.shape[1]
    rng = np.random.default_rng(seed)
    A = rng.integers(-2, 3, (d, d)) / 2
    P = {None: None, "spd": A @ A.T + np.eye(d), "indefinite": A + A.T, "nonsymmetric": A}[kind]
    np.testing.assert_array_equal(ra.diagnostics.leaders(y, P), reference(y, P))


def test_batched_with_per_trajectory_P():
    rng = np.random.default_rng(0)
    y = rng.standard_normal((3, 4, 9, 3))
    A = rng.standard_normal((4, 3, 3))
    P = A @ np.swapaxes(A, -1, -2) + 0.1 * np.eye(3)  # (4, d, d): one P per trajectory of the last batch axis
    got = ra.diagnostics.leaders(y, P)
    assert got.shape == (3, 4, 9) and got.dtype == bool
    for a in range(3):
        for b in range(4):
            np.testing.assert_array_equal(got[a, b], reference(y[a, b], P[b]))


def test_leaders_never_move_under_hardmax_and_are_hull_vertices():
    """The dynamics the diagnostic describes: leaders' updates are zero; each is a hull vertex."""
    from scipy.spatial import ConvexHull

    rng = np.random.default_rng(5)
    y0 = rng.standard_normal((20, 2))
    lead = ra.diagnostics.leaders(y0)
    assert lead.any()
    field = ra.AttentionField(np.eye(2), W="flat", normalization="hardmax")
    step = ra.integrate(field, y0, (0.0, 0.2), "layer", dt=0.2, engine="numpy").y[-1]
    np.testing.assert_array_equal(step[lead], y0[lead])  # x + tau (x - x): exactly x
    assert not np.array_equal(step[~lead], y0[~lead])
    assert set(np.flatnonzero(lead)) <= set(ConvexHull(y0).vertices)


@pytest.mark.parametrize("bad, match", [
    (dict(y=[[1.0, np.nan]]), "y"),
    (dict(y=[1.0, 2.0]), "y"),
    (dict(y=[[1.0, 0.0]], P=np.eye(3)), "P"),
    (dict(y=[[1.0, 0.0]], P=[[np.inf, 0], [0, 1]]), "P"),
    (dict(y=np.ones((2, 3, 2)), P=np.ones((4, 2, 2))), "P"),
    (dict(y=[[1.0, 0.0]], tie_rtol=-1.0), "tie_rtol"),
    (dict(y=[[1e200, 0.0], [0.0, 1.0]]), "overflow"),
])
def test_bad_input_is_named(bad, match):
    with pytest.raises(RiemattnError, match=match):
        ra.diagnostics.leaders(**bad)
