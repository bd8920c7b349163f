"""Hardmax and Sinkhorn normalisations of attention scores (private helper of the attention field).

Scores have the internal layout ``S[..., i, eta, j]`` (token, head, neighbour; see
:mod:`riemattn.dynamics.attention`), already multiplied by beta and with any positional bias added.
Both functions return ``(E, r)`` as :func:`riemattn.dynamics._softmax.weights` does: alpha is
``E * r[..., None]``, or ``E`` itself when ``r`` is None. They run on NumPy arrays and on PyTorch
tensors (the array API of ``riemattn._backend``).

Hardmax (the limit tau -> 0 of softmax(S / tau), i.e. beta -> infinity at a fixed bias)::

    M_i = {j admissible : S_ij >= max_k S_ik - rtol * max_k |S_ik|},   alpha_ij = 1[j in M_i] / |M_i|

(the max over the admissible k: all tokens, or k <= i under a causal mask). Ties are split
uniformly among the maximisers; scores within ``rtol`` (relative to the row's largest |score|)
of the row maximum count as ties, so that rounding of the scores (a few eps times their size)
does not decide between exactly tied tokens. ``rtol = 0`` keeps exact ties only. alpha is
piecewise constant in the tokens: the field is **discontinuous** where a maximiser changes.

Sinkhorn (doubly stochastic attention, Sander et al. 2022): the matrix ``K_ij = exp(S_ij)`` of
each head scaled to ``alpha_ij = exp(f_i + S_ij + g_j)`` with rows and columns summing to 1, by
alternate row and column normalisations in the log domain::

    f_i = -logsumexp_j (S_ij + g_j),   g_j = -logsumexp_i (S_ij + f_i)

starting from g = 0, so scores of any size are safe (beta = 1e6 included). The iteration stops
when every column sum after a row normalisation is within ``tol`` of 1 (``max_j |sum_i alpha_ij -
1| <= tol``), or after ``iters`` row/column sweeps; the result always ends with a row
normalisation (rows sum to 1 to rounding; columns to the tolerance reached). Every operation is
differentiable on the PyTorch backend (autograd through the unrolled iterations).

Sweeps converge linearly with a rate that degrades like exp(-spread) of the scores (l = 64 tokens
at beta = 100 on the sphere: columns still 3e-5 from 1 after 1000 sweeps). On NumPy scores that
are not converged after :data:`NEWTON_AFTER` = 20 sweeps, and when ``iters`` allows more than
that (``iters <= 20`` is the truncated iteration, the same on NumPy and PyTorch; Sinkformers' fixed
number of sweeps), the potentials are finished by Newton's
method on the convex dual (Brauer, Clason, Lorenz, Wirth, "A Sinkhorn-Newton method for entropic
optimal transport", 2017)::

    phi(f, g) = sum_ij exp(f_i + S_ij + g_j) - sum_i f_i - sum_j g_j,
    grad = (r - 1, c - 1),   Hessian = [[diag r, alpha], [alpha^T, diag c]]

(r, c the row and column sums of alpha = exp(f + S + g)), with g_l fixed at its value (the dual is
invariant under f + a, g - a), a relative shift of 1e-12 on the Hessian's diagonal (entries of alpha
that underflow make it singular beyond that direction) and a backtracking (Armijo) line search on
phi, which keeps every step a descent of the convex dual: quadratic convergence near the solution,
a few steps from the sweeps' potentials. ``field.attention`` then reports the error reached;
``on_nonconvergence`` of the attention field says what happens when it is above ``tol``.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import namespace
from .._validation import check_int, check_nonnegative, check_positive
from ..errors import SinkhornConvergenceWarning, ValidationError
from ._parts import admissible

__all__ = ["HARDMAX_RTOL", "centred", "configure", "other_weights", "SINKHORN_ITERS", "SINKHORN_TOL", "ANNEAL_SPREAD", "hardmax_weights", "sinkhorn_potentials",
           "sinkhorn_weights", "sigmoid_weights", "NEWTON_AFTER", "NEWTON_STEPS", "ON_NONCONVERGENCE", "SinkhornConvergenceWarning"]

#: Default relative tolerance of hardmax ties: 2^-40 ~ 9e-13, some 4000 eps, far above the
#: rounding of scores y_i^T P y_j of moderate d (about d eps relative), far below the gaps of
#: distinct scores met in practice.
HARDMAX_RTOL = 2.0**-40
#: Default largest number of Sinkhorn sweeps (one row and one column normalisation each).
SINKHORN_ITERS = 1000
#: Default tolerance on the column sums of the Sinkhorn matrix (rows are exact).
SINKHORN_TOL = 1e-10
#: Sweeps on the scores themselves before Newton's method finishes the potentials (NumPy).
NEWTON_AFTER = 20
#: Largest number of Newton steps (each a (2l - 1) x (2l - 1) solve per head).
NEWTON_STEPS = 100
#: What an attention field does when Sinkhorn's column sums miss ``sinkhorn_tol``.
ON_NONCONVERGENCE = ("warn", "raise", "ignore")


def configure(field, tie_rtol, iters, tol, on_nonconvergence="warn") -> None:
    """Check and set the hardmax / Sinkhorn options of an attention field (``field.normalization``
    and ``field.mask`` already set); ``field.discontinuous`` is True for hardmax."""
    from .._validation import check_choice

    field.on_nonconvergence = check_choice(on_nonconvergence, "on_nonconvergence", ON_NONCONVERGENCE)
    #: the largest column error of a Sinkhorn evaluation of this field so far (0 before any)
    field.sinkhorn_error = 0.0
    if field.normalization == "sinkhorn" and field.mask != "full":
        raise ValidationError(f"normalization='sinkhorn' needs mask='full', got {field.mask!r}: a masked kernel "
                              "need not have a doubly stochastic scaling (the only lower-triangular doubly "
                              "stochastic matrix is the identity: no attention between tokens).")
    field.tie_rtol = check_nonnegative(tie_rtol, "tie_rtol")
    field.sinkhorn_iters = check_int(iters, "sinkhorn_iters", 1)
    field.sinkhorn_tol = check_positive(tol, "sinkhorn_tol")
    #: whether the field is discontinuous in the tokens (hardmax: where a maximiser switches)
    field.discontinuous = field.normalization == "hardmax"


def other_weights(field, S, t, y):
    """(E, r) of the field's hardmax or Sinkhorn normalisation of its scores S at (t, y)."""
    overflow = lambda: field._overflow(t, y)  # noqa: E731
    n = S.shape[-1]  # the keys (the tokens, or a cross-attention context)
    tril = None if field.mask == "full" else field._causal(n, S) if field.mask == "causal" else admissible(field, n, S)
    if field.normalization == "hardmax":
        return hardmax_weights(S, tril, field.tie_rtol, overflow)
    if field.normalization == "sigmoid":
        return sigmoid_weights(S, tril, n, overflow), None
    A, _, field._work.sinkhorn = sinkhorn_weights(S, field.sinkhorn_iters, field.sinkhorn_tol, overflow)
    err = field._work.sinkhorn[1]
    if not err <= field.sinkhorn_error:  # NaN-safe running maximum
        field.sinkhorn_error = err
    if err > field.sinkhorn_tol and field.on_nonconvergence != "ignore":
        _not_converged(field, err)
    return A, None


