"""The hardmax leaders of a token configuration (re-exported by :mod:`riemattn.analysis.diagnostics`)."""

from __future__ import annotations

import numpy as np

from .._validation import as_token_array, check_finite, check_nonnegative, check_token_array
from ..dynamics._normalize import HARDMAX_RTOL, hardmax_weights
from ..errors import ValidationError

__all__ = ["leaders"]


def leaders(y, P=None, *, tie_rtol: float = HARDMAX_RTOL) -> np.ndarray:
    """The hardmax leaders: the tokens that are their own unique maximiser, shape (..., l), bool.

    Token i is a leader when its score with itself beats its score with every other token,
    s_ii > s_ij (j != i), with the scores s_ij = y_i^T P y_j of ``AttentionField(P,
    normalization="hardmax")`` and that field's tie rule: j is a maximiser of row i when
    s_ij >= max_k s_ik - tie_rtol * max_k |s_ik|, so a token tied with another within ``tie_rtol``
    (two coincident tokens, say) is not a leader. Under hardmax attention a leader's update is
    zero, and since every update is a convex combination of the tokens, it stays the unique
    maximiser of its own linear functional over their convex hull: leaders never move, and each is
    a vertex of the convex hull of the tokens.

    Parameters
    ----------
    y : array_like, shape (..., l, d)
        Tokens (any leading batch axes; R^d, no manifold needed).
    P : array_like, shape (d, d) or (..., d, d), optional
        The query-key product (batch axes broadcast against ``y.shape[:-2]``); None: the identity.
    tie_rtol : float, default 2**-40
        The relative tolerance of ties, as ``AttentionField``'s ``tie_rtol`` (0: exact ties only).

    References
    ----------
    Alcalde, Fantuzzi, Zuazua, "Clustering in pure-attention hardmax transformers and its role in
    sentiment analysis", SIAM J. Math. Data Sci. 7(3), 2025 (arXiv 2407.01602), the leaders.

    Examples
    --------
    >>> import riemattn as ra
    >>> ra.diagnostics.leaders([[1.0, 0.0], [0.0, 1.0], [0.2, 0.2], [1.0, 0.0]]).tolist()
    [False, True, False, False]
    """
    y = np.asarray(check_token_array(y, "y"))  # NumPy only (a CPU tensor is read as an array)
    d = y.shape[-1]
    if P is not None:
        P = np.asarray(check_finite(as_token_array(P, "P"), "P"))
        if P.ndim < 2 or P.shape[-2:] != (d, d):
            raise ValidationError(f"P must have shape (d, d) or (..., d, d) with d = {d}, got {P.shape}.")
        try:
            np.broadcast_shapes(P.shape[:-2], y.shape[:-2])
        except ValueError:
            raise ValidationError(f"P's batch axes {P.shape[:-2]} do not broadcast against the tokens' "
                                  f"{y.shape[:-2]}.") from None
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
        S = y @ np.swapaxes(y, -1, -2) if P is None else y @ P @ np.swapaxes(y, -1, -2)
    rtol = check_nonnegative(tie_rtol, "tie_rtol")
    if not np.isfinite(S).all():
        raise ValidationError("the scores y_i^T P y_j overflow (|y|^2 |P| beyond the float range); scale y or P.")
    # hardmax's own maximisers of each row (the field's code, layout [..., i, eta, j] with one head)
    E = hardmax_weights(S[..., :, None, :], None, rtol, None)[0][..., 0, :] > 0
    return np.diagonal(E, axis1=-2, axis2=-1) & (E.sum(axis=-1) == 1)
