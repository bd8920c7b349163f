"""The discrete attention model: one transformer layer is one ``"layer"`` step.

Per layer and head eta (ICML eq. 1 and 4, ARXIV eq. 5-6), with Z_i^eta = sqrt(d) sum_j exp(...)::

    y_i(k+1) = pi_W( y_i(k) + sum_eta sum_j W_eta V_eta y_j exp(y_i^T Q_eta^T K_eta y_j) / Z_i^eta )

(self-attention, skip connection and layer normalization pi_W(x) = x / |x|_W; no feed-forward).
With ``P = Q^T K`` and ``U = W V / tau`` this is ``pi_W(y + tau f(y))`` where f is
:meth:`riemattn.dynamics.attention.AttentionField.update`, the un-normalised attention update: one
projected Euler step of size tau on f. That step is the stepper ``"layer"`` (:class:`LayerStep`),
and :class:`TransformerLayer` is implemented with it.

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (1), (4) and
section 2 (the layer as a discretization of eq. 6).
"""

from __future__ import annotations

import numpy as np

from .._backend import convert, is_torch, namespace, requires_grad, size, to_numpy
from .._validation import as_float_array, check_finite, check_points
from ..dynamics.attention import AttentionField
from ..errors import InputTypeError, ValidationError
from .explicit.steppers import ProjectedEuler, StepResult, _check_field, register

__all__ = ["LayerStep", "TransformerLayer"]


@register
class LayerStep(ProjectedEuler):
    """The transformer layer: ``y_1 = pi_W(y + h f(t, y))`` with f the field's un-normalised update.

    For an :class:`~riemattn.dynamics.attention.AttentionField` and ``h = tau`` this is one layer of
    attention + skip connection + layer normalization, exactly: the papers' "Euler step, then
    renormalise" (GLPR's phase diagrams, the dynamic-metastability code), equal to the loop
    ``x = pi_W(x + h * field.update(t, x))`` written by hand (tested, to rounding). It is *not*
    ``"euler"`` (``pi_W(y + h F)``, F the tangent part of f): ``y + h f`` is
    ``(1 + h <y, f>_W) y + h F``, so the layer is an Euler step of size ``h / (1 + h <y, f>_W)``.
    The two agree to first order in h and differ by O(h) at a fixed time (measured: USA at
    beta = 1, T = 2, the difference halves with h, 0.035 at h = 0.1), much more where
    ``h <y, f>_W`` is large (USA at large beta).
    Needs a field with an ``update(t, y)`` method, or a ``block(t, y, h)`` method: a field that
    defines its own discrete block (:class:`riemattn.dynamics.layernorm.LayerNormField`, the
    placements of the layer norm) is advanced by ``field.block(t, y, h)``, one evaluation.
    """

    name = "layer"

    def step(self, field, t, y, h, k1=None):
        """One layer; a field with a ``block(t, y, h)`` method (its own discrete block, e.g. the
        placements of :func:`riemattn.layernorm`) runs that block instead."""
        if getattr(field, "block", None) is None:
            return super().step(field, t, y, h, k1)
        return StepResult(_check_field(field).block(t, y, h), None, 1)

    def check_field(self, field) -> None:
        if getattr(field, "block", None) is None and getattr(field, "update", None) is None:
            raise InputTypeError(
                f"stepper 'layer' needs a field with an un-normalised update(t, y) (e.g. an "
                f"AttentionField), got {type(field).__name__}; use 'euler' for other fields."
            )

    def _evaluate(self, field, t, y):
        self.check_field(field)
        return field.update(t, y)


def _as_head_stack(value, name: str, rows: str, cols: str) -> np.ndarray:
    """(h, rows, cols) or (..., h, rows, cols) checked; a tensor that requires a gradient stays
    that tensor (viewed as (h, ., .))."""
    arr = check_finite(as_float_array(value, name), name)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim < 3:
        raise ValidationError(
            f"{name} must have shape ({rows}, {cols}), (h, {rows}, {cols}) or, one stack per trajectory, "
            f"(..., h, {rows}, {cols}); got {arr.shape}."
        )
    if requires_grad(value):
        return value
    return arr


def _heads(M):
    return M[None] if M.ndim == 2 else M


