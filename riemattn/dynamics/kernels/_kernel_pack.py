"""Packing a field into the compiled kernels' run-time data (private; see :mod:`riemattn.dynamics.kernels`)."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..._backend import is_torch
from ...errors import UnsupportedByEngine, ValidationError
from ...geometry.manifolds import Euclidean, Sphere
from . import _kernel_layout as K
from .._batch import check_batch
from ..attention import AttentionField
from ..circle import CircleField
from ..layernorm import LayerNormField
from ..schedules import PiecewiseConstantHeads, TimeVaryingHeads


class KernelPack(NamedTuple):
    """A field as plain arrays for the compiled kernels (see :func:`pack_field`).

    Attributes
    ----------
    ints : ndarray of int64, shape (N_INTS,)
        Configuration (slots of ``riemattn.dynamics.kernels._kernel_layout``).
    floats : ndarray of float64, shape (m,)
        Data shared by every trajectory (W, constant or time-dependent head matrices, beta).
    per : ndarray of float64, shape (rows, k)
        Per-trajectory data, one row per trajectory of the flattened batch, or one row shared
        by all (``rows == 1``).
    l, d : int
        Tokens and their dimension.
    work : int
        Length of the float64 scratch vector of one kernel call.
    autonomous : bool
        Whether the field does not depend on t. ``TIME_DERIVATIVE`` is 0 for autonomous fields
        and between the breaks of piecewise-constant weights.
    breaks : ndarray of float64
        Times where the field jumps (the layer boundaries of a
        :class:`~riemattn.dynamics.schedules.PiecewiseConstantHeads`), sorted; empty otherwise.
    """

    ints: np.ndarray
    floats: np.ndarray
    per: np.ndarray
    l: int
    d: int
    work: int
    autonomous: bool
    breaks: np.ndarray


class _Builder:
    """Collects shared and per-trajectory data and their (location, offset) addresses."""

    def __init__(self, batch: tuple):
        self.batch = batch
        self.rows = int(np.prod(batch, dtype=np.int64))
        self.shared: list[np.ndarray] = []
        self.n_shared = 0
        self.per: list[np.ndarray] = []  # each (rows, k)
        self.n_per = 0

    def add_shared(self, values) -> tuple[int, int]:
        arr = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        off = self.n_shared
        self.shared.append(arr)
        self.n_shared += arr.size
        return K.LOC_FLOATS, off

    def add_per(self, values, item_shape: tuple, name: str) -> tuple[int, int]:
        """values of shape lead + item_shape, lead broadcasting against the batch."""
        arr = np.asarray(values, dtype=np.float64)
        lead = arr.shape[: arr.ndim - len(item_shape)]
        try:
            arr = np.broadcast_to(arr, self.batch + item_shape)
        except ValueError:
            raise ValidationError(
                f"{name} of batch shape {lead} does not broadcast against the batch shape "
                f"{self.batch} of the tokens (leading axes of y)."
            ) from None
        arr = arr.reshape((self.rows, math.prod(item_shape)))
        off = self.n_per
        self.per.append(arr)
        self.n_per += arr.shape[1]
        return K.LOC_PER, off

    def arrays(self):
        floats = np.concatenate(self.shared) if self.shared else np.zeros(0)
        if not self.per:
            per = np.zeros((1, 1))
        else:
            per = np.ascontiguousarray(np.concatenate(self.per, axis=1))
        return floats, per


def _unsupported(what: str, extra: str = ""):
    exc = UnsupportedByEngine(
        f"the compiled engine cannot run {what}{extra}; use engine='numpy' (or 'auto', which falls back)."
    )
    exc.reason = what + extra  # what integrate's message lists (it gives the advice once)
    raise exc


def _source(builder: _Builder, heads, name: str, hM: int, d: int, ints, slots):
    """Pack P or U (a HeadMatrices, or None for U = I) into ints[slots] = (kind, loc, off, heads, terms)."""
    kind_s, loc_s, off_s, heads_s, terms_s = slots
    if heads is None:
        ints[kind_s], ints[heads_s] = K.SRC_IDENTITY, 1
        return True
    if heads.param is not None:
        _unsupported(f"a {name} that requires a gradient (a torch parameter)")
    if getattr(heads, "rows", None) is not None:  # a field taken to some trajectories: pack the whole one
        _unsupported(f"a {name} restricted to some trajectories (Field.take); pack the untaken field")
    ints[heads_s] = hM
    if heads.fn is None:
        M = heads.const
        if is_torch(M):
            _unsupported(f"a torch tensor {name}")
        lead = M.shape[:-3]
        if M.shape[-3] == 1 and not lead and np.array_equal(M[0], M[0, 0, 0] * np.eye(d)):
            ints[kind_s] = K.SRC_SCALAR
            ints[loc_s], ints[off_s] = builder.add_shared([M[0, 0, 0]])
        else:
            ints[kind_s] = K.SRC_CONST
            add = builder.add_per(M, M.shape[-3:], name) if lead else builder.add_shared(M)
            ints[loc_s], ints[off_s] = add
        return True
    fn = heads.fn
    if isinstance(fn, TimeVaryingHeads):
        B, A = np.asarray(fn.B, dtype=float), np.asarray(fn.A, dtype=float)
        omega, phi = np.asarray(fn.omega, dtype=float).reshape(-1), np.asarray(fn.phi, dtype=float).reshape(-1)
        n_terms = omega.size
        if B.ndim < 2 or A.ndim < 3 or B.shape[-2:] != (d, d) or A.shape[0] != n_terms or phi.size != n_terms:
            _unsupported(f"a TimeVaryingHeads {name} of shapes B {B.shape}, A {A.shape}")
        if B.ndim == 2:
            B, A = B[None], A[:, None]
        lead = np.broadcast_shapes(B.shape[:-3], A.shape[1:-3])
        term = _separable_rows(A, hM, d) if ROW_SEPARABLE else None
        # compact where it reads fewer numbers: [h d d] + 2 h d + h d d against (1 + K) h d d + 2 K
        if term is not None and hM * d * (2 + d) < n_terms * (hM * d * d + 2):
            ints[kind_s] = K.SRC_ROWSINES
            ints[terms_s], ints[loc_s], ints[off_s] = _pack_rowsines(builder, B, A, omega, phi, term, lead, hM, d,
                                                                     name)
            return False
        ints[kind_s], ints[terms_s] = K.SRC_SINES, n_terms
        if not lead:  # one schedule for every trajectory: B, A, omega, phi
            ints[loc_s], ints[off_s] = builder.add_shared(np.concatenate([B.ravel(), A.ravel(), omega, phi]))
        else:  # one B_b and A_{k,b} per trajectory (batch axes of B and A), then omega, phi
            item = (hM, d, d)
            Bb = np.broadcast_to(B, lead + item)
            Ab = np.moveaxis(np.broadcast_to(A, (n_terms,) + lead + item), 0, len(lead))  # lead + (K,) + item
            rows = np.concatenate([Bb.reshape(lead + (-1,)), Ab.reshape(lead + (-1,)),
                                   np.broadcast_to(np.concatenate([omega, phi]), lead + (2 * n_terms,))], axis=-1)
            ints[loc_s], ints[off_s] = builder.add_per(rows, rows.shape[-1:], name)
        return False
    if isinstance(fn, PiecewiseConstantHeads):
        if fn.stacks.shape[1:] != (hM, d, d):
            _unsupported(f"a PiecewiseConstantHeads {name} of shape {fn.stacks.shape}")
        ints[kind_s], ints[terms_s] = K.SRC_STEPS, fn.times.size
        ints[loc_s], ints[off_s] = builder.add_shared(np.concatenate([fn.times, fn.stacks.ravel()]))
        return False  # depends on t (its time derivative is 0 between the breaks)
    _unsupported(f"a callable {name}(t) of type {type(fn).__name__}",
                 " (only TimeVaryingHeads and PiecewiseConstantHeads run compiled)")


#: pack row-separable TimeVaryingHeads as SRC_ROWSINES (False: always SRC_SINES; the tests compare both)
ROW_SEPARABLE = True


def _separable_rows(A, hM: int, d: int):
    """For a TimeVaryingHeads' A (K, ..., heads, d, d): the term on each row eta d + r (-1: none;
    terms with A_k = 0 left out) when each A_k is nonzero on one row of one head (over every
    trajectory) and no two terms share a row, else None (the dense SRC_SINES)."""
    if A.shape[-3] != hM or A.shape[0] == 0:  # (no term: the dense form reads B only)
        return None
    touched = (A != 0).reshape((A.shape[0], -1, hM * d, d)).any(axis=(1, 3))  # (K, heads d): term k on row rho
    if np.any(touched.sum(axis=1) > 1) or np.any(touched.sum(axis=0) > 1):
        return None
    term = np.full(hM * d, -1)
    for k, rho in zip(*np.nonzero(touched)):
        term[rho] = k
    return term


def _pack_rowsines(builder: _Builder, B, A, omega, phi, term, lead, hM: int, d: int, name: str):
    """SRC_ROWSINES (layout in _kernel_layout): returns (terms, loc, off), terms 1 when B is stored.
    Rows without a term: omega = phi = 0, P' = 0."""
    on = term >= 0
    k = np.where(on, term, 0)
    w = np.where(on, omega[k], 0.0)
    p = np.where(on, phi[k], 0.0)
    A_rows = np.broadcast_to(A, A.shape[:1] + lead + (hM, d, d)).reshape(A.shape[:1] + lead + (hM * d, d))
    rho = np.arange(hM * d)
    Pp = np.where(on.reshape((-1,) + (1,) * (len(lead) + 1)), A_rows[k, ..., rho, :], 0.0)  # (heads d, lead..., d): row rho of its term
    Pp = np.moveaxis(Pp, 0, len(lead)).reshape(lead + (-1,))  # lead + (heads d d,): P', C order
    has_B = bool(np.any(B != 0) or np.any(np.signbit(B)))  # omitted only when every entry is +0.0
    Bb = np.broadcast_to(B, lead + (hM, d, d)).reshape(lead + (hM * d * d,))
    sines = np.concatenate([w, p])
    parts = ([Bb] if has_B else []) + [np.broadcast_to(sines, lead + sines.shape), Pp]
    data = np.concatenate(parts, axis=-1)
    if not lead:  # one schedule for every trajectory
        return int(has_B), *builder.add_shared(data)
    return int(has_B), *builder.add_per(data, data.shape[-1:], name)  # one B_b, P'_b per trajectory


