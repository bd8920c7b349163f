"""The attention dynamics: the continuous field (SPEC section 3) and the discrete layer (section 2).

Continuous model (ICML eq. 6, ARXIV eq. 7), for tokens ``y_i`` on E_W, heads eta = 1..h::

    dy_i/dt = sum_eta sum_j alpha_ij^eta(t, y) (U_eta y_j - (y_i^T W U_eta y_j) y_i)
    alpha_ij^eta = exp(y_i^T P_eta y_j) / Z_i^eta

with ``Z_i = sqrt(d) sum_j exp(...)`` ("paper", d = n + 1), ``Z_i = sum_j exp(...)``
("softmax") or ``Z_i = l`` ("mean", GLPR's USA). Causal attention restricts j <= i.
"""

from __future__ import annotations

import contextlib
from numbers import Real

import numpy as np

from ._validation import as_float_array, check_choice, check_finite
from .errors import InputTypeError, ValidationError
from .fields import Field
from .manifolds import manifold_for

__all__ = ["AttentionField", "TransformerLayer", "sa", "usa", "MASKS", "NORMALIZATIONS"]

MASKS = ("full", "causal")
NORMALIZATIONS = ("paper", "softmax", "mean")


def _as_heads(value, name: str, d: int | None) -> np.ndarray:
    """Check a (d, d) or (h, d, d) finite array and return it as (h, d, d)."""
    arr = check_finite(as_float_array(value, name), name)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
        raise ValidationError(f"{name} must have shape (d, d) or (h, d, d), got shape {arr.shape}.")
    if d is not None and arr.shape[-1] != d:
        raise ValidationError(
            f"{name} acts on R^{arr.shape[-1]} (shape {arr.shape}) but the tokens live in R^{d}."
        )
    if arr.shape[0] == 0:
        raise ValidationError(f"{name} has zero heads (shape {arr.shape}).")
    return arr


class _HeadMatrices:
    """A constant or time-dependent stack of per-head matrices, shape (h, d, d)."""

    def __init__(self, value, name: str, d: int | None):
        self.name = name
        if callable(value) and not isinstance(value, np.ndarray):
            self.fn = value
            try:
                first = value(0.0)
            except Exception as exc:  # noqa: BLE001 - re-raised with context
                raise ValidationError(f"{name}(t) failed when evaluated at t = 0: {exc!r}") from exc
            self.const = None
            self.shape = _as_heads(first, f"{name}(0)", d).shape
            self.ndim_out = np.ndim(first)
        else:
            self.fn = None
            self.const = _as_heads(value, name, d)
            self.shape = self.const.shape

    def __call__(self, t: float) -> np.ndarray:
        if self.fn is None:
            return self.const
        out = self.fn(t)
        if type(out) is not np.ndarray or out.dtype != np.float64:
            out = np.asarray(out, dtype=float)
        if out.ndim == 2:
            out = out[None]
        if out.shape != self.shape:
            raise ValidationError(
                f"{self.name}(t) returned shape {out.shape} at t = {t!r}; expected {self.shape} "
                f"(the shape it had at t = 0)."
            )
        if not np.isfinite(out).all():
            raise ValidationError(f"{self.name}(t) returned NaN or inf at t = {t!r}.")
        return out


_BLAS_LIMITER = []


def _one_blas_thread():
    """Context limiting OpenBLAS/MKL to one thread (threadpoolctl), or a no-op without it."""
    if not _BLAS_LIMITER:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS_LIMITER.append(ThreadpoolController().select(user_api="blas"))
        except Exception:  # noqa: BLE001 - optional dependency; any failure means "no limiting"
            _BLAS_LIMITER.append(None)
    ctl = _BLAS_LIMITER[0]
    if ctl is None or not ctl.lib_controllers:
        return contextlib.nullcontext()
    return ctl.limit(limits=1)


#: Matrix products of at most ``_SMALL_PRODUCT`` multiply-adds per matrix (and at least
#: ``_SMALL_TOTAL`` in all, so that tiny problems skip the ~10 us of switching) run with BLAS
#: limited to one thread. OpenBLAS splits such products over its threads, which gains little at
#: these sizes and is very costly when the cores are shared with other processes: each threaded
#: call then waits for a time slice. Measured on the 2-core development machine under load
#: (benchmarks/bench_field.py, work_precision.py): 100 products (100 x 500) @ (500 x 50) took
#: 50 ms with one thread and 0.2-2 s with two; one (50 x 500) @ (500 x 1000) product 1.6-22 ms
#: with two threads. (threadpoolctl's limit is process-wide while it lasts: BLAS calls made by
#: other Python threads during such a product also run on one thread.)
_SMALL_PRODUCT = 1 << 25
_SMALL_TOTAL = 1 << 20


