r"""Common open hemispheres of token configurations: exact decision and largest-margin direction.

* :func:`in_common_hemisphere` -- whether the tokens of each configuration lie in one open
  hemisphere {x : vᵀ x > 0}, decided exactly (determinant certificates, Gilbert's min-norm point,
  linear programming).
* :func:`common_hemisphere` -- the unit v with the largest margin min_i vᵀ y_i / |y_i| (a
  least-distance program solved by NNLS), or None.

Both take tokens of shape ``(..., l, d)`` and are batched over the leading axes. They are
re-exported by :mod:`riemattn.analysis.diagnostics`, where they are documented for users
(docs/diagnostics.md).
"""

from __future__ import annotations

from itertools import combinations
from math import comb

import numpy as np
from scipy import sparse
from scipy.optimize import linprog, nnls

from .._backend import is_torch, to_numpy
from .._validation import check_flag, check_nonnegative, check_token_array
from ..errors import ValidationError


def _numpy(y):
    """Tokens as NumPy (a torch tensor is read as its values: the answer is a NumPy direction)."""
    return np.asarray(to_numpy(y), dtype=float) if is_torch(y) else y

__all__ = ["in_common_hemisphere", "common_hemisphere"]


# ----------------------------------------------------------------------------------------------
# common open hemisphere: {exists v : v^T y_i > 0 for all i}
# ----------------------------------------------------------------------------------------------
def _unit_rows(y, name="y") -> np.ndarray:
    norms = np.linalg.norm(y, axis=-1, keepdims=True)
    if np.any(norms == 0):
        raise ValidationError(f"{name} contains a zero token; a hemisphere test needs nonzero tokens.")
    return y / norms


def _gilbert(Y, iters=60):
    """Vectorized Gilbert iterations toward the min-norm point p of conv{Y_i}, Y (B, l, d) unit rows.

    If 0 is not in the hull, p / |p| converges to the max-margin direction; used only as a candidate
    certificate (its margin is evaluated exactly afterwards).
    """
    p = Y.mean(axis=-2)
    for _ in range(iters):
        s = np.einsum("bld,bd->bl", Y, p)
        q = Y[np.arange(Y.shape[0]), np.argmin(s, axis=-1)]
        diff = p - q
        den = np.einsum("bd,bd->b", diff, diff)
        num = np.einsum("bd,bd->b", p, diff)
        gamma = np.clip(np.divide(num, den, out=np.zeros_like(num), where=den > 0), 0.0, 1.0)
        p = p - gamma[:, None] * diff
    return p


def _small_det(A):
    """Determinants of (..., d, d) arrays; explicit formulas for d <= 3 (much faster than LAPACK
    on millions of tiny matrices)."""
    d = A.shape[-1]
    if d == 1:
        return A[..., 0, 0]
    if d == 2:
        return A[..., 0, 0] * A[..., 1, 1] - A[..., 0, 1] * A[..., 1, 0]
    if d == 3:
        a, b, c = A[..., 0, :], A[..., 1, :], A[..., 2, :]
        return (a[..., 0] * (b[..., 1] * c[..., 2] - b[..., 2] * c[..., 1])
                - a[..., 1] * (b[..., 0] * c[..., 2] - b[..., 2] * c[..., 0])
                + a[..., 2] * (b[..., 0] * c[..., 1] - b[..., 1] * c[..., 0]))
    return np.linalg.det(A)


def _simplex_certificate(Y, tol=1e-10, chunk=8192):
    """Combinatorial decision for points in general position. Y (B, l, d) unit rows, l >= d + 1.

    Returns (infeasible, feasible), two (B,) bool arrays; where both are False the configuration
    is undecided (some d tokens are nearly linearly dependent) and goes to the LP.

    By Cramer's rule the barycentric coordinates of 0 in the simplex S = (s_0, ..., s_d) are
    proportional to (-1)^k det(Y_{S minus s_k}); 0 is strictly inside iff these d x d determinants
    share one strict sign, which proves that no open hemisphere contains the points (Gordan's
    alternative). If every d of the tokens are linearly independent, 0 in conv{Y_i} forces
    0 = sum_k lam_k y_k over some d + 1 tokens with every lam_k > 0 (Caratheodory; fewer tokens or
    a zero coefficient would make <= d tokens linearly dependent): 0 strictly inside one simplex.
    So if no simplex contains 0, an open hemisphere exists (Gordan). Determinants of unit vectors (d <= 5)
    carry rounding errors < 1e-13, so |value| > tol = 1e-10 makes every sign conclusive.
    """
    B, n, d = Y.shape
    infeasible = np.zeros(B, dtype=bool)
    feasible = np.zeros(B, dtype=bool)
    facets = list(combinations(range(n), d))
    where = {f: k for k, f in enumerate(facets)}
    simplices = list(combinations(range(n), d + 1))
    F = np.array([[where[S[:k] + S[k + 1:]] for k in range(d + 1)] for S in simplices])  # (S, d + 1)
    sign = (-1.0) ** np.arange(d + 1)
    fidx = np.array(facets)
    for start in range(0, B, chunk):
        dets = _small_det(Y[start:start + chunk][:, fidx, :])  # (b, C(n, d))
        c = dets[:, F] * sign  # (b, S, d + 1)
        hit = np.any(np.all(c > tol, axis=-1) | np.all(c < -tol, axis=-1), axis=-1)
        general = np.all(np.abs(dets) > tol, axis=-1)
        infeasible[start:start + chunk] = hit
        feasible[start:start + chunk] = general & ~hit
    return infeasible, feasible


