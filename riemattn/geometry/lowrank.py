r"""Exact exponentials of low-rank elements of the Lie algebra o(W), acting on vectors.

For a token ``y`` on ``E_W`` and a tangent vector ``F`` at ``y`` the generator
``A = F y^T W - y F^T W`` lies in ``o(W) = {A : A^T W + W A = 0}`` and ``A y = F`` (docs/steppers.md, "Exact exponentials").
It has rank 2. A combination ``sum_k (u_k v_k^T - v_k u_k^T) W`` of ``s`` such generators has rank at
most ``2 s`` and maps everything into ``V = span{u_k, v_k}``; the subspace ``V + span{x}`` is
invariant, so ``exp(A) x`` can be computed exactly in an orthonormal (for the W-inner product)
basis of that subspace:

.. math:: \exp(A)\,x = x + Q\,(e^{K} - I)\,Q^T W x, \qquad K = Q^T W A Q \in \mathfrak{so}(m),

with ``Q`` (d x m, m <= 2 s + 1) W-orthonormal. No d x d matrix is ever formed; the cost is
``O(d m^2)`` per vector for the basis (classical Gram--Schmidt with one reorthogonalization) plus
``O(m^3)`` for the small exponential. For one rank-2 generator the exponential is a rotation in a
plane and has a closed form (Rodrigues' formula, :func:`rank2_expm_action`).

All functions are batched over leading axes: ``x`` of shape ``(..., d)`` (for tokens ``(..., l, d)``).
They accept NumPy arrays or PyTorch tensors (CPU or CUDA) and return the kind, device and dtype of
their vector arguments (``riemattn._backend``, docs/performance.md); a NumPy ``W`` used with tensors is converted.

References
----------
A. Iserles, H. Munthe-Kaas, S. P. Norsett, A. Zanna, "Lie-group methods", Acta Numerica 9 (2000),
section 8 (exponentials of low-rank algebra elements). E. Celledoni, A. Iserles, "Approximating
the exponential from a Lie algebra to a Lie group", Math. Comp. 69 (2000).
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (3) (the tangent
map whose image the generator reproduces).
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg

from .._backend import convert, device_of, dot_last, is_torch, namespace, requires_grad, size
from .._validation import as_float_array, as_token_array, check_finite
from ..errors import ValidationError
from ._skew import skew_expm_action

__all__ = ["WOrthoBasis", "expm_small_action", "rank2_expm_action", "lowrank_expm_action"]

#: A new vector whose W-norm drops below this fraction of its own norm after two Gram--Schmidt
#: passes is taken to lie in the span already built (no new direction is added).
RANK_TOL = 1e-12

_EPS = np.finfo(float).eps


def _dot(a, b):
    """Inner product over the last axis: einsum on NumPy arrays, (a * b).sum(-1) on tensors."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        return np.einsum("...i,...i->...", a, b)
    return dot_last(a, b)


def _xp(a):
    """:func:`~riemattn._backend.namespace` of one array, NumPy checked first (hot path)."""
    return np if type(a) is np.ndarray else namespace(a)


def _like(W, v):
    """``W`` (NumPy or tensor) as an array of the kind, device and dtype of ``v`` (None stays None)."""
    if W is None or (type(W) is type(v) and (type(v) is np.ndarray or (W.device == v.device and W.dtype == v.dtype))):
        return W
    return convert(W, v)


