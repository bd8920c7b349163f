r"""Where the layer norm goes: Post-LN, Pre-LN, Peri-LN, nGPT and Mix-LN residual-stream dynamics.

A token of the residual stream is ``x = r theta`` with ``r = |x|_W`` its radius and
``theta = N_W(x) = x / |x|_W`` its direction on E_W. Attention always reads normalised tokens:
``A_i = sum_eta sum_j alpha_ij^eta(theta) U_eta theta_j`` (weights and values both from theta),
:meth:`riemattn.dynamics.attention.AttentionField.update` evaluated at theta. The placement of the
layer normalization decides what is integrated. This module is the one place where the five
continuous models and their discrete blocks are written down (``_value`` and ``_block`` below):

=========  =====================================  ==========================================  ========
placement  continuous model                       discrete block (step h)                     state
=========  =====================================  ==========================================  ========
post       theta' = P_theta A                     x <- N(x + h A(x))                          E_W
pre        x' = A(N(x))                           x <- x + h A(N(x))                          R^d
peri       x' = N(A(N(x)))                        x <- x + h N(A(N(x)))                       R^d
ngpt       theta' = alpha P_theta N(A)            x <- N(x + alpha h (N(A(x)) - x))           E_W
mix        t < switch: x' = r P_theta A(theta)    t < switch: x <- r N(theta + h A(theta))    R^d
           t >= switch: x' = A(N(x))              t >= switch: the pre block
=========  =====================================  ==========================================  ========

with ``P_theta v = v - <theta, v>_W theta``, ``N(0) = 0`` (zero value weights give a zero update)
and, for mix, the time ``t`` at the start of the block deciding which block runs. Writing
``x' = v`` as ``r' = <theta, v>_W``, ``theta' = P_theta v / r`` gives every placement as the
sphere dynamics ``theta' = s P_theta A`` with a *speed factor* ``s`` (Karagodin et al., section 2):

=========  ================  =========================
placement  speed factor s    radius
=========  ================  =========================
post       1                 r = 1
pre        1 / r             r' = <theta, A>_W
peri       1 / (r |A|_W)     r' = <theta, A>_W / |A|_W
ngpt       alpha / |A|_W     r = 1
mix        1, then 1 / r     r' = 0, then as pre
=========  ================  =========================

Each block is a first-order discretization of its model (derivations and the equiangular
reduction to a scalar ODE for (rho, r): docs/theory/layernorm.md). The mix block before the
switch is Post-LN's block on the directions with the radius kept: for tokens on E_W (r = 1, what
a Mix-LN transformer's Post-LN layers produce) it is exactly ``N(x + h A(x))``.

References
----------
N. Karagodin, S. Ge, Y. Polyanskiy, P. Rigollet, "Normalization in attention dynamics",
NeurIPS 2025 (arXiv 2510.22026), section 2 (the decomposition x = r theta and the speed factors of
Post-LN, Pre-LN, Mix-LN, Peri-LN and nGPT).
I. Loshchilov et al., "nGPT: normalized transformer with representation learning on the
hypersphere", ICLR 2025, eq. (10)-(11) (the nGPT block h <- Norm(h + alpha (Norm(h_A) - h))).
"""

from __future__ import annotations

import copy

import numpy as np

from .._backend import is_torch, namespace, size
from .._validation import check_nonzero_tokens, check_points, check_real
from ..errors import InputTypeError, ValidationError
from ..geometry.manifolds import Euclidean
from .attention import AttentionField
from .fields import _CheckedField

__all__ = ["PLACEMENTS", "LayerNormField", "layernorm"]

#: The placements of the layer normalization, see the module docstring.
PLACEMENTS = ("post", "pre", "peri", "ngpt", "mix")


def _per_trajectory(a, y):
    """A float, or a per-trajectory array (batch shape) reshaped to broadcast against (..., l, 1)."""
    if np.ndim(a) == 0:
        return a
    xp = namespace(y)
    if not is_torch(a) and xp is not np:
        from .._backend import convert

        a = convert(np.asarray(a, dtype=float), y)
    return xp.broadcast_to(a, tuple(y.shape[:-2]))[..., None, None]