def _lp_decide(Y, tol, chunk=1000):
    """Exact LP feasibility test, many configurations per (block-diagonal) linprog call.

    For each configuration: maximize s subject to Y v >= s, -1 <= v_k <= 1, s <= 1. An open
    hemisphere exists iff s* > 0. The returned v is then re-checked exactly: feasible iff
    min_i Y_i . v / |v| > tol. Returns (margins, vs) with margins = -inf where infeasible.
    """
    B, n, d = Y.shape
    margin = np.full(B, -np.inf)
    V = np.full((B, d), np.nan)
    nv = d + 1
    for start in range(0, B, chunk):
        Yc = Y[start:start + chunk]
        b = Yc.shape[0]
        c = np.zeros((b, nv))
        c[:, -1] = -1.0
        rows = np.repeat(np.arange(b * n), nv)
        cols = (np.arange(b)[:, None, None] * nv + np.arange(nv)[None, None, :]).repeat(n, axis=1).ravel()
        vals = np.concatenate([-Yc, np.ones((b, n, 1))], axis=-1).ravel()
        A = sparse.csr_matrix((vals, (rows, cols)), shape=(b * n, b * nv))
        lo = np.tile(np.r_[-np.ones(d), -np.inf], b)
        hi = np.tile(np.r_[np.ones(d), 1.0], b)
        res = linprog(c.ravel(), A_ub=A, b_ub=np.zeros(b * n), bounds=np.stack([lo, hi], 1), method="highs")
        if res.status != 0:  # pragma: no cover - the LP is always feasible (v = 0, s = 0) and bounded
            raise RuntimeError(f"linprog failed on the hemisphere test: {res.message}")
        x = res.x.reshape(b, nv)
        v = x[:, :d]
        nrm = np.linalg.norm(v, axis=-1)
        ok = (x[:, -1] > 0) & (nrm > 0)
        v = np.divide(v, nrm[:, None], out=np.zeros_like(v), where=nrm[:, None] > 0)
        m = np.einsum("bld,bd->bl", Yc, v).min(axis=-1)
        ok &= m > tol
        margin[start:start + b] = np.where(ok, m, -np.inf)
        V[start:start + b] = np.where(ok[:, None], v, np.nan)
    return margin, V


def _decide(Y, tol, method="auto"):
    """(B, l, d) unit rows -> (feasible (B,), a feasible v (B, d), NaN where not computed)."""
    if method not in ("auto", "lp"):
        raise ValidationError(f"method must be 'auto' or 'lp', got {method!r}.")
    B, n, d = Y.shape
    feas = np.zeros(B, dtype=bool)
    V = np.full((B, d), np.nan)
    todo = np.arange(B)
    if method == "lp":
        margin, V = _lp_decide(Y, tol)
        return margin > -np.inf, V
    # 1. tokens in general position: the determinant sign test decides both ways
    if n >= d + 1 and comb(n, d) <= 256:
        infeasible, feasible = _simplex_certificate(Y)
        feas[feasible] = True
        todo = np.flatnonzero(~(infeasible | feasible))
    # 2. certificate of feasibility: a direction with a directly evaluated positive margin
    if todo.size:
        p = _gilbert(Y[todo])
        pn = np.linalg.norm(p, axis=-1)
        v = np.divide(p, pn[:, None], out=np.zeros_like(p), where=pn[:, None] > 0)
        cert = (pn > 0) & (np.einsum("bld,bd->bl", Y[todo], v).min(axis=-1) > tol)
        feas[todo[cert]] = True
        V[todo[cert]] = v[cert]
        todo = todo[~cert]
    # 3. everything else: linear programming
    if todo.size:
        margin, Vlp = _lp_decide(Y[todo], tol)
        ok = margin > -np.inf
        feas[todo[ok]] = True
        V[todo[ok]] = Vlp[ok]
    return feas, V


