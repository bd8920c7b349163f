"""The primitives shared by :class:`~riemattn.geometry.manifolds.Sphere` and
:class:`~riemattn.geometry.ellipsoid.Ellipsoid`: the W-inner product, the checked public
projections and retractions, and the fast unchecked primitives the steppers call.

Two kinds of methods live here:

- **checked public methods**, geomstats' and pymanopt's names and argument orders:
  ``projection(point)``, ``belongs(point)``, ``to_tangent(vector, base_point)``,
  ``retraction(point, tangent_vec)``, ``vector_transport(point, tangent_vec, vector)``;
- **fast unchecked primitives** (no validation, any leading axes, NumPy or torch), documented as
  such because the steppers call them in their inner loops: ``inner``, ``norm``, ``apply_W``,
  ``tangent(y, v)`` (the tangent projection, *point first* -- pymanopt's order, the opposite of
  ``to_tangent``), ``normalize``, ``retract``, ``deviation``, ``lie_frame``. Use the checked
  methods unless you call them millions of times on points you know are valid.
"""

from __future__ import annotations

import numpy as np

from .._backend import constant, convert, dot_last, is_torch, namespace, size
from .._validation import (ON_MANIFOLD_ATOL, _describe, as_float_array, check_nonnegative, check_nonzero_tokens,
                           check_points, check_size)
from ..errors import InputTypeError, ValidationError

#: Default absolute tolerance of ``belongs`` / ``is_tangent`` (geomstats uses 1e-12).
ATOL = 1e-10

#: Tolerance on |x^T W x - 1| beyond which the checked methods reject a base point
#: (ValidationError naming the argument) for float64; lower precisions follow
#: ``riemattn._validation.manifold_atol``.
BASE_POINT_ATOL = ON_MANIFOLD_ATOL


def same_kind(*arrays):
    """``arrays`` converted to the kind (torch/NumPy), device and dtype of the first tensor among them."""
    like = next((a for a in arrays if is_torch(a)), None)
    if like is None:
        return arrays
    return tuple(a if is_torch(a) else convert(a, like) for a in arrays)


def check_broadcast(arrays, names):
    """Raise :class:`~riemattn.errors.ValidationError` naming the arguments unless the batch shapes of
    ``arrays`` (shape (..., d) each) broadcast together; returns the broadcast shape."""
    shapes = [tuple(a.shape) for a in arrays]
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        listed = ", ".join(f"{n} of shape {sh}" for n, sh in zip(names, shapes))
        raise ValidationError(
            f"{listed} do not broadcast together: their leading (batch) axes must be equal or 1."
        ) from None


#: What NumPy and torch raise on arguments a fast primitive cannot take (a string, wrong ranks,
#: NumPy mixed with a tensor): caught only after the failure, so the primitives cost nothing more.
RAW = (TypeError, ValueError, AttributeError, RuntimeError, IndexError)


def unfit(where: str, d, exc, **args) -> InputTypeError:
    """The InputTypeError of a fast primitive ``where`` whose NumPy/torch call raised ``exc`` on ``args``."""
    got = "; ".join(f"{name} = {_describe(value)}" for name, value in args.items())
    return InputTypeError(
        f"{where} (an unchecked fast primitive) takes real arrays of shape (..., {'d' if d is None else d}), "
        f"all NumPy or all tensors, whose leading axes broadcast; got {got} ({type(exc).__name__}: {exc}).")


def check_frame_args(space, y, slots):
    """O(1) checks of a Lie frame's arguments (see ``lie_frame``): InputTypeError / ValidationError naming them."""
    check_size(slots, "slots", 1, 64)
    if not (isinstance(y, np.ndarray) or is_torch(y)) or y.ndim < 2 or y.shape[-1] != space.ambient_dim:
        raise InputTypeError(f"y must be an array or tensor of tokens (..., l, {space.ambient_dim}), got "
                             f"{_describe(y)}.")


def check_chart_dim(space, dim: int, method: str):
    """Raise NotImplementedError unless ``space.dim == dim`` (the sphere's charts: the angle of the
    circle, the spherical coordinates of the 2-sphere), as geomstats does for its other charts."""
    if space.dim != dim:
        raise NotImplementedError(f"{method} is only defined in dimension {dim}, got a manifold of dimension {space.dim}.")


