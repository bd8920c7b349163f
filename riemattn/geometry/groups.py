r"""Group actions for Lie-group steppers: O(W) on spheres and ellipsoids, translations on R^d.

A Lie-group step advances the tokens ``y`` by group elements ``exp(Theta)`` built from the
generators of its stages. A *frame* is the step-local object that carries this out; the manifold
makes it (``manifold.lie_frame(y, slots)``) and the steppers of :mod:`riemattn.solvers.lie` only call its
methods, so they know nothing about the manifold. Points of the step are held as *states* relative
to the step's start ``y``; every frame has

- ``start``: the state of ``y`` itself; ``point(state)``: the ambient point (..., l, d);
- ``generator(state, F)``: the algebra element whose action at the point is the tangent vector F;
- ``combine(coefs, mats, h)``: ``sum_j h c_j X_j``; ``exp(X, state)``: the state of ``exp(X) Y``;
  ``exp_single(g, c, state)``: the same for ``c`` times one stage generator (closed form);
- ``dexpinv(Theta, H, q)``: ``dexp^{-1}_Theta(H)`` truncated after ``ad^q``; ``act_start(X)``:
  ``X y`` in R^d (the leading term of ``exp(X) y - y``, for error estimates).

O(W) (:class:`OWFrame`). For ``y`` on E_W and a tangent F at y, ``A = F y^T W - y F^T W`` lies in
``o(W) = {A : A^T W + W A = 0}`` and ``A y = F``. Every generator of a step maps into the span of
``y`` and the stage values, so one W-orthonormal basis of it per token (at most ``slots`` vectors,
:class:`~riemattn.geometry.lowrank.WOrthoBasis`) carries the whole step: generators become small skew
matrices ``K = phi eta^T - eta phi^T`` (``phi``, ``eta`` the coordinates of F and of the point),
exponentials act exactly on coordinate vectors, and no ``d x d`` matrix is formed.

Translations (:class:`TranslationFrame`, for :class:`~riemattn.geometry.manifolds.Euclidean`): the
algebra is R^d acting by ``exp(X) y = y + X``; commutators vanish, so every Lie-group method
reduces to the classical Runge--Kutta method of its coefficients.

Coefficients ``c`` and step sizes ``h`` may be scalars or arrays of one value per trajectory
(shape ``y.shape[:-2]``).

Backends: tokens may be NumPy arrays or PyTorch tensors (CPU or CUDA); a frame's states, points
and generators are arrays of the kind, device and dtype of the tokens ``y`` it was made for
(``riemattn._backend``, docs/performance.md). Per-trajectory ``h`` should be of that kind too (a NumPy ``h`` with
tensor tokens is converted, a host-to-device copy per call).

References
----------
A. Iserles, H. Munthe-Kaas, S. P. Norsett, A. Zanna, "Lie-group methods", Acta Numerica 9 (2000),
sections 3 and 8. H. Munthe-Kaas, "High order Runge-Kutta methods on manifolds", Appl. Numer.
Math. 29 (1999). Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025,
eq. (3) (the tangent map whose image the generator reproduces).
"""

from __future__ import annotations

import numpy as np

from .._backend import convert, is_torch, namespace
from .lowrank import WOrthoBasis, expm_small_action, rank2_expm_action

__all__ = ["Generator", "OWFrame", "TranslationFrame", "DenseFrame"]

# Bernoulli numbers B_k / k! of dexp^{-1}_Omega(H) = sum_k B_k / k! ad_Omega^k(H) (B_1 = -1/2).
_DEXPINV = (1.0, -0.5, 1.0 / 12.0, 0.0, -1.0 / 720.0, 0.0, 1.0 / 30240.0)


def _col(c, trailing: int, like=None):
    """A scalar, or a per-trajectory array with ``trailing`` singleton axes appended.

    With ``like`` a tensor, an array ``c`` that is not a tensor is converted to its kind
    (a 0-d tensor stays a tensor: no host read-back)."""
    if type(c) is float:
        return c
    if is_torch(c):
        return c.reshape(c.shape + (1,) * trailing) if c.ndim else c
    if np.ndim(c) == 0:
        return c
    c = np.asarray(c)
    if like is not None and is_torch(like):
        c = convert(c, like)
    return c.reshape(c.shape + (1,) * trailing)


class Generator:
    """One stage generator: its algebra element ``K`` and, for O(W), the vectors it is made of."""

    __slots__ = ("K", "phi", "eta")

    def __init__(self, K, phi=None, eta=None):
        self.K, self.phi, self.eta = K, phi, eta


class _Frame:
    """Shared pieces: linear combinations and the dexp^{-1} series (matrix algebras)."""

    #: axes of an algebra element after the batch axes (matrices per token: l, m, m)
    trailing = 3

    def combine(self, coefs, mats, h):
        """``sum_j h c_j X_j`` over the nonzero ``c_j``, or None if all are zero.

        ``coefs`` are host numbers (a tableau row); ``mats`` arrays of the frame's kind."""
        out = None
        hh = _col(h, self.trailing, self.y)
        for c, X in zip(coefs, mats):
            if c != 0.0:
                term = (hh * float(c)) * X
                out = term if out is None else out + term
        return out

    @staticmethod
    def commutator(X, Y):
        return X @ Y - Y @ X

    def dexpinv(self, Theta, H, q: int):
        """``dexp^{-1}_Theta(H) = H - [Theta, H]/2 + [Theta, [Theta, H]]/12 - ...`` up to ``ad^q``."""
        while q > 0 and _DEXPINV[q] == 0.0:
            q -= 1
        out, ad = H, H
        for k in range(1, q + 1):
            ad = self.commutator(Theta, ad)
            if _DEXPINV[k] != 0.0:
                out = out + _DEXPINV[k] * ad
        return out