class WOrthoBasis:
    """An incrementally built W-orthonormal basis of up to ``m`` vectors, batched.

    Parameters
    ----------
    batch_shape : tuple
        Leading shape ``(...)`` (e.g. ``(..., l)`` for tokens).
    m : int
        Maximum number of basis vectors.
    d : int
        Ambient dimension.
    W : ndarray or tensor, shape (d, d), optional
        SPD matrix of the inner product ``<u, v>_W = u^T W v``; None means the Euclidean one.
        Converted to the kind, device and dtype of ``like`` if it differs.
    like : ndarray or tensor, optional
        The basis holds arrays of this one's kind, device and dtype (None: NumPy float64); the
        vectors passed to :meth:`add` must be of that kind.

    Attributes
    ----------
    Q : ndarray, shape (..., m, d)
        Basis vectors as rows (zero rows for unused or dropped slots).
    P : ndarray, shape (..., m, d)
        ``W`` applied to the rows of ``Q`` (the same array as ``Q`` when W is None).
    n : int
        Number of slots used so far.
    """

    def __init__(self, batch_shape, m, d, W=None, *, like=None):
        shape = tuple(batch_shape) + (m, d)
        if like is None or type(like) is np.ndarray and like.dtype == np.float64:
            self.Q = np.zeros(shape)
        else:
            xp = namespace(like)
            self.Q = xp.zeros(shape, dtype=like.dtype, device=device_of(like))
        self.W = None if W is None else _like(W, self.Q)
        self.P = self.Q if W is None else namespace(self.Q).zeros_like(self.Q)
        self.m, self.n = m, 0

    def apply_W(self, v):
        return v if self.W is None else v @ self.W

    def add(self, v, Wv=None):
        """Add ``v`` (shape (..., d)) to the span and return its coordinates, shape (..., m).

        Classical Gram--Schmidt with one reorthogonalization pass (CGS2). If the remainder is
        below ``RANK_TOL`` times ``|v|_W`` (``v`` already in the span, to rounding), no direction
        is added for that batch entry (the slot stays zero); its coordinates are then exact up
        to that remainder.
        """
        if self.n >= self.m:
            raise ValidationError(f"WOrthoBasis is full: it holds m = {self.m} vectors already.")
        sphere = self.W is None
        if Wv is None:
            Wv = self.apply_W(v)
        j = self.n
        Q, P = self.Q, self.P
        xp = _xp(Q)
        nv2 = _dot(v, Wv)
        if j == 0:
            alpha = xp.zeros(v.shape[:-1] + (self.m,), dtype=Q.dtype, device=device_of(Q))
            r, Wr = v, Wv
        else:
            # unused rows of Q are zero, so full-width products are exact and avoid slicing
            alpha = xp.einsum("...jd,...d->...j", P, v)
            r = v - xp.einsum("...j,...jd->...d", alpha, Q)
            b = xp.einsum("...jd,...d->...j", P, r)
            r = r - xp.einsum("...j,...jd->...d", b, Q)
            # W r is recomputed, not updated: r may be a tiny remainder of v (cancellation)
            Wr = r if sphere else self.apply_W(r)
            if requires_grad(alpha) or requires_grad(b):
                alpha = alpha + b  # autograd: the product above saved alpha
            else:
                alpha += b
        nr2 = _dot(r, Wr)
        keep = nr2 > (RANK_TOL * RANK_TOL) * nv2
        nr = xp.sqrt(xp.where(keep, nr2, 1.0))
        inv = xp.where(keep, 1.0 / nr, 0.0)[..., None]
        if requires_grad(r) or requires_grad(Q):
            # autograd: earlier products saved Q and P for the backward pass; write into copies
            Q = self.Q = Q.clone()
            P = self.P = Q if sphere else P.clone()
        Q[..., j, :] = r * inv
        if not sphere:
            P[..., j, :] = Wr * inv
        alpha[..., j] = xp.where(keep, nr, 0.0)
        self.n += 1
        return alpha

    def to_ambient(self, c):
        """``Q^T c``: the ambient vector with coordinates ``c`` (..., m) -> (..., d)."""
        return _xp(self.Q).einsum("...j,...jd->...d", c, self.Q)


#: beyond 2^5 repeated Taylor actions, expm_small_action forms the exponentials instead
_MAX_HALVINGS = 5