class _FastMixin:
    """Primitives shared by Sphere and Ellipsoid (W-inner product, W-norm, projections)."""

    W: np.ndarray

    @property
    def ambient_dim(self) -> int:
        """d = n + 1, the dimension of the space the tokens live in."""
        return self.dim + 1

    # --- fast unchecked primitives (the steppers' inner loops) --------------------------------
    def inner(self, x, y):
        """W-inner product x^T W y over the last axis; shape (...). Unchecked fast primitive."""
        try:
            return dot_last(x, self.apply_W(y))
        except RAW as exc:  # after the failure only: InputTypeError naming x and y
            raise unfit(f"{type(self).__name__}.inner", self.ambient_dim, exc, x=x, y=y) from exc

    def norm(self, x):
        """|x|_W = sqrt(x^T W x) over the last axis; shape (...). Unchecked fast primitive."""
        try:
            return namespace(x).sqrt(self.inner(x, x))
        except RAW as exc:
            raise unfit(f"{type(self).__name__}.norm", self.ambient_dim, exc, x=x) from exc

    @property
    def is_identity(self) -> bool:
        """Whether W is the identity (the unit sphere)."""
        return False

    def tangent(self, y, v):
        """(I - y y^T W) v, shape (..., d). Unchecked fast primitive, point first (pymanopt's order);
        the checked method with geomstats' order is :meth:`to_tangent`."""
        try:
            return v - self.inner(y, v)[..., None] * y
        except RAW as exc:
            raise unfit(f"{type(self).__name__}.tangent", self.ambient_dim, exc, y=y, v=v) from exc

    def normalize(self, x):
        """(pi_W(x), |x|_W[..., None]): the retraction of x and the norm it divided by.
        Unchecked fast primitive (checked: :meth:`projection`)."""
        try:
            r = self.norm(x)[..., None]
            return x / r, r
        except RAW as exc:
            raise unfit(f"{type(self).__name__}.normalize", self.ambient_dim, exc, x=x) from exc

    def retract(self, x):
        """pi_W(x) = x / |x|_W, the layer normalization. Unchecked fast primitive
        (checked: :meth:`projection`, or :meth:`retraction` for a point and a tangent vector)."""
        try:
            return self.normalize(x)[0]
        except RAW as exc:
            raise unfit(f"{type(self).__name__}.retract", self.ambient_dim, exc, x=x) from exc

    def deviation(self, x) -> float:
        """max |x^T W x - 1| over all points of x (how far x is from the manifold)."""
        try:
            if not size(x):
                return 0.0
            xp = namespace(x)
            dev = xp.max(xp.abs(self.inner(x, x) - 1.0))
        except RAW as exc:
            raise unfit(f"{type(self).__name__}.deviation", self.ambient_dim, exc, x=x) from exc
        return float(dev.detach() if is_torch(dev) else dev)  # a number for checks: no gradient

    def W_like(self, x):
        """W as an array of the kind, device and dtype of ``x``, shape (d, d) (cached per device)."""
        try:
            return constant(self.__dict__.setdefault("_consts", {}), "W", self.W, x)
        except RAW as exc:
            raise unfit(f"{type(self).__name__}.W_like", self.ambient_dim, exc, x=x) from exc

    def is_tangent(self, vector, base_point, atol=ATOL):
        """Whether |y^T W v| <= atol, shape (...) (tensors are read as NumPy values; False where v or y
        holds NaN/inf: a predicate).

        ``vector`` and ``base_point`` must have d components and broadcast together
        (ValidationError naming them otherwise)."""
        vector = as_float_array(check_points(vector, "vector", self, on_manifold=False, min_axes=1, finite=False),
                                "vector")
        base_point = as_float_array(
            check_points(base_point, "base_point", self, on_manifold=False, min_axes=1, finite=False), "base_point")
        check_broadcast((vector, base_point), ("vector", "base_point"))
        return np.abs(self.inner(base_point, vector)) <= check_nonnegative(atol, "atol")

    def lie_frame(self, y, slots: int):
        """The O(W) action on the tokens ``y`` for one Lie-group step with up to ``slots - 1`` generators.

        Once per step: ``slots`` is checked (an int in [1, 64]), ``y`` only for its kind and last axis
        (values unchecked, as the fast primitives: NaN tokens give NaN, which integrate reports)."""
        from .groups import OWFrame

        check_frame_args(self, y, slots)
        return OWFrame(self, y, slots)

    # --- argument checks ----------------------------------------------------------------------
    def check_point(self, point, name: str = "base_point"):
        """``point`` as an array of shape (..., d) on the manifold (|x^T W x - 1| <= 1e-8 for float64,
        the precision rule of ``riemattn._validation.manifold_atol`` for the dtype it is given in), else :class:`~riemattn.errors.ValidationError` naming
        ``name``. NumPy input becomes float64; a torch tensor stays a tensor."""
        return check_points(point, name, self, on_manifold=True, min_axes=1, atol=BASE_POINT_ATOL)

    def check_vector(self, vector, name: str = "tangent_vec"):
        """``vector`` as a finite real array of shape (..., d) (not required to be tangent)."""
        return check_points(vector, name, self, on_manifold=False, min_axes=1)

    # --- checked public methods (geomstats' and pymanopt's names and argument order) ----------
    def projection(self, point):
        """Layer normalization pi_W(x) = x / |x|_W, shape (..., d).

        Checked: real finite points with d components, none of them zero (ValidationError).
        """
        point = check_nonzero_tokens(check_points(point, "point", self, on_manifold=False, min_axes=1), "point")
        return point / self.norm(point)[..., None]

    def belongs(self, point, atol=ATOL):
        """Whether |x^T W x - 1| <= atol, shape (...); False for points with the wrong d and for
        NaN/inf points (a predicate: they do not belong)."""
        atol = check_nonnegative(atol, "atol")
        point = as_float_array(point, "point")
        if point.shape[-1:] != (self.dim + 1,):
            return np.zeros(point.shape[:-1], dtype=bool)
        return np.abs(self.inner(point, point) - 1.0) <= atol

    def to_tangent(self, vector, base_point):
        """(I - y y^T W) v: the tangent part of ``vector`` at ``base_point`` on the manifold, shape (..., d).

        Checked: real arrays with d components that broadcast together. Not checked, on purpose:
        that ``base_point`` lies on the manifold (user fields call this at the steppers' stage
        points, which are near it) and finiteness (NaN/inf propagate so that ``integrate``
        reports them per trajectory).
        """
        base_point = check_points(base_point, "base_point", self, on_manifold=False, min_axes=1, finite=False)
        vector = check_points(vector, "vector", self, on_manifold=False, min_axes=1, finite=False)
        vector, base_point = same_kind(vector, base_point)
        try:
            np.broadcast_shapes(tuple(vector.shape), tuple(base_point.shape))
        except ValueError:
            raise ValidationError(
                f"vector of shape {tuple(vector.shape)} does not broadcast against base_point of shape "
                f"{tuple(base_point.shape)}."
            ) from None
        return vector - self.inner(base_point, vector)[..., None] * base_point

    def retraction(self, point, tangent_vec, method: str = "projection"):
        """A retraction R_x(v): a point of the manifold near x + v, shape (..., d) (pymanopt's order).

        Parameters
        ----------
        point : array_like, shape (..., d)
            Base point x on the manifold (checked, |x^T W x - 1| <= 1e-8).
        tangent_vec : array_like, shape (..., d)
            Tangent vector v at x (its normal part is removed first).
        method : {"projection", "exp"}
            ``"projection"``: pi_W(x + v) = (x + v) / |x + v|_W, the layer normalization; it is the
            metric projection of the W-metric and a *second-order* retraction (it agrees with the
            exponential up to O(|v|^3)). ``"exp"``: the Riemannian exponential of the W-metric
            (exact geodesics).

        References
        ----------
        Absil, Mahony, Sepulchre, *Optimization Algorithms on Matrix Manifolds*, Princeton 2008,
        section 4.1 (retractions) and eq. (4.10)-(4.11) (the sphere's projective retraction);
        Absil, Malick, "Projection-like retractions on matrix manifolds", SIAM J. Optim. 2012.
        """
        if method == "exp":
            return self.metric.exp(tangent_vec, point)
        if method != "projection":
            raise ValidationError(f"method must be 'projection' or 'exp', got {method!r}.")
        x = self.check_point(point, "point")
        v = self.check_vector(tangent_vec, "tangent_vec")
        x, v = same_kind(x, v)
        check_broadcast((x, v), ("point", "tangent_vec"))
        return self.retract(x + self.tangent(x, v))

    def vector_transport(self, point, tangent_vec, vector, method: str = "projection"):
        """Transport ``vector`` (tangent at x) to the tangent space at R_x(``tangent_vec``) by
        projection: (I - z z^T W) u with z = retraction(x, v), shape (..., d) (pymanopt's order).

        The projection vector transport is the one pymanopt's Sphere uses; it is not an isometry
        (use ``metric.parallel_transport`` for that).

        References
        ----------
        Absil, Mahony, Sepulchre, *Optimization Algorithms on Matrix Manifolds*, Princeton 2008,
        section 8.1.3 (vector transport on submanifolds by projection).
        """
        z = self.retraction(point, tangent_vec, method)
        u = self.check_vector(vector, "vector")
        z, u = same_kind(z, u)
        check_broadcast((z, u), ("the retracted point (of point and tangent_vec)", "vector"))
        return self.tangent(z, u)