def _not_converged(field, err):
    import warnings

    from ..errors import IntegrationError

    msg = (f"normalization='sinkhorn': the column sums are {err:.2e} from 1 after the sweeps and Newton "
           f"steps, above sinkhorn_tol = {field.sinkhorn_tol:g}; raise sinkhorn_iters, loosen sinkhorn_tol, "
           "or lower beta (on_nonconvergence='ignore' accepts it; field.sinkhorn_error holds the worst error).")
    if field.on_nonconvergence == "raise":
        raise IntegrationError(msg)
    warnings.warn(msg, SinkhornConvergenceWarning, stacklevel=4)


def sigmoid_weights(S, tril, n: int, overflow):
    """alpha = sigmoid(S - log n) (Ramapuram et al. 2024: the bias -log n of sigmoid attention), 0 where
    masked; as 0.5 (1 + tanh(x / 2)), in [0, 1] for every score. ``overflow()`` for a NaN or +inf score."""
    xp = namespace(S)
    if type(S) is np.ndarray and overflow is not None and (np.isnan(S).any() or np.isposinf(S).any()):
        overflow()  # (-inf is a pair a bias excludes: weight 0)
    A = 0.5 * (1.0 + xp.tanh(0.5 * (S - math.log(n))))
    if tril is None:
        return A
    return A * tril if type(A) is np.ndarray else xp.where(tril > 0, A, xp.zeros_like(A))


