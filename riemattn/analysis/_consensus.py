"""ICML Theorem 4.5 (causal attention, symmetric U): the consensus points and the predicted limit.

Private module of :mod:`riemattn.analysis.theory`, which re-exports :func:`consensus_points` and
:func:`predicted_consensus` (their documented home).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_positive, check_square_matrix, check_tokens
from ..errors import ValidationError

__all__ = ["consensus_points", "predicted_consensus"]


def consensus_points(U, *, rtol: float = 1e-10) -> np.ndarray:
    r"""The two candidate consensus points +-v of ICML Theorem 4.5.

    Parameters
    ----------
    U : array_like, shape (d, d)
        Symmetric value matrix whose largest eigenvalue is positive and simple.
    rtol : float
        Relative tolerance for the symmetry and simplicity checks.

    Returns
    -------
    ndarray, shape (2, d)
        ``[v, -v]`` with v the unit eigenvector of the top eigenvalue, signed so that its
        largest-magnitude component is positive.

    Raises
    ------
    ValidationError
        If U is not symmetric, its top eigenvalue is not positive, or not simple.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Theorem 4.5
    (= ARXIV Theorem 6.1).

    Examples
    --------
    >>> import numpy as np
    >>> from riemattn.analysis.theory import consensus_points
    >>> consensus_points(np.diag([0.5, 2.0, -1.0]))
    array([[ 0.,  1.,  0.],
           [-0., -1., -0.]])
    """
    U = check_square_matrix(U, "U")
    rtol = check_positive(rtol, "rtol")
    scale = max(float(np.max(np.abs(U))), 1e-300)
    asym = float(np.max(np.abs(U - U.T)))
    if asym > rtol * scale:
        raise ValidationError(f"U must be symmetric; max |U - U^T| = {asym:.3g}.")
    lam, vecs = np.linalg.eigh(0.5 * (U + U.T))
    if lam[-1] <= 0.0:
        raise ValidationError(f"U's largest eigenvalue must be positive, got {lam[-1]:.6g}.")
    if U.shape[0] > 1 and lam[-1] - lam[-2] <= rtol * scale:
        raise ValidationError(
            f"U's largest eigenvalue must be simple; the top two are {lam[-1]:.6g} and {lam[-2]:.6g}."
        )
    v = vecs[:, -1]
    v = v * np.sign(v[np.argmax(np.abs(v))])
    return np.stack([v, -v])


def predicted_consensus(U, y0) -> np.ndarray:
    r"""Limit predicted by ICML Theorem 4.5 for causal attention from initial tokens y0.

    If every token of a configuration satisfies s vᵀ y_i(0) > 0 for one sign s, the theorem
    predicts y_i(t) -> s v for every i.

    Parameters
    ----------
    U : array_like, shape (d, d)
        Symmetric, with a simple positive top eigenvalue.
    y0 : array_like, shape (..., l, d)
        Initial tokens on the unit sphere.

    Returns
    -------
    ndarray, shape (..., d)
        s v, or a row of NaN where the tokens are not all strictly on one side of v⊥ (the theorem
        makes no prediction there).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Theorem 4.5.
    """
    v = consensus_points(U)[0]
    y0 = check_tokens(y0, "y0", v.shape[0])
    s = y0 @ v
    pos = np.all(s > 0, axis=-1)
    neg = np.all(s < 0, axis=-1)
    sign = np.where(pos, 1.0, np.where(neg, -1.0, np.nan))
    return sign[..., None] * v


consensus_points.__module__ = predicted_consensus.__module__ = "riemattn.analysis.theory"  # documented there