def in_common_hemisphere(y, *, tol: float = 1e-12, method: str = "auto") -> np.ndarray:
    r"""Whether the tokens of each configuration lie in one open hemisphere {x : vᵀx > 0}.

    Parameters
    ----------
    y : array_like, shape (..., l, d)
        Nonzero tokens (on a sphere or an ellipsoid; only their directions matter).
    tol : float, default 1e-12
        A configuration counts as inside an open hemisphere when a unit v with
        min_i vᵀ y_i / |y_i| > tol is found (configurations on the boundary, such as y and -y,
        are not).
    method : {"auto", "lp"}
        "lp" decides every configuration by linear programming alone; "auto" (default) first
        applies the exact certificates of the Notes, which are much faster for many configurations.

    Returns
    -------
    ndarray of bool, shape (...)

    Notes
    -----
    Exact linear feasibility (∃ v : Y v > 0), decided in three stages, each conclusive:
    (1) for tokens in general position (every d of them linearly independent, checked by d x d
    determinants with |det| > 1e-10), l >= d + 1 and C(l, d) <= 256, the sign pattern of those
    determinants decides exactly whether 0 lies strictly inside a simplex of d + 1 tokens (then no
    open hemisphere, by Gordan's alternative) or not (then one exists, by Caratheodory);
    (2) a candidate v from Gilbert's min-norm-point iterations whose margin, evaluated directly, is
    > tol proves feasibility; (3) every configuration left is decided by :func:`scipy.optimize.linprog`
    (HiGHS), maximizing s subject to Y v ≥ s, |v_k| ≤ 1, many configurations per
    (block-diagonal) LP, and the LP's v is re-checked directly. Stages (1)-(2) only make the common
    case fast (the test suite checks that they agree with stage (3) alone).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Remark 3.4.
    """
    y = _numpy(check_token_array(y, "y"))
    tol = check_nonnegative(tol, "tol")
    Y = _unit_rows(y).reshape((-1,) + y.shape[-2:])
    feas, _ = _decide(Y, tol, method)
    return feas.reshape(y.shape[:-2])


def _ldp_max_margin(Yb):
    """Max-margin unit v for one feasible configuration (l, d): min |w| s.t. Y w >= 1 solved as a
    least-distance program via NNLS (Lawson & Hanson 1974, ch. 23); v = w / |w|, margin 1/|w|."""
    n, d = Yb.shape
    E = np.vstack([Yb.T, np.ones((1, n))])
    f = np.zeros(d + 1)
    f[-1] = 1.0
    u, _ = nnls(E, f, maxiter=50 * (n + d + 1))
    r = E @ u - f
    if abs(r[-1]) < 1e-14:
        return None
    w = -r[:d] / r[-1]
    return w / np.linalg.norm(w)


def common_hemisphere(y, *, tol: float = 1e-12, return_margin: bool = False, method: str = "auto"):
    r"""A unit v with vᵀ y_i > 0 for all tokens, with the largest margin; or None.

    Parameters
    ----------
    y : array_like, shape (..., l, d)
        Nonzero tokens (directions matter; each is normalized to unit Euclidean length).
    tol : float, default 1e-12
        Minimal margin min_i vᵀ y_i / |y_i| for a configuration to count as inside an open
        hemisphere (see :func:`in_common_hemisphere`).
    return_margin : bool
        Also return the margin min_i vᵀ y_i / |y_i| (NaN where none).
    method : {"auto", "lp"}
        How feasibility is decided (see :func:`in_common_hemisphere`).

    Returns
    -------
    v : ndarray, shape (d,), or None
        For a single configuration (y of shape (l, d)): the unit v maximizing
        min_i vᵀ y_i / |y_i| (the normalized min-norm point of conv{y_i / |y_i|}), or None.
        Batched (y of shape (..., l, d) with leading axes): an array of shape (..., d) with a row of
        NaN where no open hemisphere contains the configuration.
    margin : float or ndarray, shape (...)
        Only with ``return_margin=True``.

    Notes
    -----
    Feasibility is decided exactly by :func:`in_common_hemisphere` (linear programming with
    scipy.optimize.linprog, plus exact certificates). The largest-margin v is then the solution of
    the least-distance program min |w| subject to Y w ≥ 1 (hard-margin SVM through the origin),
    solved by NNLS (a finite active-set algorithm); the LP direction is kept if that fails.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Remark 3.4.
    C. L. Lawson, R. J. Hanson, *Solving Least Squares Problems* (1974), ch. 23 (LDP via NNLS).
    """
    y = _numpy(check_token_array(y, "y"))
    tol = check_nonnegative(tol, "tol")
    return_margin = check_flag(return_margin, "return_margin")
    batch = y.shape[:-2]
    Y = _unit_rows(y).reshape((-1,) + y.shape[-2:])
    feas, V = _decide(Y, tol, method)
    margins = np.full(Y.shape[0], np.nan)
    for b in np.flatnonzero(feas):
        v = _ldp_max_margin(Y[b])
        if np.isnan(V[b, 0]):  # decided by the determinant test: get an LP direction as fallback
            V[b] = _lp_decide(Y[b:b + 1], tol)[1][0]
        if v is not None and (Y[b] @ v).min() >= np.nan_to_num((Y[b] @ V[b]).min(), nan=-np.inf):
            V[b] = v
        margins[b] = (Y[b] @ V[b]).min()
    V[~feas] = np.nan
    if batch == ():
        v_out = V[0] if feas[0] else None
        return (v_out, float(margins[0])) if return_margin else v_out
    V = V.reshape(batch + (y.shape[-1],))
    return (V, margins.reshape(batch)) if return_margin else V