def _breaks(field) -> np.ndarray:
    out = [h.fn.times[1:] for h in (field._P, field._U)
           if h is not None and isinstance(h.fn, PiecewiseConstantHeads)]
    return np.unique(np.concatenate(out)) if out else np.zeros(0)


def _pack_beta(builder: _Builder, beta, ints):
    if is_torch(beta):
        _unsupported("a torch tensor beta")
    if isinstance(beta, float):
        ints[K.BETA_LOC], ints[K.BETA_OFF] = builder.add_shared([beta])
    else:
        ints[K.BETA_LOC], ints[K.BETA_OFF] = builder.add_per(beta, (), "beta")


def _pack_attention(field: AttentionField, batch: tuple, l: int, d: int, ln=None):
    """The attention field, or the layer-norm model ``ln`` (a LayerNormField) around it."""
    check_batch(field, batch)  # per-trajectory P and U: the NumPy field's check and message
    ints = np.zeros(K.N_INTS, dtype=np.int64)
    builder = _Builder(batch)
    ints[K.KIND] = K.KIND_ATTENTION
    ints[K.RESCALED] = 1 if field.rescaled else 0
    manifold = field.manifold
    if isinstance(manifold, Euclidean):
        ints[K.MANIFOLD] = K.MAN_FLAT
    elif isinstance(manifold, Sphere) or manifold.is_identity:
        ints[K.MANIFOLD] = K.MAN_SPHERE
    else:
        ints[K.MANIFOLD] = K.MAN_ELLIPSOID
        if getattr(manifold, "_W_param", None) is not None:
            _unsupported("a W that requires a gradient (a torch parameter)")
        _, ints[K.W_OFF] = builder.add_shared(manifold.W)
    if ints[K.MANIFOLD] != K.MAN_ELLIPSOID:
        ints[K.W_OFF] = -1
    breaks = [_breaks(field)]
    autonomous = True
    if ln is not None:  # the placement; W_OFF stays W of the directions on a flat state
        ints[K.PLACEMENT] = _PLACEMENTS[ln.placement]
        if ln.placement in ("pre", "peri", "mix"):
            ints[K.MANIFOLD] = K.MAN_FLAT
        if ln.placement == "ngpt":
            ints[K.LN_ALPHA_LOC], ints[K.LN_ALPHA_OFF] = builder.add_shared([float(ln.alpha)])
        if ln.placement == "mix":
            _, ints[K.LN_SWITCH_OFF] = builder.add_shared([float(ln.switch)])
            breaks.append(np.array([float(ln.switch)]))
            autonomous = False
    ints[K.L], ints[K.D], ints[K.H] = l, d, field.h
    ints[K.MASK] = {"full": K.MASK_FULL, "causal": K.MASK_CAUSAL}[field.mask]
    ints[K.NORM] = {"paper": K.NORM_PAPER, "softmax": K.NORM_SOFTMAX, "mean": K.NORM_MEAN}[field.normalization]
    _pack_beta(builder, field.beta, ints)
    hP = field._P.shape[-3]
    const_P = _source(builder, field._P, "P", hP, d, ints, (K.P_KIND, K.P_LOC, K.P_OFF, K.P_HEADS, K.P_TERMS))
    hU = 1 if field._U is None else field._U.shape[-3]
    const_U = _source(builder, field._U, "U", hU, d, ints, (K.U_KIND, K.U_LOC, K.U_OFF, K.U_HEADS, K.U_TERMS))
    floats, per = builder.arrays()
    autonomous = autonomous and const_P and const_U
    return KernelPack(ints, floats, per, l, d, K.work_length(ints), autonomous, np.unique(np.concatenate(breaks)))