def _bmm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` (matrices or stacks of them); one BLAS thread when the matrices are small."""
    m, k = a.shape[-2:]
    work = m * k * b.shape[-1]
    if _SMALL_TOTAL <= work * max(1, a.size // max(1, m * k)) and work <= _SMALL_PRODUCT:
        with _one_blas_thread():
            return a @ b
    return a @ b


def _stack_columns(M: np.ndarray) -> np.ndarray:
    """(h, d, d) -> (d, h*d) with block eta equal to M_eta: so ``y @ out`` gives y^T M_eta per head."""
    h, d, _ = M.shape
    return M.transpose(1, 0, 2).reshape(d, h * d)


class AttentionField(Field):
    """Multi-head self-attention as a tangent vector field on the sphere or an ellipsoid.

    Parameters
    ----------
    P : array_like, shape (d, d) or (h, d, d), or callable t -> such an array
        Query-key products P_eta = Q_eta^T K_eta. A callable is evaluated once at t = 0 to fix the
        number of heads h and d; later calls must return the same shape.
    U : array_like or callable, optional
        Value matrices U_eta (d, d) or (h, d, d); a single (d, d) is shared by all heads.
        None (default) means the identity for every head (and a faster path).
    W : array_like, shape (d, d), optional
        SPD matrix of the ellipsoid E_W the tokens live on; None means the sphere S^(d-1).
    mask : {"full", "causal"}
        Causal attention restricts token i to tokens j <= i (lower triangular attention).
    normalization : {"paper", "softmax", "mean"}
        "paper": Z_i = sqrt(d) sum_j e^{y_i^T P y_j} (rows sum to 1/sqrt(d), the papers' D_eta);
        "softmax": rows sum to 1; "mean": alpha_ij = e^{y_i^T P y_j} / l (GLPR's USA; l tokens,
        also for causal attention).
    beta : float, default 1.0
        Inverse temperature multiplying every P_eta (GLPR's beta).

    Notes
    -----
    ``field(t, y)`` returns the tangent vectors (shape of ``y``); ``field.drive(t, y)`` returns the
    un-projected update sum_eta sum_j alpha_ij U_eta y_j; ``field.attention(t, y)`` returns alpha,
    shape (..., h, l, l). The softmax subtracts each row's maximum, so scores of any size are safe.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", (SA), (USA).
    """

    def __init__(self, P, U=None, *, W=None, mask="full", normalization="paper", beta=1.0):
        self.mask = check_choice(mask, "mask", MASKS)
        self.normalization = check_choice(normalization, "normalization", NORMALIZATIONS)
        if isinstance(beta, bool) or not isinstance(beta, Real) or not np.isfinite(beta):
            raise InputTypeError(f"beta must be a finite real number, got {beta!r}.")
        self.beta = float(beta)
        d_w = None if W is None else np.shape(W)[-1] if np.ndim(W) == 2 else None
        self._P = _HeadMatrices(P, "P", d_w)
        d = self._P.shape[-1]
        self._U = None if U is None else _HeadMatrices(U, "U", d)
        if self._U is not None and self._U.shape[0] not in (1, self._P.shape[0]):
            if self._P.shape[0] != 1:
                raise ValidationError(
                    f"U has {self._U.shape[0]} heads but P has {self._P.shape[0]}; give one U per "
                    "head or a single (d, d) U shared by all heads."
                )
        self.manifold = manifold_for(W, d)
        self.W = None if W is None else self.manifold.W
        self.h = max(self._P.shape[0], 1 if self._U is None else self._U.shape[0])
        const = self._P.const
        # Fast path for P = c * I (GLPR's SA/USA): scores are c * y y^T.
        self._scalar_P = None
        if const is not None and const.shape[0] == 1:
            c = const[0, 0, 0]
            if np.array_equal(const[0], c * np.eye(d)):
                self._scalar_P = self.beta * c
        self._Pcols = None if const is None else _stack_columns(self.beta * const)
        self._Ucols = None
        if self._U is not None and self._U.const is not None:
            self._Ucols = _stack_columns(self._U.const.transpose(0, 2, 1))
        self._tril = {}

    # ------------------------------------------------------------------------------------------
    def P(self, t: float = 0.0) -> np.ndarray:
        """beta * P_eta(t), shape (h, d, d)."""
        return self.beta * np.broadcast_to(self._P(t), (self.h,) + self._P.shape[1:])

    def U(self, t: float = 0.0) -> np.ndarray:
        """U_eta(t), shape (h, d, d) (identity matrices when U is None)."""
        if self._U is None:
            return np.broadcast_to(np.eye(self.d), (self.h, self.d, self.d))
        return np.broadcast_to(self._U(t), (self.h,) + self._U.shape[1:])

    def _check_y(self, y) -> np.ndarray:
        y = np.asarray(y, dtype=float)
        if y.ndim < 2 or y.shape[-1] != self.d:
            raise ValidationError(
                f"y must have shape (..., l, {self.d}) for this field (d = {self.d}), got {y.shape}."
            )
        return y

    # Internal layout of scores and attention: [..., i, eta, j] (token, head, neighbour). With it every
    # product below is one BLAS call on contiguous operands: (l*h, d) @ (d, l) for the scores and
    # (l, l*h) @ (l*h, d) for the mixing, per trajectory.
    def _scores(self, t: float, y: np.ndarray) -> np.ndarray:
        """S[..., i, eta, j] = y_i^T beta P_eta(t) y_j."""
        yT = np.swapaxes(y, -1, -2)
        if self._scalar_P is not None:
            return (self._scalar_P * _bmm(y, yT))[..., :, None, :]
        if self._Pcols is not None:
            cols = self._Pcols
        else:
            Pt = self._P(t)
            cols = _stack_columns(Pt if self.beta == 1.0 else self.beta * Pt)
        h = cols.shape[1] // self.d
        n = y.shape[-2]
        yP = _bmm(y.reshape(-1, self.d), cols).reshape(y.shape[:-2] + (n * h, self.d))
        return _bmm(yP, yT).reshape(y.shape[:-2] + (n, h, n))

    def _causal(self, n: int) -> np.ndarray:
        if n not in self._tril:
            self._tril[n] = np.tril(np.ones((n, n), dtype=bool))[:, None, :]
        return self._tril[n]

    #: Largest spread max(S) - min(S) of the scores for which one shift by the global maximum is
    #: used in the softmax (exp(-600) ~ 1e-261 is still a normal float, so no row underflows and
    #: every row sum keeps full relative precision); beyond it, each row's maximum is subtracted.
    _GLOBAL_SHIFT_SPREAD = 600.0

    def _weights(self, t: float, y: np.ndarray):
        """Unnormalized weights E[..., i, eta, j] and per-row factors r[..., i, eta] with
        alpha = E * r[..., None] ("paper" / "softmax"); for "mean" r is None and E is alpha."""
        S = self._scores(t, y)
        n = y.shape[-2]
        causal = self.mask == "causal"
        if self.normalization != "mean":
            smax, smin = S.max(), S.min()
            if smax - smin < self._GLOBAL_SHIFT_SPREAD:  # False for NaN: the per-row path below
                E = np.exp(S - smax)
                if causal:
                    E *= self._causal(n)
                scale = np.sqrt(self.d) if self.normalization == "paper" else 1.0
                return E, 1.0 / (scale * np.einsum("...j->...", E))
        if causal:
            S = np.where(self._causal(n), S, -np.inf)
        m = np.max(S, axis=-1, keepdims=True)
        E = np.exp(S - m)
        if self.normalization == "mean":
            with np.errstate(over="raise"):
                try:
                    return E * (np.exp(m) / n), None
                except FloatingPointError:
                    raise ValidationError(
                        "normalization='mean' overflowed: exp(y_i^T P y_j) exceeds the float range "
                        f"(max score {float(np.max(m)):.4g}); reduce beta or use 'softmax'."
                    ) from None
        scale = np.sqrt(self.d) if self.normalization == "paper" else 1.0
        return E, 1.0 / (scale * np.sum(E, axis=-1))

    def _attention(self, t: float, y: np.ndarray) -> np.ndarray:
        """alpha[..., i, eta, j] (internal layout)."""
        E, r = self._weights(t, y)
        if r is not None:
            E *= r[..., None]
        return E

    def attention(self, t: float, y) -> np.ndarray:
        """Attention matrices alpha_ij^eta(t, y), shape (..., h, l, l)."""
        y = self._check_y(y)
        A = np.swapaxes(self._attention(t, y), -2, -3)
        return np.ascontiguousarray(np.broadcast_to(A, y.shape[:-2] + (self.h,) + A.shape[-2:]))

    def drive(self, t: float, y) -> np.ndarray:
        """Un-projected update f_i = sum_eta sum_j alpha_ij^eta U_eta y_j, shape (..., l, d)."""
        y = self._check_y(y)
        n = y.shape[-2]
        if self._U is None:
            E, r = self._weights(t, y)  # (..., l, hP, l), (..., l, hP)
            if r is None:
                A = E.sum(axis=-2) if E.shape[-2] > 1 else E[..., 0, :]
            else:  # normalise and sum over heads in one pass
                A = np.einsum("...ihj,...ih->...ij", E, r)
            return _bmm(A, y)
        A = self._attention(t, y)  # (..., l, hP, l)
        cols = self._Ucols if self._Ucols is not None else _stack_columns(
            np.swapaxes(self._U(t), -1, -2))
        hU = cols.shape[1] // self.d
        # rows (j, eta)
        Uy = _bmm(y.reshape(-1, self.d), cols).reshape(y.shape[:-2] + (n * hU, self.d))
        if A.shape[-2] != hU:  # one P shared by several U heads
            A = np.broadcast_to(A, A.shape[:-2] + (hU, n))
        A = np.swapaxes(A, -1, -2).reshape(A.shape[:-3] + (n, n * hU))  # columns (j, eta)
        return _bmm(A, Uy)

    def __call__(self, t: float, y) -> np.ndarray:
        """Tangent field F_i = (I - y_i y_i^T W) f_i, shape (..., l, d)."""
        y = self._check_y(y)
        f = self.drive(t, y)
        return f - self.manifold.inner(y, f)[..., None] * y

    def __repr__(self) -> str:
        kind = "time-dependent" if self._P.fn is not None else "constant"
        return (
            f"AttentionField(h={self.h}, d={self.d}, {kind} P, U={'I' if self._U is None else 'given'}, "
            f"manifold={self.manifold!r}, mask={self.mask!r}, normalization={self.normalization!r}, "
            f"beta={self.beta})"
        )


def sa(beta: float, d: int, **kwargs) -> AttentionField:
    """GLPR's self-attention (SA) on S^(d-1): Q = K = V = I, plain softmax, inverse temperature beta.

    dx_i/dt = P_x_i^perp ( (1/Z_i) sum_j e^{beta <x_i, x_j>} x_j ),  Z_i = sum_j e^{beta <x_i, x_j>}.
    """
    return AttentionField(np.eye(d), beta=beta, normalization="softmax", **kwargs)


def usa(beta: float, d: int, **kwargs) -> AttentionField:
    """GLPR's unnormalized self-attention (USA): dx_i/dt = P^perp((1/n) sum_j e^{beta <x_i,x_j>} x_j)."""
    return AttentionField(np.eye(d), beta=beta, normalization="mean", **kwargs)


def _as_head_stack(value, name: str, rows: str, cols: str) -> np.ndarray:
    arr = check_finite(as_float_array(value, name), name)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise ValidationError(f"{name} must have shape ({rows}, {cols}) or (h, {rows}, {cols}), got {arr.shape}.")
    return arr


class TransformerLayer:
    """One transformer layer without feed-forward: attention, skip connection, layer norm pi_W.

    ``layer(y)_i = pi_W( y_i + sum_eta sum_j W_eta V_eta y_j exp(y_i^T Q_eta^T K_eta y_j) / Z_i^eta )``
    with ``Z_i^eta = sqrt(d) sum_j exp(...)`` (SPEC section 2, ICML eq. 1 and 4).

    Parameters
    ----------
    Q, K, V : array_like, shape (w, d) or (h, w, d)
        Query, key and value matrices per head.
    Wo : array_like, shape (d, w) or (h, d, w)
        Output matrices per head.
    W : array_like, shape (d, d), optional
        SPD matrix of the layer normalization (None: the sphere).
    mask : {"full", "causal"}

    Notes
    -----
    The layer *is* one projected Euler step of size tau of the continuous field with
    ``P = Q^T K`` and ``U = Wo V / tau`` (ICML section 2): that is how ``__call__`` is implemented,
    with ``tau = 1``; :meth:`continuous_field` gives the field for other tau.
    """

    def __init__(self, Q, K, V, Wo, W=None, *, mask="full"):
        Q = _as_head_stack(Q, "Q", "w", "d")
        K = _as_head_stack(K, "K", "w", "d")
        V = _as_head_stack(V, "V", "w", "d")
        Wo = _as_head_stack(Wo, "Wo", "d", "w")
        h, w, d = Q.shape
        for name, M, shape in (("K", K, (h, w, d)), ("V", V, (h, w, d)), ("Wo", Wo, (h, d, w))):
            if M.shape != shape:
                raise ValidationError(f"{name} must have shape {shape} to match Q {Q.shape}, got {M.shape}.")
        self.Q, self.K, self.V, self.Wo = Q, K, V, Wo
        self.P = np.swapaxes(Q, -1, -2) @ K  # (h, d, d)
        self.U = Wo @ V  # (h, d, d)
        self.field = self.continuous_field(1.0, W=W, mask=mask)
        self.manifold = self.field.manifold

    def continuous_field(self, tau: float = 1.0, *, W=None, mask=None) -> AttentionField:
        """The field with P = Q^T K and U = Wo V / tau whose projected Euler step of size tau is this layer."""
        if W is None and hasattr(self, "field"):
            W = self.field.W
        mask = mask if mask is not None else self.field.mask
        return AttentionField(self.P, self.U / tau, W=W, mask=mask, normalization="paper")

    def __call__(self, y) -> np.ndarray:
        """The next layer's tokens, shape (..., l, d)."""
        from .steppers import STEPPERS

        return STEPPERS["euler"]().step(self.field, 0.0, np.asarray(y, dtype=float), 1.0).y