def expm_small_action(K, v, *, increment=False, skew=False):
    """``exp(K) v`` (or ``exp(K) v - v``) for a batch of small square matrices, by scaled Taylor series.

    Parameters
    ----------
    K : ndarray or tensor, shape (..., m, m)
    v : ndarray or tensor, shape (..., m)
        NumPy arrays, or PyTorch tensors (CPU or CUDA) of one device and dtype.
    increment : bool
        Return ``exp(K) v - v``, summed without the identity term (so it is accurate relative
        to its own, small, size; the steppers add it to the base point once).
    skew : bool
        ``K`` is skew (the O(W) generators in a W-orthonormal basis): beyond the Taylor range the
        result is then a rotation of ``v`` for every norm (``riemattn.geometry._skew``).

    Returns
    -------
    ndarray or tensor, shape (..., m)
        Of the kind, device and dtype of ``v``. NaN for matrices of ``K`` holding NaN or inf, and
        where the exponential overflows (the steppers report a failed trajectory, status -3).

    Notes
    -----
    ``K`` is scaled by ``2^-s`` so that its largest 1-norm over the batch is at most 2; the
    Taylor series of ``exp(2^-s K) - I`` is summed to a truncation error below ``2^-72``
    (the number of terms follows from the scaled norm) and applied ``2^s`` times. Only
    matrix--vector products are used (``O(m^2)`` per term). For ``s > 5`` (norms above 64, e.g.
    a large trial step of an adaptive method, or a step as long as the horizon) the
    exponentials are formed and applied once: for ``skew=True`` by an eigendecomposition (a
    rotation to rounding for any norm), otherwise by :func:`scipy.linalg.expm` (tensors:
    ``torch.linalg.matrix_exp``; scaling and squaring, whose orthogonality defect grows with
    the norm).

    On tensors the norm is read back to the host once per call (``s`` and the number of terms
    are Python loop counts; a synchronisation on a GPU).
    """
    numpy = type(K) is np.ndarray and type(v) is np.ndarray
    xp = np if numpy else namespace(K, v)
    with np.errstate(over="ignore", invalid="ignore"):
        if numpy:
            norm = float(np.max(np.sum(np.abs(K), axis=-2))) if K.size else 0.0
        else:
            # the one host read-back: the scaling s and the number of Taylor terms are loop counts
            norm = float(xp.max(xp.sum(xp.abs(K.detach()), axis=-2))) if size(K) else 0.0
    if not math.isfinite(norm) and not bool(xp.all(xp.isfinite(K))):  # NaN results for those matrices
        bad = ~xp.all(xp.isfinite(K), axis=(-2, -1))  # (a failed trajectory, not an exception)
        out = expm_small_action(xp.where(bad[..., None, None], 0.0, K), v, increment=increment, skew=skew)
        return xp.where(bad[..., None], math.nan, out)
    s = 0 if norm <= 2.0 else _MAX_HALVINGS + 1 if norm > 2.0 ** 60 else int(math.ceil(math.log2(norm / 2.0)))
    if s > _MAX_HALVINGS:
        # a large generator (a big trial step of an adaptive method, a step as long as the
        # horizon): 2^s repeated actions would cost more than forming the exponentials
        if skew:
            return skew_expm_action(K, v, increment=increment)
        with np.errstate(all="ignore"):
            E = scipy.linalg.expm(K) if numpy else xp.linalg.matrix_exp(K)
            out = xp.einsum("...ij,...j->...i", E, v)
            return out - v if increment else out
    X = K * 2.0 ** (-s) if s else K
    theta = norm * 2.0 ** (-s)
    # smallest q with theta^(q+1)/(q+1)! <= 2^-72 (for skew K the truncation would change
    # |exp(K) v| systematically; keep it far below rounding)
    q, term_bound = 0, 1.0
    while term_bound > 2.0 ** -72 and q < 60 and theta > 0.0:
        q += 1
        term_bound = term_bound * theta / q
    batch = np.broadcast_shapes(K.shape[:-2], v.shape[:-1])
    big = numpy and K.ndim > 2 and math.prod(batch) >= 64
    if K.ndim == 2:  # one matrix for the whole batch
        XT = X.T if numpy else X.mT

        def mv(z):
            return z @ XT
        vv = v
    elif not big:  # few small matrices (or tensors): batched matmul has the least overhead
        def mv(z):
            return xp.matmul(X, z[..., None])[..., 0]
        vv = v
    else:  # many (NumPy): batch moved to the last axis, contiguous vectorized matrix--vector products
        m = K.shape[-1]
        XT = np.ascontiguousarray(np.broadcast_to(X, batch + (m, m)).reshape(-1, m, m).transpose(1, 2, 0))

        def mv(z):
            return np.einsum("ijn,jn->in", XT, z)
        vv = np.ascontiguousarray(np.broadcast_to(v, batch + (m,)).reshape(-1, m).T)
    total = xp.zeros_like(vv)
    cur = vv
    for rep in range(2 ** s):
        # Horner: (e^X - I) cur = X (cur + X (cur + X (cur + ...) / 3) / 2)
        acc = cur
        for k in range(q, 1, -1):
            acc = mv(acc)
            acc *= 1.0 / k
            acc += cur
        if q:
            total += mv(acc)
        if rep + 1 < 2 ** s:
            cur = vv + total
    if big:
        total = total.T.reshape(batch + (m,))
        v = np.broadcast_to(v, batch + (m,))
    return total if increment else v + total


