"""The continuous attention dynamics: multi-head self-attention as a tangent vector field.

For tokens ``y_i`` on E_W = {x : x^T W x = 1} and heads eta = 1..h (ICML eq. 6, ARXIV eq. 7)::

    dy_i/dt = sum_eta sum_j alpha_ij^eta(t, y) (U_eta y_j - (y_i^T W U_eta y_j) y_i)
    alpha_ij^eta = exp(y_i^T P_eta y_j) / Z_i^eta

with ``Z_i = sqrt(d) sum_j exp(...)`` ("paper", d = n + 1), ``Z_i = sum_j exp(...)``
("softmax") or ``Z_i = l`` ("mean", GLPR's USA; ``rescaled=True``: e^{-beta} times it, finite at
every beta, see ``riemattn.dynamics._softmax``), or the hardmax / Sinkhorn normalisations
(``riemattn.dynamics._normalize``); scores may carry positions (``riemattn.dynamics._positional``).
Causal attention restricts j <= i. Flat space (``W="flat"``): field = update = sum alpha_ij U (y_j - y_i).
The un-normalised update ``f_i = sum_eta sum_j alpha_ij^eta U_eta y_j`` is :meth:`AttentionField.update`;
one transformer layer is ``pi_W(y + tau f)``, the ``"layer"`` stepper (see :mod:`riemattn.solvers.layer`).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from .._backend import constant, device_of, namespace, requires_grad, size, to_numpy
from . import _batch
from ._heads import HeadMatrices, bmm, stack_columns
from ._normalize import HARDMAX_RTOL, SINKHORN_ITERS, SINKHORN_TOL, centred, configure, other_weights
from ._parts import admissible, bias_scores, configure_parts, keys
from ._positional import alibi_bias, check_alibi, check_rope, rope_scores
from ._softmax import overflow_message, rescaled_scores, weights, weights_device
from .._validation import check_beta_batch, check_choice, check_flag, check_points, check_real, check_rescaled, check_time, check_times  # noqa: E501
from ..errors import ValidationError
from .fields import _CheckedField
from ..geometry.manifolds import Euclidean, manifold_for

__all__ = ["AttentionField", "MASKS", "NORMALIZATIONS", "OTHER_NORMALIZATIONS"]  # sa, usa: riemattn.dynamics.glpr

MASKS = ("full", "causal")
#: The softmax family: smooth fields with closed-form Jacobians and compiled kernels.
NORMALIZATIONS = ("paper", "softmax", "mean")
#: The hardmax, Sinkhorn and sigmoid normalisations (NumPy / PyTorch engine; Jacobians by finite differences).
OTHER_NORMALIZATIONS = ("hardmax", "sinkhorn", "sigmoid")


class AttentionField(_CheckedField):
    """Multi-head self-attention as a tangent vector field on the sphere or an ellipsoid.

    Parameters
    ----------
    P : array_like, shape (d, d), (h, d, d) or (..., h, d, d), or callable t -> such an array
        Query-key products P_eta = Q_eta^T K_eta. A callable is evaluated once at t = 0 to fix the
        number of heads h and d; later calls must return the same shape. Axes before (h, d, d)
        are batch axes: one stack per trajectory, broadcasting against the batch shape
        ``y.shape[:-2]`` of the tokens like an array ``beta`` (right-aligned); (d, d) and
        (h, d, d) are shared by every trajectory. One single-head matrix per trajectory is
        ``(n, 1, d, d)`` (a (n, d, d) array is n heads). See docs/index.md, "Per-trajectory weights".
    U : array_like or callable, optional
        Value matrices U_eta (d, d), (h, d, d) or (..., h, d, d) (batch axes as for P); a single
        (d, d) (or (..., 1, d, d)) is shared by all heads. None (default) means the identity for
        every head (and a faster path).
    W : array_like, shape (d, d), or "flat", optional
        SPD matrix of the ellipsoid E_W the tokens live on; None means the sphere S^(d-1);
        "flat": R^d, field and update the centred ``sum_eta sum_j alpha_ij^eta U_eta (y_j - y_i)``.
    mask : "full", "causal", a ``riemattn.masks`` mask (window, prefix), bool array or callable
        Which token attends to which (``riemattn.dynamics.masks``); "causal": j <= i.
    normalization : {"paper", "softmax", "mean", "hardmax", "sinkhorn", "sigmoid"}
        "paper": Z_i = sqrt(d) sum_j e^{y_i^T P y_j} (rows sum to 1/sqrt(d), the papers' D_eta);
        "softmax": rows sum to 1; "mean": alpha_ij = e^{y_i^T P y_j} / l (GLPR's USA; l tokens,
        also for causal attention). "hardmax": 1 / |M_i| on the maximisers M_i of row i's
        scores (bias included; ties within ``tie_rtol`` times the row's largest |score|, split
        uniformly), the limit tau -> 0 of softmax(S / tau). **Discontinuous** where a maximiser
        switches: fixed-step steppers and ``"layer"`` step across it (first order there);
        ``integrate`` refuses adaptive steppers with a ValidationError. "sinkhorn": each head's
        exp(S) scaled to a doubly stochastic matrix (log domain, any beta; mask "full" only).
        "sigmoid": alpha_ij = sigmoid(s_ij - log l) (Ramapuram et al. 2024; no row normalisation).
        Details: ``riemattn.dynamics._normalize``. These three: no compiled kernels
        (``engine="auto"`` runs NumPy), finite-difference Jacobians.
    beta : float or array_like, default 1.0
        Inverse temperature multiplying every P_eta (GLPR's beta). An array gives one beta per
        trajectory: it broadcasts against the leading (batch) axes of the tokens ``y``, so a
        phase diagram over beta is one batch.
    rescaled : bool, default False
        "mean" only: e^{-beta} times the field, weights exp(beta (y_i^T P y_j - 1)) / l, finite at
        every beta (unit tokens, |P| <= 1); the plain field's trajectories in the time s = e^beta t.
    time_vectorized : bool or None, default None
        How callable P and U are evaluated when the trajectories of a batch are at different
        times (adaptive steps are per trajectory). True: they accept a 1-D array of ``k`` times
        and return ``(k, h, d, d)`` (or ``(k, d, d)``). False: one call per distinct time.
        None: detected at construction by calling them on an array of times and comparing with
        scalar calls (``lambda t: np.cos(t) * P`` is detected as vectorised); see
        :class:`riemattn.dynamics._heads.HeadMatrices` for what is detected and how it can fail.
        Per-trajectory stacks S + (h, d, d) come as (k,) + S + (h, d, d) for k times.
    tie_rtol : float, default 2**-40
        "hardmax": the relative tolerance of ties (0: exact ties only).
    sinkhorn_iters, sinkhorn_tol : int, float, default 1000, 1e-10
        "sinkhorn": sweeps until the column sums are within tol of 1 (NumPy: Newton after 20).
    on_nonconvergence : {"warn", "raise", "ignore"}, default "warn"
        "sinkhorn", column sums above ``sinkhorn_tol``: ``riemattn.errors.SinkhornConvergenceWarning``,
        ``IntegrationError`` or nothing; the worst column error: ``field.sinkhorn_error`` (so far), ``sol.attrs``.
    alibi : float or array_like (hP,), optional
        ALiBi slopes m >= 0 (per head of P, or shared): ``S_ij = beta y_i^T P y_j - m |i - j|``.
    rope, rope_key : array_like (k,), array_like (d, d) or (hP, d, d), optional
        RoPE frequencies theta (k <= d // 2) and key matrix K (default I): ``S_ij = y_i^T beta P
        R((j - i) theta) K y_j``, R the block rotation of the coordinate pairs (2m, 2m + 1).
        Positions combine with masks, heads, time-varying weights and every normalisation
        (``riemattn.dynamics._positional``).
    bias : array (l, l) or (h, l, l), callable of (i, j), or ``riemattn.biases`` bias, optional
        Added to the scores after beta (``riemattn.dynamics.biases``; ALiBi: ``biases.alibi(m)``).
    update : {"centred", "uncentred"}, default "centred"
        ``W="flat"`` only: "uncentred" is sum_j alpha_ij U_eta y_j instead of U_eta (y_j - y_i).
    context : array_like, shape (m, d) or (..., m, d), optional
        Cross-attention: keys and values from the fixed c_j (``riemattn.dynamics._parts``).

    Notes
    -----
    ``field(t, y)`` returns the tangent vectors (shape of ``y``); ``field.update(t, y)`` returns the
    un-normalised update ``sum_eta sum_j alpha_ij^eta U_eta y_j``; ``field.attention(t, y)`` returns
    alpha, shape (..., h, l, l). ``t`` is a float or an array of one time per trajectory (shape
    ``y.shape[:-2]``). The softmax subtracts the largest score, so scores of any size are safe.
    Per-trajectory P and U (batch axes) are carried by every stepper, the adaptive loop's
    compaction (:meth:`take`), the closed-form Jacobians of the stiff steppers, events, tensors
    and gradients; W is shared by all trajectories (one manifold).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (6).
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", (SA), (USA).
    Alcalde, Fantuzzi, Zuazua, arXiv 2407.01602 (hardmax); Sander et al., "Sinkformers", AISTATS
    2022; Press et al., ICLR 2022 (ALiBi); Su et al., "RoFormer" 2021 (RoPE).
    """

    def __init__(self, P, U=None, *, W=None, mask="full", normalization="paper", beta=1.0,
                 time_vectorized=None, rescaled=False, tie_rtol=HARDMAX_RTOL, sinkhorn_iters=SINKHORN_ITERS,
                 sinkhorn_tol=SINKHORN_TOL, on_nonconvergence="warn", alibi=None, rope=None, rope_key=None,
                 bias=None, update="centred", context=None):
        self.normalization = check_choice(normalization, "normalization", NORMALIZATIONS + OTHER_NORMALIZATIONS)
        self.beta = check_beta_batch(beta)
        self.rescaled = check_rescaled(rescaled, None if normalization == "mean" else f"{normalization=}", self.beta)
        self.time_vectorized = None if time_vectorized is None else check_flag(time_vectorized, "time_vectorized")
        self._P = HeadMatrices(P, "P", None, self.time_vectorized)
        d = self._P.shape[-1]
        self._U = None if U is None else HeadMatrices(U, "U", d, self.time_vectorized)
        hU = 1 if self._U is None else self._U.h
        if hU not in (1, self._P.h) and self._P.h != 1:
            raise ValidationError(
                f"U has {hU} heads but P has {self._P.h}; give one U per head or a single (d, d) U "
                "shared by all heads."
            )
        try:  # the batch shape of per-trajectory weights (() when shared)
            self.weights_batch = np.broadcast_shapes(self._P.batch, () if self._U is None else self._U.batch)
        except ValueError:
            raise ValidationError(
                f"P of shape {self._P.shape} and U of shape {self._U.shape} have per-trajectory batch "
                f"shapes {self._P.batch} and {self._U.batch} that do not broadcast against each other."
            ) from None
        self.flat = isinstance(W, str) and W == "flat"
        self.manifold = Euclidean(d) if self.flat else manifold_for(W, d, f"P of shape {self._P.shape[-2:]}")
        self.W = None if W is None or self.flat else self.manifold.W
        self.h = max(self._P.h, hU)
        self.alibi = check_alibi(alibi, self._P.h)
        self.rope, self.rope_key = check_rope(rope, rope_key, d, self._P.h)
        configure_parts(self, mask, bias, update, context)
        configure(self, tie_rtol, sinkhorn_iters, sinkhorn_tol, on_nonconvergence)
        # closed_form: whether the closed-form Jacobians of riemattn.dynamics.jacobians apply
        self.closed_form = (self.normalization in NORMALIZATIONS and self.alibi is None and self.rope is None
                            and not self.flat and self.mask in MASKS and self.bias is None and self.context is None)
        # a scalar beta is folded into constant P; an array beta scales the scores per trajectory
        self._bscale = self.beta if isinstance(self.beta, float) and not self.rescaled else 1.0
        const = self._P.const
        self._scalar_P = None  # P = c I (GLPR's SA/USA): scores are c y y^T
        if const is not None and const.shape[:-2] == (1,):
            c = const[0, 0, 0]
            if np.array_equal(const[0], c * np.eye(d)):
                with np.errstate(over="ignore"):  # beta c beyond the float range: the scores say so, naming beta
                    self._scalar_P = self._bscale * c
        self._set_columns()
        self._batch_ok = None  # the last token batch shape the per-trajectory weights were checked against
        self._tril = {}
        self._consts = {}  # the constants above on other devices / dtypes (see _backend.constant)
        self._work = threading.local()  # per-thread work buffers of the hot path (see _buffer)
        self._checked = True  # public calls validate y; integrate() steps an unchecked copy

    def _set_columns(self):
        """The constant P and U as the column blocks of the hot path's products (or None)."""
        with np.errstate(over="ignore"):  # beta P beyond the float range: the scores say so, naming beta
            self._Pcols = None if self._P.const is None else stack_columns(self._bscale * self._P.const)
        self._Ucols = None
        if self._U is not None and self._U.const is not None:
            self._Ucols = stack_columns(np.swapaxes(self._U.const, -1, -2))

    # ------------------------------------------------------------------------------------------
    def P(self, t=0.0) -> np.ndarray:
        """beta * P_eta(t), shape (..., h, d, d): leading axes of an array t, beta, batched P."""
        t = check_times(t, "t") if np.ndim(t) else check_real(t, "t")
        Pt = self._P.at(t, _batch.batch_of(t, self._P)) if np.ndim(t) else self._P(t)
        Pt = np.broadcast_to(Pt, Pt.shape[:-3] + (self.h,) + Pt.shape[-2:])
        return to_numpy(self.beta)[(...,) + (None,) * 3] * Pt

    def U(self, t=0.0) -> np.ndarray:
        """U_eta(t), shape (..., h, d, d) (identities if U is None): leading axes of t, batched U."""
        t = check_times(t, "t") if np.ndim(t) else check_real(t, "t")
        if self._U is None:
            return np.broadcast_to(np.eye(self.d), (self.h, self.d, self.d))
        Ut = self._U.at(t, _batch.batch_of(t, self._U)) if np.ndim(t) else self._U(float(t))
        return np.broadcast_to(Ut, Ut.shape[:-3] + (self.h,) + Ut.shape[-2:])

    def _check_y(self, y) -> np.ndarray:
        """Public calls: real finite tokens (..., l, d), l >= 1 (any leading axes, even empty); off the
        manifold too (each method is the ambient extension of its formula, as ambient solvers need)."""
        if (type(y) is np.ndarray and y.dtype == np.float64 and y.ndim >= 2 and y.shape[-1] == self.d
                and y.shape[-2] and math.isfinite(np.add.reduce(y, axis=None))):
            return y  # the common case, ~2 us (NaN/inf propagate into the sum; on an overflow, the full check)
        return check_points(y, "y", self.manifold, on_manifold=False)

    # Array backends (riemattn._backend): NumPy float64 tokens use the constants as stored, tensors cached copies.
    def _const(self, name: str, value, y):
        return constant(self._consts, name, value, y)

    def take(self, index, batch_shape: tuple):
        """This field for the trajectories ``index`` of the flattened batch ``batch_shape``: ``self`` for shared
        beta, P and U, else a copy with them taken at ``index`` (``riemattn.dynamics._batch``)."""
        return _batch.take(self, index, batch_shape)

    def _mm(self, a, b, buffer: str | None = None):
        """``a @ b``: NumPy through :func:`bmm` (small-product threading, optional work buffer)."""
        if type(a) is np.ndarray:
            out = None if buffer is None else self._buffer(buffer, a.shape[:-1] + b.shape[-1:])
            return bmm(a, b, out=out)
        return a @ b

    # Internal layout of scores and attention: [..., i, eta, j] (token, head, neighbour). With it every
    # product below is one BLAS call on contiguous operands: (l*h, d) @ (d, l) for the scores and
    # (l, l*h) @ (l*h, d) for the mixing, per trajectory.
    def _raw_scores(self, t, y, yT, batch, n):
        """y_i^T beta P_eta(t) y_j (beta folded in where it is a scalar), [..., i, eta, j]."""
        if self.rope is not None:
            return rope_scores(self._consts, y, self._bscale * self._P.at(t, batch, y), self.rope_key, self.rope)
        if self._scalar_P is not None:
            return (self._scalar_P * self._mm(y, yT))[..., :, None, :]
        if self._Pcols is not None:
            cols = self._const("Pcols", self._Pcols, y)
        else:
            Pt = self._P.at(t, batch, y)
            cols = stack_columns(Pt if self._bscale == 1.0 else self._bscale * Pt)
        h = cols.shape[-1] // self.d
        if cols.ndim == 2:  # one P for the whole batch: a single (B l, d) @ (d, h d) product
            yP = self._mm(y.reshape(-1, self.d), cols).reshape(batch + (n * h, self.d))
        else:  # one P per trajectory
            yP = self._mm(y, cols).reshape(batch + (n * h, self.d))
        return self._mm(yP, yT, "S").reshape(batch + (n, h, yT.shape[-1]))

    def _scores(self, t, y: np.ndarray) -> np.ndarray:
        """S[..., i, eta, j] = y_i^T beta P_eta(t) k_j, k the keys: y, or the context (cross-attention)."""
        yT = keys(self, y).swapaxes(-1, -2)
        batch = tuple(y.shape[:-2])
        n = y.shape[-2]
        if batch != self._batch_ok:
            _batch.check_batch(self, batch)
        with np.errstate(over="ignore", invalid="ignore"):  # scores beyond the float range: weights() raises, naming beta
            S = self._raw_scores(t, y, yT, batch, n)
        factor = _batch.beta_factor(self, batch, y)
        if self.rescaled:  # beta (y_i^T P y_j - 1): beta was not folded into P
            S = rescaled_scores(S, self.beta if factor is None else factor)
        elif factor is not None:
            if requires_grad(factor) or requires_grad(S):
                S = S * factor
            else:
                S *= factor
        if self.alibi is not None:  # -m |i - j|, after beta
            S = S + alibi_bias(self._consts, self.alibi, n, y)
        if self.bias is not None:  # a bias part, after beta
            S = S + bias_scores(self, t, n, y)
        return S

    def _buffer(self, name: str, shape: tuple) -> np.ndarray:
        """A reusable float64 work array (per thread, per name, kept for the last shape asked): fresh
        large temporaries made a call 1.5-3x slower per trajectory at B = 400 than at B = 200
        (mmap/munmap; docs/steppers.md). Buffers never leave the field."""
        store = self._work.__dict__
        buf = store.get(name)
        if buf is None or buf.shape != shape:
            buf = store[name] = np.empty(shape)
        return buf

    def _causal(self, n: int, y=None) -> np.ndarray:  # [i, 1, j] (j <= i): bool; tensors: 0/1 in y's dtype
        if n not in self._tril:
            self._tril[n] = np.tril(np.ones((n, n), dtype=bool))[:, None, :]
        if y is None or type(y) is np.ndarray:
            return self._tril[n]
        return self._const(("tril", n), self._tril[n].astype(float), y)

    def _weights(self, t, y: np.ndarray):
        """(E, r): alpha = E * r[..., None] ("paper", "softmax"), or E when r is None (see _softmax)."""
        S = self._scores(t, y)
        n = S.shape[-1]  # the keys (the tokens, or the context)
        if self.normalization in OTHER_NORMALIZATIONS:
            return other_weights(self, S, t, y)
        scale = np.sqrt(self.d) if self.normalization == "paper" else 1.0
        tril = None if self.mask == "full" else self._causal(n, S) if self.mask == "causal" else admissible(self, n, S)
        if type(S) is not np.ndarray:
            return weights_device(S, n, self.normalization, scale, tril)
        return weights(S, n, self.normalization, scale, tril, lambda smax=None: self._overflow(t, y, smax))

    def _overflow(self, t, y, smax=None):
        """Scores or weights beyond the float range: raise naming beta and P (NaN/inf tokens: let them through)."""
        if np.isfinite(y).all():
            p_max = float(np.max(np.abs(self._P(float(np.max(t))))))
            raise ValidationError(overflow_message(self.beta, p_max, self.rescaled, smax))

    def _attention(self, t, y: np.ndarray) -> np.ndarray:
        """alpha[..., i, eta, j] (internal layout)."""
        E, r = self._weights(t, y)
        if r is not None:
            if requires_grad(E):
                return E * r[..., None]  # autograd: E is saved by exp
            E *= r[..., None]
        return E

    def attention(self, t, y) -> np.ndarray:
        """Attention matrices alpha_ij^eta(t, y), shape (..., h, l, m) (m = l, or the context's keys)."""
        y, t = self._check_y(y), check_time(t)
        xp = namespace(y)
        shape = tuple(y.shape[:-2]) + (self.h, y.shape[-2], keys(self, y).shape[-2])
        if size(y) == 0:
            return xp.zeros(shape, dtype=y.dtype, device=device_of(y))
        A = self._attention(t, y).swapaxes(-2, -3)
        A = xp.broadcast_to(A, shape)
        return np.array(A) if type(A) is np.ndarray else A.contiguous()  # a copy (A holds a work buffer)

    def update(self, t, y) -> np.ndarray:
        """The un-normalised attention update f_i = sum_eta sum_j alpha_ij^eta U_eta y_j, shape (..., l, d):
        one layer is ``pi_W(y + tau * update(t, y))`` ("layer"), the field its tangent part (I - y_i y_i^T W) f_i."""
        y, t = (self._check_y(y), check_time(t)) if self._checked else (y, t)
        return self._update(t, y) if size(y) else namespace(y).zeros_like(y)

    def _update(self, t, y: np.ndarray) -> np.ndarray:
        """:meth:`update` for checked tokens."""
        n = y.shape[-2]
        if self._U is None:
            E, r = self._weights(t, y)  # (..., l, hP, l), (..., l, hP)
            if r is None:
                A = E.sum(axis=-2) if E.shape[-2] > 1 else E[..., 0, :]
            elif type(E) is not np.ndarray:
                A = (E * r[..., None]).sum(-2) if E.shape[-2] > 1 else E[..., 0, :] * r
            else:  # normalise and sum over heads in one pass
                A = np.einsum("...ihj,...ih->...ij", E, r, out=self._buffer("A", E.shape[:-3] + (n, E.shape[-1])))
            f = self._mm(A, keys(self, y))
            return f - A.sum(-1)[..., None] * y if self.flat and self.centred else f  # flat: sum_j alpha_ij (y_j - y_i)
        A = self._attention(t, y)  # (..., l, hP, l)
        batch = tuple(y.shape[:-2])
        if self._Ucols is not None:
            cols = self._const("Ucols", self._Ucols, y)
        else:
            cols = stack_columns(self._U.at(t, batch, y).swapaxes(-1, -2))
        hU, kv = cols.shape[-1] // self.d, keys(self, y)
        m = kv.shape[-2]
        # rows (j, eta)
        if cols.ndim == 2:
            Uy = self._mm(kv.reshape(-1, self.d), cols).reshape(batch + (m * hU, self.d))
        else:
            Uy = self._mm(kv, cols).reshape(batch + (m * hU, self.d))
        if A.shape[-2] != hU:  # one U shared by the P heads: sum their attention; one P shared by U heads
            xp = namespace(A)
            A = xp.sum(A, axis=-2, keepdims=True) if hU == 1 else xp.broadcast_to(A, tuple(A.shape[:-2]) + (hU, m))
        A = A.swapaxes(-1, -2).reshape(tuple(A.shape[:-3]) + (n, m * hU))  # columns (j, eta)
        f = self._mm(A, Uy)
        if not (self.flat and self.centred):
            return f
        return centred(f, A, Uy if kv is y else self._mm(y, cols).reshape(batch + (n * hU, self.d)), hU)

    def drive(self, t, y) -> np.ndarray:
        """Deprecated alias of :meth:`update` (the name used before version 0.2)."""
        import warnings
        warnings.warn("AttentionField.drive is deprecated; use AttentionField.update.", DeprecationWarning, stacklevel=2)
        return self.update(t, y)

    def __call__(self, t, y) -> np.ndarray:
        """Tangent field F_i = (I - y_i y_i^T W) f_i, shape (..., l, d)."""
        y, t = (self._check_y(y), check_time(t)) if self._checked else (y, t)  # integrate steps the unchecked twin
        if size(y) == 0:  # an empty batch
            return namespace(y).zeros_like(y)
        return self.manifold.tangent(y, self._update(t, y))

    def __repr__(self) -> str:
        kind = "time-dependent" if self._P.fn is not None else "constant"
        beta = self.beta if isinstance(self.beta, float) else f"array{tuple(self.beta.shape)}"
        per = f", per-trajectory weights of batch shape {self.weights_batch}" if self.weights_batch else ""
        return (
            f"AttentionField(h={self.h}, d={self.d}, {kind} P, U={'I' if self._U is None else 'given'}{per}, "
            f"manifold={self.manifold!r}, mask={self.mask!r}, normalization={self.normalization!r}, "
            f"beta={beta}{', rescaled=True' if self.rescaled else ''}{_positions(self)})"
        )


def _positions(f) -> str:
    out = "".join(f", {k}={v.tolist()}" for k, v in (("alibi", f.alibi), ("rope", f.rope)) if v is not None)
    out += f", bias={f.bias!r}" if f.bias is not None else ""
    out += f", context of shape {f.context.shape}" if f.context is not None else ""
    return out + ("" if f.centred else ", update='uncentred'")

