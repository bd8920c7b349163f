r"""Diagnostics of token configurations: misalignment, Lyapunov functions, hemispheres, clusters.

All functions take tokens of shape ``(..., l, d)`` and are batched over the leading axes.

* :func:`misalignment` -- E(y) of ICML eq. (9); zero exactly at consensus.
* :func:`hemisphere_lyapunov` -- V(y) = max_i (1 - vᵀ y_i), ICML eq. (7).
* :func:`token_lyapunov` -- V_i = 1 - vᵀ y_i of Theorem 4.5 (V_1 is a Lyapunov function).
* :func:`in_common_hemisphere`, :func:`common_hemisphere` -- whether the tokens lie in one open
  hemisphere {x : vᵀ x > 0}, and the unit v with the largest margin.
* :func:`cluster_count` -- tokens within a distance tolerance (transitively) form one cluster.
* :func:`consensus_distance`, :func:`is_consensus`, :func:`field_norm`, :func:`is_equilibrium`.
* :func:`wendel_probability` -- Wendel's probability that random points lie in a hemisphere.
"""

from __future__ import annotations

from itertools import combinations
from math import comb
from numbers import Integral

import numpy as np
from scipy import sparse
from scipy.optimize import linprog, nnls

from ._validation import as_float_array, check_finite, check_nonnegative, check_token_array
from .errors import InputTypeError, ValidationError

__all__ = [
    "misalignment",
    "hemisphere_lyapunov",
    "token_lyapunov",
    "in_common_hemisphere",
    "common_hemisphere",
    "cluster_count",
    "consensus_distance",
    "is_consensus",
    "field_norm",
    "is_equilibrium",
    "wendel_probability",
]


def misalignment(y) -> np.ndarray:
    """Misalignment E(y) = 1 - (1/l) sum_i y_1^T y_i / (|y_1| |y_i|), shape (...).

    Zero exactly at consensus (all tokens positive multiples of y_1).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (9).
    """
    y = np.asarray(y, dtype=float)
    u = y / np.linalg.norm(y, axis=-1, keepdims=True)
    return 1.0 - np.mean(np.einsum("...d,...id->...i", u[..., 0, :], u), axis=-1)


def hemisphere_lyapunov(y, v) -> np.ndarray:
    """Lyapunov function V(y) = max_i (1 - v^T y_i) of the hemisphere theorem, shape (...).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (7).
    """
    y = np.asarray(y, dtype=float)
    return np.max(1.0 - y @ np.asarray(v, dtype=float), axis=-1)


def token_lyapunov(y, v) -> np.ndarray:
    """Per-token functions V_i(y) = 1 - v^T y_i, shape (..., l).

    For causal attention with symmetric U (Theorem 4.5) V_1 is non-increasing; V_i, i > 1, need
    not be monotone but tend to 0 when every v^T y_i(0) > 0.

    Parameters
    ----------
    y : array_like, shape (..., l, d)
    v : array_like, shape (d,)

    Returns
    -------
    ndarray, shape (..., l)

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Theorem 4.5 and
    its proof (V_1 = 1 - y_1^T v).
    """
    y = check_token_array(y, "y")
    v = _vector(v, "v", y.shape[-1])
    return 1.0 - y @ v


# ----------------------------------------------------------------------------------------------
# input helpers
# ----------------------------------------------------------------------------------------------
def _vector(v, name, d) -> np.ndarray:
    v = check_finite(as_float_array(v, name), name)
    if v.shape != (d,):
        raise ValidationError(f"{name} must have shape ({d},) to match the tokens, got {v.shape}.")
    return v


def _unit_rows(y, name="y") -> np.ndarray:
    norms = np.linalg.norm(y, axis=-1, keepdims=True)
    if np.any(norms == 0):
        raise ValidationError(f"{name} contains a zero token; a hemisphere test needs nonzero tokens.")
    return y / norms


# ----------------------------------------------------------------------------------------------
# common open hemisphere: {exists v : v^T y_i > 0 for all i}
# ----------------------------------------------------------------------------------------------
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
    y = check_token_array(y, "y")
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
    y = check_token_array(y, "y")
    tol = check_nonnegative(tol, "tol")
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