class OWFrame(_Frame):
    """The action of O(W) on tokens of E_W during one step, in a step-local low-rank basis.

    Parameters
    ----------
    manifold : Sphere or Ellipsoid
    y : ndarray, shape (..., l, d)
        The tokens at the start of the step.
    slots : int
        Basis vectors per token: 1 + the number of stage values the step will add.

    Notes
    -----
    A state is the increment ``delta`` of coordinates (..., l, slots): ``Y = y + Q^T delta``.
    Increments of exponentials are summed without the identity term, so rounding errors are
    relative to the motion in a step, not to |y| (no drift of |y|_W where tokens barely move).
    """

    def __init__(self, manifold, y, slots: int):
        if manifold.is_identity:
            W = None
        else:  # W of the tokens' kind, device and dtype, converted once (the manifold's cache)
            W = manifold.W_like(y)
        self.y = y
        self.basis = WOrthoBasis(y.shape[:-1], slots, y.shape[-1], W, like=y)
        self.eta0 = self.basis.add(y)
        self.start = namespace(y).zeros_like(self.eta0)

    def point(self, state):
        return self.y if state is self.start else self.y + self.basis.to_ambient(state)

    def _eta(self, state):
        return self.eta0 if state is self.start else self.eta0 + state

    def generator(self, state, F):
        phi = self.basis.add(F)
        eta = self._eta(state)
        K = phi[..., :, None] * eta[..., None, :] - eta[..., :, None] * phi[..., None, :]
        return Generator(K, phi, eta)

    def exp(self, X, state):
        return state + expm_small_action(X, self._eta(state), increment=True, skew=True)

    def exp_single(self, g, c, state):
        return state + rank2_expm_action(_col(c, 2, self.y) * g.phi, g.eta, self._eta(state), increment=True)

    def act_start(self, X):
        return self.basis.to_ambient(namespace(X).einsum("...ij,...j->...i", X, self.eta0))


class DenseFrame(_Frame):
    """For fields given by their algebra element (``lie_generator``): dense matrices, ambient points.

    Generators are W-skew matrices of shape (d, d) (one for all tokens) or (..., l, d, d);
    exponentials act by a scaled Taylor series (:func:`~riemattn.geometry.lowrank.expm_small_action`).
    With ``manifold`` an ellipsoid, ``W = L L^T`` (Cholesky), states are ``z = L^T y`` and
    generators ``L^T X L^-T``, skew matrices; on a sphere the generators are skew already. Skew
    generators are exponentiated as rotations for every norm (a step as long as the horizon stays
    on ``E_W``; ``skew=True`` of ``expm_small_action``).
    A NumPy generator used with tensor tokens is converted to their kind; ``cache`` (a dict kept
    by the caller across steps, e.g. on the field) holds the last conversion, so a constant
    generator (the same array every call) is copied to the device once.
    """

    def __init__(self, y, cache=None, manifold=None):
        self.y = self.start = y
        self._cache = cache
        ident = getattr(manifold, "is_identity", None)
        self._skew = ident is not None  # a sphere or an ellipsoid: the generators are (W-)skew
        self._L = None
        if ident is False:  # W = L L^T: states z = L^T y, generators L^T X L^-T (skew)
            xp = namespace(y)
            self._L = xp.linalg.cholesky(manifold.W_like(y))
            self._Linv = xp.linalg.inv(self._L)
            self.start = y @ self._L

    def point(self, state):
        return state if self._L is None else state @ self._Linv

    def generator(self, state, X):
        if is_torch(self.y) and not (is_torch(X) and X.device == self.y.device and X.dtype == self.y.dtype):
            cache = self._cache if self._cache is not None else {}
            key = (str(self.y.device), str(self.y.dtype))
            hit = cache.get(key)
            if hit is None or hit[0] is not X:
                hit = cache[key] = (X, convert(X, self.y))
            X = hit[1]
        if self._L is not None:
            X = self._L.mT @ X @ self._Linv.mT
        return Generator(X)

    def exp(self, X, state):
        return state + expm_small_action(X, state, increment=True, skew=self._skew)

    def exp_single(self, g, c, state):
        return self.exp(_col(c, 3, self.y) * g.K, state)

    def act_start(self, X):
        z = self.start
        out = z @ X.mT if X.ndim == 2 else (X @ z[..., None])[..., 0]
        return out if self._L is None else out @ self._Linv


class TranslationFrame(_Frame):
    """The translation group of R^d: ``exp(X) y = y + X``; states are displacements (..., l, d)."""

    trailing = 2

    def __init__(self, y):
        self.y = y
        self.start = namespace(y).zeros_like(y)

    def point(self, state):
        return self.y if state is self.start else self.y + state

    @staticmethod
    def generator(state, F):
        return Generator(F)

    @staticmethod
    def exp(X, state):
        return state + X

    def exp_single(self, g, c, state):
        return state + _col(c, 2, self.y) * g.K

    @staticmethod
    def dexpinv(Theta, H, q):
        return H  # the algebra is abelian

    @staticmethod
    def act_start(X):
        return X