def rank2_expm_action(u, v, x, W=None, *, increment=False):
    """``exp((u v^T - v u^T) W) x`` in closed form (Rodrigues' rotation formula).

    Parameters
    ----------
    u, v : ndarray or tensor, shape (..., d)
        The generator's two vectors (any, not necessarily W-orthonormal).
    x : ndarray or tensor, shape (..., d)
        Vectors to act on. NumPy arrays, or PyTorch tensors of one device and dtype.
    W : ndarray or tensor, shape (d, d), optional
        SPD matrix of E_W (None: the sphere, W = I); converted to the vectors' kind if needed.
    increment : bool
        Return ``exp(A) x - x`` instead (computed without cancellation).

    Returns
    -------
    ndarray or tensor, shape (..., d)
        Of the kind, device and dtype of ``x``.

    Notes
    -----
    With ``e1 = v / |v|_W``, ``w = u - <u, e1>_W e1``, ``e2 = w / |w|_W`` and
    ``theta = |v|_W |w|_W``, the generator equals ``theta (e2 e1^T - e1 e2^T) W``: a rotation by
    ``theta`` in the W-orthonormal plane (e1, e2), the identity on its W-orthogonal complement:

    ``exp(A) x = x + sin(theta) (e2 <e1, x> - e1 <e2, x>) + (cos(theta) - 1) (e1 <e1, x> + e2 <e2, x>)``.

    For ``u = F`` (tangent at ``y``), ``v = y`` and ``x = y`` this is ``cos(theta) y + sin(theta) F / |F|_W``
    with ``theta = |F|_W``: the geodesic of E_W's metric (Lie--Euler step).

    References
    ----------
    Iserles, Munthe-Kaas, Norsett, Zanna, "Lie-group methods", Acta Numerica 2000, section 8.1.
    """
    xp = np if type(u) is np.ndarray and type(v) is np.ndarray and type(x) is np.ndarray else namespace(u, v, x)
    W = _like(W, x)

    def aW(z):
        return z if W is None else z @ W

    Wv = aW(v)
    nv = xp.sqrt(xp.clip(_dot(v, Wv), min=0.0) if xp is not np else np.maximum(_dot(v, Wv), 0.0))
    inv = (1.0 / xp.where(nv > 0, nv, 1.0))[..., None]
    e1, We1 = v * inv, Wv * inv
    w = u - _dot(u, We1)[..., None] * e1
    Ww = aW(w)
    nw = xp.sqrt(xp.clip(_dot(w, Ww), min=0.0) if xp is not np else np.maximum(_dot(w, Ww), 0.0))
    inv = (1.0 / xp.where(nw > 0, nw, 1.0))[..., None]
    e2, We2 = w * inv, Ww * inv
    theta = nv * nw  # zero (no rotation) when u is parallel to v or either vanishes
    c1, c2 = _dot(We1, x), _dot(We2, x)
    s, cm1 = xp.sin(theta), -2.0 * xp.sin(0.5 * theta) ** 2  # cos - 1 without cancellation
    inc = (s * c1 + cm1 * c2)[..., None] * e2 + (cm1 * c1 - s * c2)[..., None] * e1
    return inc if increment else x + inc


