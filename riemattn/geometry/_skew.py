r"""The exponential of skew-symmetric matrices acting on vectors, for generators of any size.

For a real skew matrix ``K`` (``K^T = -K``) the matrix ``i K`` is Hermitian:
``i K = U diag(lambda) U^H`` with real ``lambda`` and unitary ``U``, so

.. math:: e^{K} = U\,\mathrm{diag}(e^{-i\lambda})\,U^H .

The computed ``U`` is unitary and the ``e^{-i lambda}`` have modulus one, but the computed
eigenvalues carry absolute errors of about ``eps |K|`` that break their pairing ``(lambda, -lambda)``
(a zero eigenvalue of a 1e17-sized ``K`` came out as -9), so the product is unitary but not
real, and its real part is not orthogonal (measured: at ``|K| = 1e12`` it shrank a unit vector
by 1.7e-8, at 1e17 by 5.7 %). The real part ``E`` is therefore replaced by its orthogonal polar
factor ``U_s V_s^T`` (``E = U_s Sigma V_s^T``, an SVD), the orthogonal matrix nearest to it: the
result is a rotation of ``v`` to a few ulps (``|e^K v| = |v|``) *whatever the norm of K*. The
rotation angles carry the eigensolver's absolute error, about ``eps |K|``: the exponential of a
large skew matrix is that ill-conditioned, and a step that large is inaccurate anyway; what this
guarantees is that it stays in the group, so tokens stay on ``E_W``. Used by
:func:`riemattn.geometry.lowrank.expm_small_action` for skew generators beyond its Taylor range,
where SciPy's scaling and squaring let an RKMK4 step of size 10 leave the sphere by 1e-3
(issue 34).

References
----------
N. J. Higham, *Functions of Matrices*, SIAM 2008, section 10.2 (the exponential by a spectral
decomposition; exact for normal matrices), 10.3 (scaling and squaring) and 8.1 (the polar
factor is the nearest orthogonal matrix).
"""

from __future__ import annotations

import numpy as np

from .._backend import is_torch

__all__ = ["skew_expm_action"]


def skew_expm_action(K, v, *, increment=False):
    """``exp(K) v`` (or ``exp(K) v - v``) for a batch of real skew matrices: ``eigh(i K)``, then
    the orthogonal polar factor of the real part (see the module docstring).

    Parameters
    ----------
    K : ndarray or tensor, shape (..., m, m)
        Skew matrices (only the lower triangle is read, as by ``eigh``); finite.
    v : ndarray or tensor, shape (..., m)
        Vectors; leading axes broadcast against ``K``'s.
    increment : bool
        Return ``exp(K) v - v``.

    Returns
    -------
    ndarray or tensor, shape (..., m)
        Of the kind, device and dtype of ``v``; NaN where the eigensolver fails (entries near the
        float range).
    """
    if is_torch(K) or is_torch(v):
        import torch

        cdtype = torch.complex128 if v.dtype == torch.float64 else torch.complex64
        lam, U = torch.linalg.eigh(1j * K.to(cdtype))
        E = ((U * torch.exp(-1j * lam)[..., None, :]) @ U.mH).real.to(v.dtype)
        Us, _, Vh = torch.linalg.svd(E)
        out = torch.einsum("...ij,...j->...i", Us @ Vh, v)
        return out - v if increment else out
    try:
        with np.errstate(all="ignore"):
            lam, U = np.linalg.eigh(1j * K)
            E = ((U * np.exp(-1j * lam)[..., None, :]) @ np.conj(np.swapaxes(U, -1, -2))).real
            Us, _, Vh = np.linalg.svd(E)
    except np.linalg.LinAlgError:  # no convergence (entries near the float range): reported as NaN
        return np.full(np.broadcast_shapes(K.shape[:-1], v.shape), np.nan)
    out = np.einsum("...ij,...j->...i", Us @ Vh, v)
    return out - v if increment else out
