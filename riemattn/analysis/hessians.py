"""Riemannian Hessians of the interaction energies, in closed form: operator, matrix, spectrum.

The energies are the exponential interaction kernels of GLPR and ARXIV, on (E_W)^n (W = I: the
sphere), written with K_ij = exp(beta x_i^T P x_j)::

    E_beta(x) = 1/(2 beta n^2) sum_{i,j} K_ij        (GLPR eq. 3.5; P = I)      energy_hessian
    V_P(x)    = -1/2 sum_{i,j} K_ij                   (ARXIV eq. 10; beta = 1, W = P) potential_hessian

with Euclidean gradient and Hessian-vector product (s = 1/n^2 for E_beta, s = -1 for V_P)::

    df/dx_i        = s sum_j K_ij P x_j
    D(df/dx_i)[V]  = s sum_j K_ij [ beta (V_i^T P x_j + x_i^T P V_j) P x_j + P V_j ].

The metric is <X, Y>_x = sum_i c_i(x) X_i^T W Y_i: c_i = 1 ("standard"), 1/n ("usa": USA = its
gradient, GLPR eq. 3.11), Z_i/n^2 ("sa", GLPR eq. 3.12) or the ARXIV normalizers Z_i (eq. 9),
Z_i = sum_j K_ij. For the induced metric h (c_i = 1) of the embedded product of ellipsoids the
Hessian is the projected derivative of the gradient plus the Weingarten term::

    Hess_h f[X]_i = (I - x_i x_i^T W) W^{-1} D(df/dx_i)[X] - (x_i^T df/dx_i) X_i.

For position-dependent weights the Levi-Civita connection of g = sum_i c_i h_i adds (Koszul formula,
u = grad_g f, a_i = <X_i, u_i>_W)::

    Hess_g f[X]_i = (1/c_i) ( Hess_h f[X]_i - 1/2 [ dc_i[X] u_i + (grad_h sum_k a_k c_k)_i - dc_i[u] X_i ] ).

At a critical point the bilinear form g(Hess_g f[X], Y) is the same for every metric, so the index
(numbers of positive and negative eigenvalues) does not depend on the normalization; the eigenvalues
do (they are those of the bilinear form relative to g). The symmetry group {G : G^T W G = W,
G^T P G = P} (O(d) on the sphere) maps critical points to critical points: its orbit's tangent
vectors (A x_i)_i are zero modes of the Hessian at a critical point, and :func:`spectrum` removes
them before counting. Everything is NumPy, batched over leading axes; the autodiff references used
by the tests live in the tests. Theory: docs/theory/critical_points.md.

References
----------
GLPR (Geshkovski, Letrouit, Polyanskiy, Rigollet), eq. (3.5), (3.11), (3.12), Problem 3;
ARXIV (Rodriguez Abella, Silvestre, Tabuada), eq. (9)-(10); P.-A. Absil, R. Mahony, J. Trumbull,
"An extrinsic look at the Riemannian Hessian", GSI 2013 (the Weingarten term).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import (
    as_float_array,
    check_beta,
    check_choice,
    check_finite,
    check_nonnegative,
    check_points,
    check_rescaled,
    check_spd,
    check_square_matrix,
    check_token_array,
)
from ..errors import InputTypeError, ValidationError
from ._energy import kernel_exponent
from ..dynamics._softmax import RESCALED_ROUNDING
from ..geometry.manifolds import Ellipsoid, Sphere

__all__ = [
    "ENERGY_MODELS",
    "InteractionHessian",
    "Spectrum",
    "energy_hessian",
    "potential_hessian",
    "spectrum",
    "symmetry_algebra",
]

#: Metrics of :func:`energy_hessian`: c_i = 1, 1/n (USA), Z_i/n^2 (SA).
ENERGY_MODELS = ("standard", "usa", "sa")


class InteractionHessian:
    """Gradient and Hessian of sum_{i,j} s/(2 beta) exp(beta x_i^T P x_j) on (E_W)^n, weighted metric.

    Built by :func:`energy_hessian` or :func:`potential_hessian`; ``x`` has shape (..., n, d).

    Attributes
    ----------
    x : ndarray, shape (..., n, d)
    weights : ndarray, shape (..., n)
        The metric weights c_i(x).
    grad : ndarray, shape (..., n, d)
        The Riemannian gradient for the metric sum_i c_i <., .>_W.
    """

    def __init__(self, x, *, beta, P, W, s, weight_mode, gamma, rescaled=False):
        self.x, self.beta, self.P, self.W, self.s = x, float(beta), P, W, float(s)
        self.weight_mode, self.gamma = weight_mode, float(gamma)
        self._Winv = np.linalg.inv(W)
        self._xP = x @ P
        with np.errstate(over="ignore"):  # rescaled: exp(beta (x_i^T P x_j - 1)), see _energy
            self._K = np.exp(kernel_exponent(self._xP @ np.swapaxes(x, -1, -2), self.beta, rescaled, np))
        # P = W: tangent V has V_i^T P x_i = 0, and _sym uses the difference form (below);
        # rescaled: pairs whose exponent the rounding rule set to 0 are coincident to rounding
        self._tangent = bool(np.array_equal(P, W))
        self._rounded = None
        if rescaled:
            self._rounded = np.abs(self._xP @ np.swapaxes(x, -1, -2) - 1.0) <= RESCALED_ROUNDING
        if not np.all(np.isfinite(self._K)):
            raise ValidationError(
                f"exp(beta x_i^T P x_j) overflows at beta = {beta} for these tokens"
                + ("." if rescaled else "; use rescaled=True (e^-beta times the energy).")
            )
        self.egrad = self.s * (self._K @ self._xP)
        self._xg = np.sum(x * self.egrad, axis=-1)  # x_i^T df/dx_i
        if weight_mode == "kernel":
            self.weights = self.gamma * np.sum(self._K, axis=-1)
        else:
            self.weights = np.full(x.shape[:-1], self.gamma)
        self._gh = self._project(self.egrad @ self._Winv)
        self.grad = self._gh / self.weights[..., None]

    # --- pieces ----------------------------------------------------------------------------------
    def _project(self, v):
        """(I - x_i x_i^T W) v_i."""
        return v - np.sum((self.x @ self.W) * v, axis=-1, keepdims=True) * self.x

    def _sym(self, V):
        """K_ij (V_i^T P x_j + x_i^T P V_j).

        For P = W (tangent V: V_i^T P x_i = 0) in the difference form V_i^T P (x_j - x_i) =
        T_ij - T_ii, exactly 0 for coincident tokens: beta times the rounding of V_i^T P x_i would
        otherwise reach the Hessian (1e268 at beta = 1e300). With ``rescaled``, pairs whose exponent
        the rounding rule set to 0 count as coincident (their term beta K_ij O(|x_j - x_i|^2) is
        below beta * 128 eps |V|).
        """
        T = np.einsum("...ia,...ja->...ij", V @ self.P, np.broadcast_to(self.x, V.shape))  # T_ij = V_i^T P x_j
        if self._tangent:
            T = T - np.diagonal(T, axis1=-2, axis2=-1)[..., :, None]
        S = T + np.swapaxes(T, -1, -2)
        if self._rounded is not None:
            S = np.where(self._rounded, 0.0, S)
        return self._K * S

    def euclidean_hvp(self, V):
        """D(df/dx)[V], the Euclidean Hessian of f applied to V, shape (..., n, d)."""
        V = self._vectors(V, "V")
        return self.s * (self.beta * (self._sym(V) @ self._xP) + self._K @ (V @ self.P))

    def _dweights(self, V):
        if self.weight_mode != "kernel":
            return np.zeros(np.broadcast_shapes(V.shape[:-1], self.weights.shape))
        return self.gamma * self.beta * np.sum(self._sym(V), axis=-1)

    def _dweights_T(self, a):
        """Euclidean gradient of sum_k a_k c_k(x), shape (..., n, d)."""
        Kx = self._K @ self._xP
        return self.gamma * self.beta * (a[..., None] * Kx + self._K @ (a[..., None] * self._xP))

    # --- public ----------------------------------------------------------------------------------
    def hvp_induced(self, V):
        """The Hessian for the induced metric h (c_i = 1): projected derivative plus Weingarten term."""
        V = self._vectors(V, "V")
        return self._project(self.euclidean_hvp(V) @ self._Winv) - self._xg[..., None] * V

    def __call__(self, V):
        """Hess f[V] for the weighted metric, V tangent of shape (..., n, d) (extra leading axes allowed)."""
        V = self._vectors(V, "V")
        H = self.hvp_induced(V)
        if self.weight_mode == "kernel":
            u = self.grad
            a = np.sum((V @ self.W) * u, axis=-1)
            corr = (
                self._dweights(V)[..., None] * u
                + self._project(self._dweights_T(a) @ self._Winv)
                - self._dweights(u)[..., None] * V
            )
            H = H - 0.5 * corr
        return H / self.weights[..., None]

    def inner(self, X, Y):
        """The metric sum_i c_i X_i^T W Y_i, shape (...)."""
        X, Y = self._vectors(X, "X"), self._vectors(Y, "Y")
        try:
            np.broadcast_shapes(X.shape, Y.shape, self.x.shape)
        except ValueError:
            raise ValidationError(f"X and Y must broadcast with x {self.x.shape}, got {X.shape} and {Y.shape}.") from None
        return np.sum(self.weights * np.sum((X @ self.W) * Y, axis=-1), axis=-1)

    def _vectors(self, V, name):
        """``V`` as finite float vectors at the tokens, shape (..., n, d) (else a riemattn error naming ``name``)."""
        V = check_finite(as_float_array(V, name), name)
        if V.shape[-2:] != self.x.shape[-2:]:
            raise ValidationError(f"{name} must have shape (..., {self.x.shape[-2]}, {self.x.shape[-1]}) as the "
                                  f"tokens x, got {V.shape}.")
        return V

    def basis(self):
        """An orthonormal basis of the tangent space for the metric, shape (..., n (d-1), n, d).

        Token i's block is c_i^{-1/2} W^{-1/2} e for e running over an orthonormal basis of the
        complement of W^{1/2} x_i.
        """
        x = self.x
        n, d = x.shape[-2:]
        w, Q = np.linalg.eigh(self.W)
        sq, isq = (Q * np.sqrt(w)) @ Q.T, (Q / np.sqrt(w)) @ Q.T
        y = x @ sq
        _, E = np.linalg.eigh(np.eye(d) - y[..., :, None] * y[..., None, :])  # (..., n, d, d)
        E = np.swapaxes(E[..., 1:], -1, -2) @ isq  # rows: tangent vectors, (..., n, d-1, d)
        E = E / np.sqrt(self.weights)[..., None, None]
        B = np.einsum("ij,...iae->...iaje", np.eye(n), E)
        return B.reshape(x.shape[:-2] + (n * (d - 1), n, d))

    def matrix(self):
        """(M, B): the Hessian in the orthonormal basis B = :meth:`basis`, M_ab = <B_a, Hess f[B_b]>.

        M has shape (..., n (d-1), n (d-1)); it is symmetrized (the asymmetry is rounding).
        """
        B = self.basis()
        HB = np.moveaxis(self(np.moveaxis(B, -3, 0)), 0, -3)  # extra axes in front broadcast
        M = self._gram(B, HB)
        return 0.5 * (M + np.swapaxes(M, -1, -2)), B

    def _gram(self, A, C):
        AW = (A @ self.W) * self.weights[..., None, :, None]
        return np.einsum("...aij,...bij->...ab", AW, C)


def _check_x(x, manifold, name="x"):
    return np.asarray(check_points(x, name, manifold), dtype=float)


def energy_hessian(x, beta, model: str = "usa", *, W=None, P=None, rescaled: bool = False) -> InteractionHessian:
    """The Riemannian Hessian of GLPR's E_beta (generalized: exp(beta x_i^T P x_j)) on (E_W)^n.

    Parameters
    ----------
    x : array_like, shape (..., n, d)
        Configuration(s) on (E_W)^n (the sphere for W = None).
    beta : float, >= 0
    model : {"usa", "sa", "standard"}
        The metric: weights 1/n (USA = grad E_beta, GLPR eq. 3.11), Z_{beta,i}/n^2 (SA, eq. 3.12),
        or 1 (the round metric).
    W : array_like, shape (d, d), optional
        SPD matrix of the ellipsoid E_W (None: the sphere).
    P : array_like, shape (d, d), optional
        SPD matrix of the kernel (None: identity, GLPR's E_beta).
    rescaled : bool, default False
        The Hessian of e^{-beta} E_beta (kernel exp(beta (x_i^T P x_j - 1)), finite at every beta
        on the sphere): e^{-beta} times the "usa" and "standard" Hessians and gradients; for "sa"
        the weights are rescaled too, so its gradient (the SA field) and Hessian are unchanged.

    Returns
    -------
    InteractionHessian
        ``H(V)`` is the Hessian-vector product, ``H.grad`` the Riemannian gradient, ``H.matrix()`` the
        matrix in an orthonormal tangent basis.

    References
    ----------
    GLPR, eq. (3.5), Remark 3.8 (eq. 3.11), section 3.4 (eq. 3.12).

    Examples
    --------
    At consensus (n tokens at one point) the round-metric Hessian is -e^beta / n on every direction
    but the two rotations that move the point:

    >>> import numpy as np
    >>> from riemattn.analysis.hessians import energy_hessian, spectrum
    >>> x = np.tile([1.0, 0.0, 0.0], (4, 1))
    >>> sp = spectrum(energy_hessian(x, 2.0, "standard"))
    >>> bool(np.allclose(sp.eigenvalues, -np.exp(2.0) / 4)), sp.eigenvalues.size, sp.n_symmetry
    (True, 6, 2)
    """
    beta = check_beta(beta)
    check_choice(model, "model", ENERGY_MODELS)
    rescaled = check_rescaled(rescaled)
    x = np.asarray(check_token_array(x, "x"), dtype=float)
    if x.shape[-1] < 2:
        raise ValidationError(f"x must have shape (..., n, d) with d >= 2, got shape {x.shape}.")
    d = x.shape[-1]
    manifold = Sphere(d - 1) if W is None else Ellipsoid(check_spd(W, "W", d))
    x = _check_x(x, manifold)
    d, n = x.shape[-1], x.shape[-2]
    P = np.eye(d) if P is None else check_spd(P, "P", d)
    gamma = {"standard": 1.0, "usa": 1.0 / n, "sa": 1.0 / n**2}[model]
    return InteractionHessian(x, beta=beta, P=P, W=np.asarray(manifold.W, float), s=1.0 / n**2,
                              weight_mode="kernel" if model == "sa" else "constant", gamma=gamma, rescaled=rescaled)


def potential_hessian(x, P, normalization: str = "paper") -> InteractionHessian:
    """The Riemannian Hessian of ARXIV's V_P = -1/2 sum exp(x_i^T P x_j) on (E_P)^n for the metric g_P.

    Parameters
    ----------
    x : array_like, shape (..., n, d), on (E_P)^n
    P : array_like, shape (d, d), SPD
    normalization : {"paper", "softmax", "none"}
        Z_i = sqrt(d) sum_j exp(x_i^T P x_j), sum_j exp(x_i^T P x_j), or 1 (ARXIV eq. 9).

    Returns
    -------
    InteractionHessian

    References
    ----------
    ARXIV, eq. (9)-(10), Theorem 3.1 (-grad V_P is the attention field with W = P).
    """
    P = check_spd(P, "P")
    check_choice(normalization, "normalization", ("paper", "softmax", "none"))
    x = _check_x(x, Ellipsoid(P))
    d = x.shape[-1]
    gamma = {"paper": np.sqrt(d), "softmax": 1.0, "none": 1.0}[normalization]
    return InteractionHessian(x, beta=1.0, P=P, W=P, s=-1.0,
                              weight_mode="constant" if normalization == "none" else "kernel",
                              gamma=gamma)


def symmetry_algebra(W, P, tol: float = 1e-10) -> np.ndarray:
    """A basis of the Lie algebra {A : A^T W + W A = 0, A^T P + P A = 0}, shape (k, d, d).

    For W = P (or W = I = P) this is o(W), of dimension d (d - 1) / 2.
    """
    W = check_square_matrix(W, "W")
    P = check_square_matrix(P, "P", W.shape[0])
    tol = check_nonnegative(tol, "tol")
    d = W.shape[0]
    E = np.eye(d * d).reshape(d * d, d, d)
    L = np.concatenate([(np.swapaxes(E, 1, 2) @ M + M @ E).reshape(d * d, -1) for M in (W, P)], 1)
    _, s, Vt = np.linalg.svd(L.T)
    rank = int(np.sum(s > tol * max(s[0], 1.0)))
    return Vt[rank:].reshape(-1, d, d)


@dataclass(frozen=True)
class Spectrum:
    """Hessian spectrum at a configuration with the symmetry orbit's directions removed.

    ``eigenvalues`` (ascending, ``(..., m - n_symmetry)``); ``n_symmetry`` the orbit dimension
    (d (d-1)/2 minus the stabilizer's dimension); ``n_positive`` / ``n_negative`` / ``n_zero`` the
    counts with |lambda| <= ``zero_tol`` counted as zero; ``symmetry_residual`` = max |M s| over the
    unit orbit directions s (zero at a critical point).
    """

    eigenvalues: np.ndarray
    n_symmetry: int
    n_positive: int
    n_negative: int
    n_zero: int
    zero_tol: float
    symmetry_residual: float


def spectrum(hessian: InteractionHessian, *, rtol: float = 1e-9, atol: float = 0.0) -> Spectrum:
    """Eigenvalues of the Hessian on the complement of the symmetry orbit (one configuration).

    Parameters
    ----------
    hessian : InteractionHessian
        At one configuration x of shape (n, d).
    rtol, atol : float
        An eigenvalue is counted as zero when |lambda| <= atol + rtol * max |lambda|.

    Returns
    -------
    Spectrum
    """
    if not isinstance(hessian, InteractionHessian):
        raise InputTypeError(f"hessian must be an InteractionHessian (energy_hessian, potential_hessian), "
                             f"got {type(hessian).__name__}.")
    rtol, atol = check_nonnegative(rtol, "rtol"), check_nonnegative(atol, "atol")
    if hessian.x.ndim != 2:
        raise ValidationError(f"spectrum takes one configuration (n, d), got shape {hessian.x.shape}.")
    M, B = hessian.matrix()
    m = M.shape[-1]
    algebra = symmetry_algebra(hessian.W, hessian.P)
    if len(algebra):
        modes = np.einsum("kde,ne->knd", algebra, hessian.x)  # (A x_i)_i
        S = hessian._gram(B, modes).T  # coordinates of the modes, (k, m)
        _, sv, Vt = np.linalg.svd(S, full_matrices=True)
        r = int(np.sum(sv > 1e-8 * max(sv[0], 1e-300)))
    else:
        Vt, r = np.eye(m), 0
    Qs, Qc = Vt[:r].T, Vt[r:].T
    lam = np.linalg.eigvalsh(Qc.T @ M @ Qc)
    scale = float(np.max(np.abs(np.linalg.eigvalsh(M)))) if m else 0.0
    tol = atol + rtol * scale
    res = float(np.max(np.abs(M @ Qs))) if r else 0.0
    return Spectrum(lam, r, int(np.sum(lam > tol)), int(np.sum(lam < -tol)),
                    int(np.sum(np.abs(lam) <= tol)), tol, res)