_PLACEMENTS = {"post": K.PL_POST, "pre": K.PL_PRE, "peri": K.PL_PERI, "ngpt": K.PL_NGPT, "mix": K.PL_MIX}


def _pack_circle(field: CircleField, batch: tuple, l: int, d: int):
    if d != 1:
        raise ValidationError(f"the circle form's tokens are angles of shape (..., n, 1), got d = {d}.")
    if getattr(field, "mask", "full") != "full":
        _unsupported("a causal CircleField (mask='causal')", " (the circle kernel is full attention)")
    if getattr(field, "evaluation", "direct") != "direct":
        _unsupported(f"CircleField(evaluation={field.evaluation!r})", " (the circle kernel runs the direct sums)")
    ints = np.zeros(K.N_INTS, dtype=np.int64)
    builder = _Builder(batch)
    ints[K.KIND], ints[K.MANIFOLD] = K.KIND_CIRCLE, K.MAN_FLAT
    ints[K.L], ints[K.D], ints[K.H], ints[K.W_OFF] = l, 1, 1, -1
    ints[K.MODEL] = {"sa": K.MODEL_SA, "usa": K.MODEL_USA}[field.model]
    ints[K.RESCALED] = 1 if field.rescaled else 0
    beta = field.beta
    _pack_beta(builder, float(beta) if np.ndim(beta) == 0 else np.asarray(beta, dtype=float), ints)
    floats, per = builder.arrays()
    return KernelPack(ints, floats, per, l, 1, K.work_length(ints), True, np.zeros(0))


