"""Hypothesis strategies for the property tests of the theorems (the table in docs/diagnostics.md).

Every strategy draws *small* problems (d <= 5, l <= 5, h <= 3) so that one example costs
milliseconds: the ``ci`` profile runs 200 examples per property.

* :func:`orthogonal_matrices`, :func:`spd_matrices` -- SPD matrices with bounded condition number.
* :func:`time_varying_P` -- bounded P_eta(t) as a random sum of sinusoids (with a norm bound).
* :func:`tokens_on_ellipsoid`, :func:`tokens_in_hemisphere` -- token configurations on E_W.
* :func:`symmetric_U` -- symmetric U with a simple positive top eigenvalue (and its eigenvector).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


def _floats(lo, hi):
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def _matrix(shape, lo=-1.0, hi=1.0):
    return hnp.arrays(np.float64, shape, elements=_floats(lo, hi))


@st.composite
def orthogonal_matrices(draw, d):
    """A d x d orthogonal matrix (Q factor of a random matrix, made well defined by sign fixing)."""
    # |A_ij| <= 1, so A + (d + 1) I is strictly diagonally dominant, hence invertible: R has a
    # nonzero diagonal and Q is orthogonal for every draw (a shift of 3 allowed singular A at d >= 4,
    # which Hypothesis found: a zero column of Q and a singular "SPD" W).
    A = draw(_matrix((d, d))) + (d + 1.0) * np.eye(d)
    Q, R = np.linalg.qr(A)
    return Q * np.where(np.diag(R) < 0, -1.0, 1.0)


@st.composite
def spd_matrices(draw, d, max_cond=10.0):
    """SPD (d, d) with eigenvalues in [1, max_cond] (condition number <= max_cond)."""
    Q = draw(orthogonal_matrices(d))
    lam = np.array(draw(st.lists(_floats(1.0, max_cond), min_size=d, max_size=d)))
    W = (Q * lam) @ Q.T
    return 0.5 * (W + W.T)


@st.composite
def W_or_identity(draw, d, max_cond=10.0):
    """None (the sphere) or a random SPD W: both ellipsoid and sphere cases get drawn."""
    if draw(st.booleans()):
        return None
    return draw(spd_matrices(d, max_cond))


@dataclass
class TimeVaryingP:
    """P_eta(t) = B_eta + sum_k A_{eta,k} sin(omega_k t + phi_k): bounded, uniformly continuous.

    ``bound[eta]`` is an upper bound of the spectral norm of P_eta(t) for all t (sum of Frobenius
    norms of B_eta and the A_{eta,k})."""

    B: np.ndarray  # (h, d, d)
    A: np.ndarray  # (K, h, d, d)
    omega: np.ndarray  # (K,)
    phi: np.ndarray  # (K,)

    def __post_init__(self):
        self._A2 = self.A.reshape(self.A.shape[0], self.B.size)

    def __call__(self, t):
        if self._A2.shape[0] == 0:
            return self.B
        s = np.sin(self.omega * t + self.phi)
        return self.B + (s @ self._A2).reshape(self.B.shape)

    @property
    def bound(self):
        return np.linalg.norm(self.B, axis=(-2, -1)) + np.sum(np.linalg.norm(self.A, axis=(-2, -1)), axis=0)


@st.composite
def time_varying_P(draw, h, d, scale=1.0, max_terms=2, max_omega=6.0):
    """Bounded time-varying P_eta(t), shape (h, d, d), entries of size <= ``scale`` per term."""
    K = draw(st.integers(0, max_terms))
    B = draw(_matrix((h, d, d), -scale, scale))
    A = draw(_matrix((K, h, d, d), -scale, scale))
    omega = draw(hnp.arrays(np.float64, (K,), elements=_floats(0.0, max_omega)))
    phi = draw(hnp.arrays(np.float64, (K,), elements=_floats(0.0, 2 * np.pi)))
    return TimeVaryingP(B, A, omega, phi)


def _project(x, W):
    if W is None:
        return x / np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.sqrt(np.einsum("...i,ij,...j->...", x, W, x))[..., None]


@st.composite
def tokens_on_ellipsoid(draw, l, d, W=None):
    """l tokens on E_W (the sphere for W=None): random nonzero vectors projected by pi_W."""
    x = draw(_matrix((l, d)))
    assume(np.all(np.linalg.norm(x, axis=-1) > 1e-2))
    return _project(x, W)


@st.composite
def unit_vectors(draw, d):
    x = draw(_matrix((d,)))
    assume(np.linalg.norm(x) > 1e-2)
    return x / np.linalg.norm(x)


@st.composite
def tokens_in_hemisphere(draw, l, d, W=None, min_margin=1e-3, v=None):
    """(v, y): a unit v (drawn unless given) and l tokens on E_W inside the open hemisphere
    H+(v) = {y : v^T y > 0}.

    Tokens on the wrong side are reflected through v-perp (x - 2 (v^T x) v) before the projection
    pi_W (which keeps the sign of v^T x); ``min_margin`` keeps them off the boundary.
    """
    v = draw(unit_vectors(d)) if v is None else np.asarray(v, dtype=float)
    x = draw(_matrix((l, d)))
    s = x @ v
    x = x - 2.0 * np.minimum(s, 0.0)[:, None] * v
    x = x + min_margin * v
    assume(np.all(np.linalg.norm(x, axis=-1) > 1e-2))
    return v, _project(x, W)


@st.composite
def symmetric_U(draw, d, min_gap=0.3, dominant=None):
    """(U, v): symmetric U with a simple top eigenvalue lam_1 in [0.5, 2] (gap >= min_gap * lam_1)
    and unit eigenvector v. ``dominant=True`` also makes lam_1 >= |lam_min| (lam_1 = spectral
    radius); ``False`` allows more negative eigenvalues; None draws either."""
    Q = draw(orthogonal_matrices(d))
    lam1 = draw(_floats(0.5, 2.0))
    if dominant is None:
        dominant = draw(st.booleans())
    lo = -lam1 if dominant else -3.0 * lam1
    rest = draw(st.lists(_floats(lo, (1 - min_gap) * lam1), min_size=d - 1, max_size=d - 1))
    lam = np.array([lam1] + rest)
    U = (Q * lam) @ Q.T
    return 0.5 * (U + U.T), Q[:, 0].copy()


dims = st.integers(2, 5)
token_counts = st.integers(2, 5)
head_counts = st.integers(1, 3)