class TransformerLayer:
    """One transformer layer without feed-forward: attention, skip connection, layer norm pi_W.

    ``layer(y)_i = pi_W( y_i + sum_eta sum_j W_eta V_eta y_j exp(y_i^T Q_eta^T K_eta y_j) / Z_i^eta )``
    with ``Z_i^eta = sqrt(d) sum_j exp(...)`` (ICML eq. 1 and 4).

    Parameters
    ----------
    Q, K, V : array_like, shape (w, d), (h, w, d) or (..., h, w, d)
        Query, key and value matrices per head. Leading axes are batch axes (one layer per
        trajectory, as P and U of :class:`~riemattn.dynamics.attention.AttentionField`): they
        broadcast against each other and, right-aligned, against the tokens' batch shape.
    Wo : array_like, shape (d, w), (h, d, w) or (..., h, d, w)
        Output matrices per head.
    W : array_like, shape (d, d), optional
        SPD matrix of the layer normalization (None: the sphere).
    mask : {"full", "causal"}

    Notes
    -----
    Q, K, V and Wo may be PyTorch tensors that require a gradient: the layer then computes
    ``P = Q^T K`` and ``U = Wo V`` from them at every call on tensor tokens, so gradients with
    respect to them flow (docs/autodiff.md); ``P`` and ``U`` attributes hold their values.

    The layer *is* one ``"layer"`` step (projected Euler on the un-normalised update) of size tau
    of the continuous field with ``P = Q^T K`` and ``U = Wo V / tau`` (ICML section 2): that is
    how ``__call__`` is implemented, with ``tau = 1``; :meth:`continuous_field` gives the field
    for other tau.

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (1), (4).
    """

    def __init__(self, Q, K, V, Wo, W=None, *, mask="full"):
        Q = _as_head_stack(Q, "Q", "w", "d")
        K = _as_head_stack(K, "K", "w", "d")
        V = _as_head_stack(V, "V", "w", "d")
        Wo = _as_head_stack(Wo, "Wo", "d", "w")
        h, w, d = _heads(Q).shape[-3:]
        for name, M, shape in (("K", K, (h, w, d)), ("V", V, (h, w, d)), ("Wo", Wo, (h, d, w))):
            if tuple(_heads(M).shape[-3:]) != shape:
                raise ValidationError(
                    f"{name} must have shape {shape} (after its batch axes) to match Q "
                    f"{tuple(_heads(Q).shape)}, got {tuple(_heads(M).shape)}.")
        try:
            np.broadcast_shapes(*(tuple(_heads(M).shape[:-3]) for M in (Q, K, V, Wo)))
        except ValueError:
            raise ValidationError(
                "the batch axes of Q, K, V and Wo (before (h, ., .)) must broadcast against each other; got "
                f"shapes {[tuple(_heads(M).shape) for M in (Q, K, V, Wo)]}."
            ) from None
        self.Q, self.K, self.V, self.Wo = Q, K, V, Wo
        self._differentiable = any(requires_grad(M) for M in (Q, K, V, Wo))
        Qn, Kn, Vn, Won = (_as_head_stack(to_numpy(M) if is_torch(M) else M, "", "", "") for M in (Q, K, V, Wo))
        self.P = np.swapaxes(Qn, -1, -2) @ Kn  # (..., h, d, d)
        self.U = Won @ Vn  # (..., h, d, d)
        self.field = self.continuous_field(1.0, W=W, mask=mask)
        self.manifold = self.field.manifold

    def continuous_field(self, tau: float = 1.0, *, W=None, mask=None) -> AttentionField:
        """The field with P = Q^T K and U = Wo V / tau whose projected Euler step of size tau is this layer."""
        if W is None and hasattr(self, "field"):
            W = self.field.W
        mask = mask if mask is not None else self.field.mask
        if self._differentiable:  # P and U recomputed from the parameters at every evaluation
            Q, K, V, Wo = self.Q, self.K, self.V, self.Wo
            like = next(M for M in (Q, K, V, Wo) if requires_grad(M))

            def P(t):
                return _heads(_tensor(Q, like)).mT @ _heads(_tensor(K, like))

            def U(t):
                return _heads(_tensor(Wo, like)) @ _heads(_tensor(V, like)) / tau
            return AttentionField(P, U, W=W, mask=mask, normalization="paper")
        return AttentionField(self.P, self.U / tau, W=W, mask=mask, normalization="paper")

    def __call__(self, y) -> np.ndarray:
        """The next layer's tokens, shape (..., l, d).

        ``y`` must be real finite tokens on the layer's manifold (|y^T W y - 1| <= 1e-8, the
        output of a layer normalization); an empty batch gives an empty result.
        """
        y = check_points(y, "y", self.manifold)
        if size(y) == 0:
            return namespace(y).zeros_like(y)
        return _LAYER.step(self.field, 0.0, y, 1.0).y


def _tensor(M, like):
    """A parameter of a differentiable layer as a tensor (NumPy ones converted to ``like``'s device, dtype)."""
    return M if is_torch(M) else convert(M, like)


_LAYER = LayerStep()