def centred(f, A, Uy, hU: int):
    """Flat space: sum_eta sum_j alpha_ij U_eta (k_j - y_i) from f_i = sum_eta sum_j alpha_ij U_eta k_j,
    A[..., i, (j, eta)] and the queries' Uy[..., (i, eta), :] (the attention field's mixing layout; the
    keys k are the tokens, or a cross-attention context)."""
    n = A.shape[-2]
    rows = A.reshape(tuple(A.shape[:-1]) + (A.shape[-1] // hU, hU)).sum(-2)  # (..., i, eta): sum_j alpha_ij^eta
    Uyi = Uy.reshape(tuple(Uy.shape[:-2]) + (n, hU, Uy.shape[-1]))
    return f - namespace(f).einsum("...ie,...ied->...id", rows, Uyi)


def _masked(S, tril, xp):
    """S with the inadmissible entries (j > i under a causal mask) at -inf."""
    if tril is None:
        return S
    if type(S) is np.ndarray:
        return np.where(tril, S, -np.inf)
    return xp.where(tril > 0, S, -math.inf)


def hardmax_weights(S, tril, rtol: float, overflow):
    """(E, r): E the indicator of each row's maximisers (ties within ``rtol``), r = 1 / their
    number. ``tril`` the causal mask [i, 1, j] or None; ``overflow()`` is called (NumPy) when a
    row's largest score is not finite."""
    xp = namespace(S)
    S = _masked(S, tril, xp)
    if type(S) is np.ndarray:
        m = np.max(S, axis=-1, keepdims=True)
        if not math.isfinite(np.add.reduce(m, axis=None)):
            overflow()
        size = np.max(np.abs(np.where(np.isneginf(S), 0.0, S)), axis=-1, keepdims=True)
        E = (S >= m - rtol * size).astype(float)
        return E, 1.0 / np.einsum("...j->...", E)
    S = S.detach()  # piecewise constant: no gradient flows through the maximisers
    m = xp.max(S, axis=-1, keepdims=True)
    size = xp.max(xp.abs(xp.where(xp.isinf(S), xp.zeros_like(S), S)), axis=-1, keepdims=True)
    E = (S >= m - rtol * size).to(S.dtype)
    return E, 1.0 / xp.sum(E, axis=-1)


def _lse(X, axis: int, xp):
    if type(X) is np.ndarray:
        m = np.max(X, axis=axis, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        with np.errstate(divide="ignore"):
            return np.log(np.sum(np.exp(X - m), axis=axis, keepdims=True)) + m
    return xp.logsumexp(X, dim=axis, keepdim=True)


#: Spread max(S) - min(S) of the scores above which the Sinkhorn iteration is annealed (see
#: :func:`sinkhorn_potentials`): exp(-20) ~ 2e-9 still lets every entry take part.
ANNEAL_SPREAD = 20.0


def _sweeps(S, g, iters: int, tol: float, xp, numpy: bool):
    """At most ``iters`` row/column sweeps from the column potentials g: (f, g, sweeps, err)."""
    err, done = math.inf, 0
    for done in range(1, iters + 1):
        f = -_lse(S + g, -1, xp)  # (..., l, h, 1): rows sum to 1
        logcol = _lse(S + f, -3, xp) + g  # log column sums of exp(S + f + g)
        if numpy:  # a column sum beyond e^709 (beta ~ 1e300) is a deviation of inf: not converged yet
            with np.errstate(over="ignore"):
                dev = np.abs(np.expm1(logcol))
        else:
            dev = xp.abs(xp.expm1(logcol.detach()))
        err = float(dev.max()) if math.prod(dev.shape) else 0.0
        if err <= tol:
            return f, g, done, err
        g = g - logcol
    return -_lse(S + g, -1, xp), g, done, err  # the last update was to the columns: end with the rows


def sinkhorn_potentials(S, iters: int, tol: float, overflow=None):
    """(f, g, (sweeps, err)): log-domain Sinkhorn potentials of the scores S[..., i, eta, j], shapes
    (..., l, h, 1) and (..., 1, h, l), with alpha = exp(f + S + g) (module docstring): rows sum to 1
    to rounding, columns to ``err`` = max_j |sum_i alpha_ij - 1| after the last full sweep.
    ``overflow()`` is called (NumPy) when a score is not finite.

    Annealing (epsilon scaling, PyTorch tensors; NumPy scores go to Newton's method instead, see the
    module docstring): when the scores spread over more than :data:`ANNEAL_SPREAD`, the
    plain iteration converges slowly (its rate degrades like exp(-spread)); the potentials are
    then first computed for the scores s S with s = ANNEAL_SPREAD / spread, 2 s, 4 s, ... < 1,
    each stage to the column tolerance max(tol, 1e-6) and warm-started from the previous stage's
    potentials times the ratio of the scales, before the sweeps on S itself. ``iters`` bounds the
    sweeps of every stage. The fixed point is the same (the scaling of exp(S) is unique).
    """
    xp = namespace(S)
    numpy = type(S) is np.ndarray
    if numpy and overflow is not None and not math.isfinite(np.add.reduce(S, axis=None)):
        overflow()
    g = S[..., :1, :, :] * 0.0  # (..., 1, h, l): column potentials
    if not math.prod(S.shape):
        return S[..., :, :, :1] * 0.0, g, (0, 0.0)
    spread = float(S.max() - S.min()) if numpy else float((S.max() - S.min()).detach())
    scales, total = [], 0
    # NumPy: Newton finishes what the sweeps leave, faster than annealed sweeps (l = 64, beta = 100:
    # 0.41 s annealed, ~20 ms without), so the stages are for the PyTorch path only
    s = ANNEAL_SPREAD / spread if spread > ANNEAL_SPREAD and not numpy else 1.0
    while s < 1.0:
        scales.append(s)
        s *= 2.0
    prev = None
    for s in scales:
        g = g if prev is None else g * (s / prev)
        _, g, done, _ = _sweeps(s * S, g, iters, max(tol, 1e-6), xp, numpy)
        total, prev = total + done, s
    if prev is not None:
        g = g / prev
    newton = numpy and iters > NEWTON_AFTER  # a cap of <= NEWTON_AFTER sweeps is the truncated iteration
    f, g, done, err = _sweeps(S, g, NEWTON_AFTER if newton else iters, tol, xp, numpy)
    total += done
    if err > tol and newton:  # slow linear convergence: Newton on the dual (module docstring)
        f, g, err = _newton(S, f, g, tol)
        if err > tol and iters > done:  # Newton stalled (it should not): the remaining sweeps
            f, g, more, err = _sweeps(S, g, iters - done, tol, xp, numpy)
            total += more
    return f, g, (total, err)


def _dual(S, f, g):
    """alpha = exp(f + S + g) in [..., h, i, j] layout, its row and column sums and phi (module docstring)."""
    with np.errstate(over="ignore", invalid="ignore"):  # a trial step of the line search may overflow
        A = np.exp(f[..., :, None] + S + g[..., None, :])
        r, c = A.sum(-1), A.sum(-2)
        return A, r, c, r.sum(-1) - f.sum(-1) - g.sum(-1)


def _newton(S, f, g, tol):
    """Newton's method on Sinkhorn's dual from the potentials f (..., l, h, 1), g (..., 1, h, l) of
    S[..., i, eta, j]: (f, g, column error) in the same layout, ending with a row normalisation."""
    K = np.moveaxis(S, -2, -3)  # [..., eta, i, j]
    fv, gv = np.moveaxis(f[..., 0], -1, -2), g[..., 0, :, :]  # (..., h, l)
    n = K.shape[-1]
    m = 2 * n - 1
    diag = np.arange(m)
    A, r, c, phi = _dual(K, fv, gv)
    for _ in range(NEWTON_STEPS):
        if max(float(np.abs(r - 1).max()), float(np.abs(c - 1).max())) <= tol:
            break
        H = np.zeros(K.shape[:-2] + (m, m))
        H[..., diag[:n], diag[:n]] = r
        H[..., diag[n:], diag[n:]] = c[..., :-1]
        H[..., :n, n:] = A[..., :, :-1]
        H[..., n:, :n] = np.swapaxes(A[..., :, :-1], -1, -2)
        H[..., diag, diag] *= 1.0 + 1e-12
        grad = np.concatenate([r - 1.0, c[..., :-1] - 1.0], -1)
        with np.errstate(all="ignore"):
            step = -np.linalg.solve(H, grad[..., None])[..., 0]
        step = np.where(np.isfinite(step), step, 0.0)
        df = step[..., :n]
        dg = np.concatenate([step[..., n:], np.zeros(step.shape[:-1] + (1,))], -1)
        slope = np.einsum("...k,...k->...", grad, step)
        t = np.ones(K.shape[:-2])
        for _ in range(60):  # backtracking: each block until phi decreases enough (Armijo, 1e-4)
            _, _, _, trial = _dual(K, fv + t[..., None] * df, gv + t[..., None] * dg)
            ok = np.isfinite(trial) & (trial <= phi + 1e-4 * t * slope)
            if ok.all():
                break
            t = np.where(ok, t, 0.5 * t)
        t = np.where(ok, t, 0.0)  # a block without descent keeps its potentials
        fv, gv = fv + t[..., None] * df, gv + t[..., None] * dg
        A, r, c, phi = _dual(K, fv, gv)
        if not ok.any():
            break
    g = gv[..., None, :, :]
    f = -_lse(S + g, -1, np)  # end with the rows, as the sweeps do
    with np.errstate(over="ignore"):
        err = np.abs(np.expm1(_lse(S + f, -3, np) + g))
    return f, g, float(err.max()) if err.size else 0.0


def sinkhorn_weights(S, iters: int, tol: float, overflow):
    """(alpha, None, (sweeps, err)): the doubly stochastic scaling of exp(S) per head
    (:func:`sinkhorn_potentials`)."""
    f, g, info = sinkhorn_potentials(S, iters, tol, overflow)
    return namespace(S).exp(S + f + g), None, info