# ----------------------------------------------------------------------------------------------
# clusters, consensus, equilibria
# ----------------------------------------------------------------------------------------------
def cluster_count(y, tol: float) -> np.ndarray:
    r"""Number of clusters of each configuration, shape (...).

    Two tokens are linked when their Euclidean distance |y_i - y_j| is at most ``tol``; clusters
    are the connected components of this graph (single linkage: a chain of close tokens is one
    cluster).

    Parameters
    ----------
    y : array_like, shape (..., l, d)
    tol : float >= 0

    Returns
    -------
    ndarray of int, shape (...)

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 6.3 and Figure 4 (counting clusters in the metastable regime).
    """
    y = check_token_array(y, "y")
    tol = check_nonnegative(tol, "tol")
    n = y.shape[-2]
    diff = y[..., :, None, :] - y[..., None, :, :]
    R = (np.linalg.norm(diff, axis=-1) <= tol).astype(float)  # reflexive adjacency
    # transitive closure by repeated squaring: paths of length up to 2^k
    for _ in range(int(np.ceil(np.log2(max(n, 2))))):
        R = ((R @ R) > 0).astype(float)
    # i is the representative of its component when no j < i is reachable from it
    earlier = np.tril(np.ones((n, n), dtype=bool), k=-1)
    roots = ~np.any((R > 0) & earlier, axis=-1)
    return np.sum(roots, axis=-1)


def consensus_distance(y) -> np.ndarray:
    """max_i |y_i - y_1| (Euclidean), shape (...): zero exactly on the consensus set C_l.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 3
    (consensus set).
    """
    y = check_token_array(y, "y")
    return np.max(np.linalg.norm(y - y[..., :1, :], axis=-1), axis=-1)


def is_consensus(y, tol: float = 1e-8) -> np.ndarray:
    """Whether all tokens coincide up to ``tol``: consensus_distance(y) <= tol, shape (...).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, section 3.
    """
    return consensus_distance(y) <= check_nonnegative(tol, "tol")


def field_norm(field, t: float, y) -> np.ndarray:
    """max_i |F_i(t, y)| (Euclidean) of a field's tangent vectors, shape (...).

    Parameters
    ----------
    field : callable (t, y) -> array of shape (..., l, d)
        e.g. an :class:`~riemattn.attention.AttentionField`.
    t : float
    y : array_like, shape (..., l, d)

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """
    if not callable(field):
        raise InputTypeError(f"field must be callable as field(t, y), got {type(field).__name__}.")
    y = check_token_array(y, "y")
    F = np.asarray(field(t, y), dtype=float)
    if F.shape != y.shape:
        raise ValidationError(f"field(t, y) returned shape {F.shape}; expected the shape of y, {y.shape}.")
    return np.max(np.linalg.norm(F, axis=-1), axis=-1)


def is_equilibrium(field, t: float, y, tol: float = 1e-10) -> np.ndarray:
    """Whether y is an equilibrium of the field at time t: field_norm(field, t, y) <= tol, shape (...).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    """
    return field_norm(field, t, y) <= check_nonnegative(tol, "tol")


# ----------------------------------------------------------------------------------------------
# Wendel's theorem
# ----------------------------------------------------------------------------------------------
def _wendel_scalar(N: int, dim: int) -> float:
    D = dim + 1  # ambient dimension
    return sum(comb(N - 1, k) for k in range(min(D - 1, N - 1) + 1)) / 2 ** (N - 1)


def wendel_probability(n_points, dim):
    r"""Probability that n i.i.d. uniform points on S^dim ⊂ R^(dim+1) lie in some open hemisphere.

    .. math:: p(N, D) = 2^{-(N-1)} \sum_{k=0}^{D-1} \binom{N-1}{k}, \qquad D = \mathrm{dim} + 1,

    with N = n_points and D the ambient dimension (Wendel 1962, eq. (1)).

    Parameters
    ----------
    n_points : int or array_like of int, >= 1
    dim : int or array_like of int, >= 0
        Dimension of the sphere (tokens in R^(dim+1)). Broadcast against ``n_points``.

    Returns
    -------
    float or ndarray
        p = 1 whenever n_points <= dim + 1.

    Notes
    -----
    Indexing: the sum runs to dim (= D - 1), not to dim - 1. ICML Remark 3.4 writes the sum to
    n - 1 for tokens on S^n; that is off by one (for two points on the circle S^1 it would give 1/2
    instead of 1) -- the Monte Carlo test in ``tests/test_diagnostics.py`` confirms the form above.

    References
    ----------
    J. G. Wendel, "A problem in geometric probability", Math. Scand. 11 (1962), eq. (1).
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Remark 3.4.
    """
    N = np.asarray(n_points)
    dm = np.asarray(dim)
    for name, a, lo in (("n_points", N, 1), ("dim", dm, 0)):
        if not (np.issubdtype(a.dtype, np.integer) or (a.dtype == object and all(
                isinstance(x, Integral) and not isinstance(x, bool) for x in a.ravel()))):
            raise InputTypeError(f"{name} must be an integer (or array of integers), got dtype {a.dtype}.")
        if np.any(a < lo):
            raise ValidationError(f"{name} must be >= {lo}, got {a.min()!r}.")
    out = np.vectorize(_wendel_scalar, otypes=[float])(N, dm)
    return float(out) if out.ndim == 0 else out