class LayerNormField(_CheckedField):
    r"""The residual-stream dynamics of an attention field under one placement of the layer norm.

    Made by :func:`layernorm`; see the table of :mod:`riemattn.dynamics.layernorm` for the five
    models. The state ``y`` (shape ``(..., l, d)``) is on the attention field's E_W for "post" and
    "ngpt", in R^d (:class:`~riemattn.geometry.manifolds.Euclidean`) for "pre", "peri" and "mix".

    Attributes
    ----------
    field : AttentionField
        The attention field whose update A is evaluated at the directions theta.
    placement : str
        One of :data:`PLACEMENTS`.
    alpha : float or None
        nGPT's step factor (``"ngpt"`` only).
    switch : float or None
        The time Mix-LN switches from Post-LN to Pre-LN (``"mix"`` only).
    manifold : Sphere, Ellipsoid or Euclidean
        Where the state lives.

    Notes
    -----
    ``field(t, y)`` is the continuous model's velocity; ``field.block(t, y, h)`` is the discrete
    block of size h, what the ``"layer"`` stepper runs (:class:`riemattn.solvers.layer.LayerStep`).
    Every other stepper integrates the continuous model (on R^d the projected methods are their
    classical tableaux). ``t`` is a float or one time per trajectory (shape ``y.shape[:-2]``), ``h``
    likewise. Directions and radii of a state: :meth:`directions`, :meth:`radii`
    (:func:`riemattn.analysis.diagnostics.directions`, :func:`~riemattn.analysis.diagnostics.radii`).
    A token at the origin has no direction: public calls raise, an integration reports it as a
    non-finite state.

    References
    ----------
    Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025,
    section 2 (speed factors); Loshchilov et al., "nGPT", ICLR 2025 (the nGPT block).
    """

    def __init__(self, field: AttentionField, placement: str, alpha=None, switch=None):
        if getattr(field, "flat", False):
            raise ValidationError("a layer norm needs an attention field on the sphere or an ellipsoid, "
                                  "not W='flat' (the placement decides the state space).")
        alpha, switch = _check_arguments(field, placement, alpha, switch)
        self.field = field
        self.discontinuous = getattr(field, "discontinuous", False)
        self.placement = placement
        self.alpha = alpha
        self.switch = switch
        self.sphere = field.manifold  # E_W of the directions
        self.manifold = self.sphere if placement in ("post", "ngpt") else Euclidean(field.d)
        self.W = field.W
        self._checked = True

    # -- the one place of the placements' mathematics ---------------------------------------
    def _attend(self, t, theta):
        """A(t, theta) = sum_eta sum_j alpha_ij^eta(theta) U_eta theta_j, shape of theta."""
        return self.field.update(t, theta)

    def _unit(self, v):
        """N_W(v) = v / |v|_W with N(0) = 0 (no division warning, gradients stay finite)."""
        xp = namespace(v)
        nrm = self.sphere.norm(v)[..., None]
        return v / xp.where(nrm > 0, nrm, xp.ones_like(nrm))

    def _value(self, t, y):
        """The continuous model's velocity (see the table in the module docstring)."""
        p = self.placement
        if p == "post":
            return self.field(t, y)
        if p == "ngpt":
            return self.sphere.tangent(y, self.alpha * self._unit(self._attend(t, y)))
        theta, r = self.sphere.normalize(y)
        A = self._attend(t, theta)
        if p == "pre":
            return A
        if p == "peri":
            return self._unit(A)
        # mix: r P_theta A before the switch (Post-LN on the directions, radius kept), A after
        post = r * self.sphere.tangent(theta, A)
        return self._before_switch(t, y, post, A)

    def _block(self, t, y, h):
        """One discrete block of size h (see the table in the module docstring)."""
        p = self.placement
        hc = _per_trajectory(h, y)
        if p == "post":
            return self.sphere.retract(y + hc * self._attend(t, y))
        if p == "ngpt":
            return self.sphere.retract(y + (self.alpha * hc) * (self._unit(self._attend(t, y)) - y))
        theta, r = self.sphere.normalize(y)
        A = self._attend(t, theta)
        if p == "pre":
            return y + hc * A
        if p == "peri":
            return y + hc * self._unit(A)
        post = r * self.sphere.retract(theta + hc * A)
        return self._before_switch(t, y, post, y + hc * A)

    def _before_switch(self, t, y, before, after):
        """Mix-LN: ``before`` for the trajectories with t < switch, ``after`` for the others."""
        if np.ndim(t) == 0 and not is_torch(t):
            return before if float(t) < self.switch else after
        xp = namespace(y)
        early = _per_trajectory(t, y) < self.switch
        return xp.where(early, before, after)

    # -- public interface ----------------------------------------------------------------------
    def _check(self, y, name="y"):
        if not self._checked:
            return y
        y = check_points(y, name, self.manifold, on_manifold=False)
        return check_nonzero_tokens(y, name)

    def __call__(self, t, y):
        """The continuous model's velocity at ``y``, shape (..., l, d) (tangent to the manifold)."""
        y = self._check(y)
        if size(y) == 0:
            return namespace(y).zeros_like(y)
        return self._value(t, y)

    def block(self, t, y, h):
        """The state after one discrete block of size ``h`` from ``(t, y)``, shape (..., l, d).

        ``h`` (and ``t``) a float or one value per trajectory (shape ``y.shape[:-2]``). With
        ``h = 1`` and ``U = W_O V`` this is one attention layer of the transformer with that
        placement of the layer norm (no feed-forward).
        """
        y = self._check(y)
        if size(y) == 0:
            return namespace(y).zeros_like(y)
        return self._block(t, y, h)

    def directions(self, y):
        """theta = N_W(y), shape (..., l, d): the tokens on E_W that attention reads."""
        y = self._check(y)
        return self.sphere.normalize(y)[0] if size(y) else y

    def radii(self, y):
        """r = |y|_W per token, shape (..., l)."""
        y = self._check(y)
        return self.sphere.norm(y)

    @property
    def autonomous(self) -> bool:
        """Whether the model does not depend on t (constant P and U, and not Mix-LN)."""
        from .jacobians import is_autonomous

        return self.placement != "mix" and is_autonomous(self.field)

    def _prepare_twin(self, twin):
        """The twin steps the unchecked twin of the wrapped field (see ``_CheckedField._unchecked``)."""
        twin.field = self.field._unchecked()

    def take(self, index, batch_shape: tuple):
        """This model for the trajectories ``index`` (see :meth:`riemattn.dynamics.fields.Field.take`)."""
        inner = self.field.take(index, batch_shape)
        if inner is None:
            return None
        if inner is self.field:
            return self
        new = copy.copy(self)
        new.__dict__.pop("_twin", None)
        new.field = inner
        return new

    def __repr__(self) -> str:
        extra = f", alpha={self.alpha:g}" if self.placement == "ngpt" else ""
        extra += f", switch={self.switch:g}" if self.placement == "mix" else ""
        return f"LayerNormField({self.placement!r}{extra}, manifold={self.manifold!r}, field={self.field!r})"