def _tensor_like(value, x, name):
    """``value`` (tensor or array_like) as a tensor of the device and dtype of the tensor ``x``."""
    value = as_token_array(value, name) if is_torch(value) else as_float_array(value, name)
    if is_torch(value) and value.device == x.device and value.dtype == x.dtype:
        return value
    return convert(value, x)


def lowrank_expm_action(U, V, x, W=None):
    """``exp(sum_k (u_k v_k^T - v_k u_k^T) W) x`` without forming a d x d matrix.

    Parameters
    ----------
    U, V : array_like or tensor, shape (..., s, d)
        The ``s`` rank-2 generators ``u_k v_k^T - v_k u_k^T`` (times W): for attention tokens,
        ``u_k = c_k F_k`` (coefficient times tangent field) and ``v_k = y_k`` (the point it was
        evaluated at). Leading axes broadcast against ``x``'s.
    x : array_like or tensor, shape (..., d)
        Vectors to act on (e.g. tokens, shape (..., l, d)). If any of U, V, x is a PyTorch
        tensor, all are taken as tensors on the device and with the floating dtype of ``x``
        (of the first tensor among x, U, V).
    W : array_like or tensor, shape (d, d), optional
        SPD matrix (None: W = I). The generator then lies in o(W) and exp preserves x^T W x.

    Returns
    -------
    ndarray or tensor, shape (..., d)
        A float64 NumPy array for array_like inputs; a tensor on ``x``'s device and dtype
        when tensors are passed.

    Notes
    -----
    Builds a W-orthonormal basis ``Q`` of ``span{x, u_1, v_1, ..., u_s, v_s}`` (m <= 2 s + 1
    vectors, CGS2, ``O(d m^2)``), the coordinates of ``u_k, v_k, x``, the small skew matrix
    ``K = sum_k (a_k b_k^T - b_k a_k^T)`` and returns ``x + Q^T (exp(K) xi - xi)``. Exact (up to
    rounding) because the span is invariant under the generator.

    References
    ----------
    Iserles, Munthe-Kaas, Norsett, Zanna, "Lie-group methods", Acta Numerica 2000, section 8.
    """
    if is_torch(U) or is_torch(V) or is_torch(x):
        ref = next(as_token_array(a, n) for a, n in ((x, "x"), (U, "U"), (V, "V")) if is_torch(a))
        x = check_finite(_tensor_like(x, ref, "x"), "x")
        U = check_finite(_tensor_like(U, x, "U"), "U")
        V = check_finite(_tensor_like(V, x, "V"), "V")
    else:
        U = check_finite(as_float_array(U, "U"), "U")
        V = check_finite(as_float_array(V, "V"), "V")
        x = check_finite(as_float_array(x, "x"), "x")
    xp = namespace(x)
    if U.ndim < 2 or U.shape != V.shape:
        raise ValidationError(f"U and V must have the same shape (..., s, d), got {U.shape} and {V.shape}.")
    d = x.shape[-1]
    if U.shape[-1] != d:
        raise ValidationError(f"U, V hold vectors of dimension {U.shape[-1]} but x has dimension {d}.")
    if W is not None:
        W = _like(as_token_array(W, "W"), x)
        if W.shape != (d, d):
            raise ValidationError(f"W must have shape ({d}, {d}), got {W.shape}.")
    s = U.shape[-2]
    batch = np.broadcast_shapes(U.shape[:-2], x.shape[:-1])
    U = xp.broadcast_to(U, batch + U.shape[-2:])
    V = xp.broadcast_to(V, batch + V.shape[-2:])
    x = xp.broadcast_to(x, batch + (d,))
    basis = WOrthoBasis(batch, 2 * s + 1, d, W, like=x)
    xi = basis.add(x)
    a = [basis.add(U[..., k, :]) for k in range(s)]
    b = [basis.add(V[..., k, :]) for k in range(s)]
    K = xp.zeros(batch + (basis.m, basis.m), dtype=x.dtype, device=device_of(x))
    for ak, bk in zip(a, b):
        K += ak[..., :, None] * bk[..., None, :] - bk[..., :, None] * ak[..., None, :]
    return x + basis.to_ambient(expm_small_action(K, xi, increment=True, skew=True))