def pack_field(field, y_shape) -> KernelPack:
    """The field as run-time data for the compiled kernels of :mod:`riemattn.dynamics.kernels`.

    Parameters
    ----------
    field : AttentionField, LayerNormField or CircleField
        An attention field with constant P and U (shared, or one per trajectory), or P / U given
        as :class:`~riemattn.dynamics.schedules.TimeVaryingHeads` or
        :class:`~riemattn.dynamics.schedules.PiecewiseConstantHeads`; a scalar beta or one per
        trajectory; any head layout, mask, normalization (the rescaled "mean" too), sphere or
        ellipsoid. A placement of the layer norm around such a field
        (:func:`~riemattn.dynamics.layernorm.layernorm`; Mix-LN's switch joins ``breaks``). Or
        GLPR's circle form (:class:`~riemattn.dynamics.circle.CircleField`, SA, USA or rescaled
        USA; angles as tokens of shape (n, 1) on the flat line).
    y_shape : tuple of int
        Shape ``batch + (l, d)`` of the tokens the field will be evaluated on; per-trajectory
        data (beta, weights) is broadcast against ``batch`` and stored one row per trajectory of
        the flattened batch (C order).

    Returns
    -------
    KernelPack

    Raises
    ------
    UnsupportedByEngine
        For anything the compiled kernels do not cover, naming it: a Python ``VectorField`` (or
        any other field class, an AttentionField subclass also inside a LayerNormField), a
        callable P(t) or U(t) of another kind, torch tensors or parameters requiring a gradient.
    ValidationError
        When ``y_shape`` does not fit the field or per-trajectory data does not broadcast.
    """
    y_shape = tuple(int(s) for s in y_shape)
    if len(y_shape) < 2 or y_shape[-2] < 1:
        raise ValidationError(f"y_shape must be batch + (l, d) with l >= 1 tokens, got {y_shape}.")
    batch, (l, d) = y_shape[:-2], y_shape[-2:]
    if type(field) is CircleField:
        return _pack_circle(field, batch, l, d)
    ln = None
    if type(field) is LayerNormField:
        ln, field = field, field.field
        if type(field) is not AttentionField:
            _unsupported(f"a LayerNormField around a {type(field).__name__}")
    if type(field) is not AttentionField:  # subclasses may change the formulas
        _unsupported(f"a {type(field).__name__}", " (a Python field: only AttentionField, sa/usa, "
                     "its layer-norm placements (layernorm) and CircleField have compiled kernels)")
    if d != field.d:
        raise ValidationError(f"y_shape {y_shape} does not fit the field's tokens in R^{field.d}.")
    if field.normalization not in ("paper", "softmax", "mean"):
        _unsupported(f"normalization={field.normalization!r}", " (its kernels cover 'paper', 'softmax' and 'mean')")
    for what in ("alibi", "rope"):
        if getattr(field, what) is not None:
            _unsupported(f"positional scores ({what}=...)")
    if field.mask not in ("full", "causal"):  # a part of riemattn.masks: the kernels know these two
        _unsupported(f"mask={field.mask!r}", " (its kernels cover 'full' and 'causal')")
    if getattr(field, "bias", None) is not None:
        _unsupported(f"bias={field.bias!r}", " (a bias part runs on the NumPy engine)")
    if getattr(field, "context", None) is not None:
        _unsupported(f"cross-attention (a context of shape {field.context.shape})")
    if field.flat:
        _unsupported("an attention field on flat space (W='flat')")
    return _pack_attention(field, batch, l, d, ln)