def layernorm(field, placement: str, *, alpha=None, switch=None) -> LayerNormField:
    r"""The dynamics of the residual stream with the layer norm placed as ``placement``.

    Parameters
    ----------
    field : AttentionField
        Any attention field (mask, heads, normalization, U, an array beta, sphere or ellipsoid
        E_W); the layer norm is ``N_W(x) = x / |x|_W`` with its W.
    placement : {"post", "pre", "peri", "ngpt", "mix"}
        Where the normalization sits (table in :mod:`riemattn.dynamics.layernorm`):
        Post-LN (the original transformer; ``field`` itself as a model), Pre-LN (GPT-2, LLaMA),
        Peri-LN (normalised input and output of attention, Gemma 3), nGPT (normalised update and
        state), Mix-LN (Post-LN layers, then Pre-LN layers).
    alpha : float > 0, optional
        nGPT's step factor (its "eigen learning rate"); ``"ngpt"`` only, default 1.
    switch : float
        The time (depth) where Mix-LN switches from Post-LN to Pre-LN; required for ``"mix"``
        and only there.

    Returns
    -------
    LayerNormField
        A field on E_W ("post", "ngpt") or R^d ("pre", "peri", "mix"); ``block(t, y, h)`` is the
        discrete block the ``"layer"`` stepper runs.

    Examples
    --------
    >>> import numpy as np, riemattn as ra
    >>> pre = ra.layernorm(ra.sa(1.0, 3), "pre")
    >>> y0 = np.eye(3)[None]                      # (1 configuration, 3 tokens, d = 3)
    >>> sol = ra.integrate(pre, y0, (0.0, 2.0), stepper="rk4", dt=0.1)
    >>> pre.radii(sol.y[-1]).round(3)             # radii grow: r' = <theta, A>
    array([[2.376, 2.376, 2.376]])

    References
    ----------
    Karagodin, Ge, Polyanskiy, Rigollet, "Normalization in attention dynamics", NeurIPS 2025,
    section 2; Loshchilov et al., "nGPT", ICLR 2025.
    """
    return LayerNormField(field, placement, alpha, switch)


def _check_arguments(field, placement, alpha, switch):
    """The checks of :func:`layernorm` (and of ``LayerNormField(...)`` called directly): ``(alpha, switch)``."""
    if not isinstance(field, AttentionField):
        raise InputTypeError(
            f"field must be an AttentionField (its update is the attention A of the model), got "
            f"{type(field).__name__}."
        )
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ValidationError(f"placement must be one of {list(PLACEMENTS)}, got {placement!r}.")
    if placement == "ngpt":
        alpha = 1.0 if alpha is None else check_real(alpha, "alpha")
        if not alpha > 0:
            raise ValidationError(f"alpha must be a finite number > 0, got {alpha!r}.")
    elif alpha is not None:
        raise ValidationError(f"alpha is nGPT's step factor: give it with placement='ngpt' only "
                              f"(placement is {placement!r}).")
    if placement == "mix":
        if switch is None:
            raise ValidationError("placement='mix' needs switch, the time where Post-LN layers end "
                                  "and Pre-LN layers begin.")
        switch = check_real(switch, "switch")
    elif switch is not None:
        raise ValidationError(f"switch is Mix-LN's switching time: give it with placement='mix' only "
                              f"(placement is {placement!r}).")
    return alpha, switch
