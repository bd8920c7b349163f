r"""The attention field on the manifold without cancellation: the form the stiff steppers evaluate.

Private helper of :mod:`riemattn.solvers.rosenbrock` (the one place this form is defined, so
that a compiled kernel can mirror it). With the value matrix the identity (``U=None``: GLPR's SA
and USA), the field at tokens on the manifold is

.. math:: F_i = \Pi_i f_i = \sum_j \alpha_{ij} \, \Pi_i (y_j - y_i),
    \qquad \Pi_i = I - y_i (W y_i)^T,                                               (D)

because ``Pi_i y_i = (1 - y_i^T W y_i) y_i = 0`` there. The field's own evaluation
(``AttentionField.__call__``) projects the update ``f_i = sum_j alpha_ij y_j``: inside a cluster
``f_i`` is nearly parallel to ``y_i`` (size ``w / n`` for a cluster of ``w`` of ``n`` tokens with
USA, about 1 with SA) and the projection cancels it, leaving an absolute rounding error of about
``eps |f_i|`` on a tangent part that, on a metastable plateau, is exponentially small (about
``e^{-beta delta^2 / 2}`` for a gap ``delta``; 2e-17 for the third plateau of the dynamic-metastability
configuration at beta = 1000). A stiff stepper's step of length ``h`` integrates that rounding into
an error of ``h eps |f_i|``, so the step-size controller holds ``h`` near ``tol / eps`` (1e8 at rtol
1e-8) however slow the motion. In (D) the differences ``y_j - y_i`` of nearby tokens are exact
(Sterbenz's lemma) and coincident tokens contribute exactly 0: the rounding is relative to
``|F_i|``. (D) also leaves out the term ``c_i (1 - y_i^T W y_i) y_i``, ``c_i = sum_j alpha_ij``,
that ``Pi_i f_i`` carries off the manifold: at a retracted point it is rounding of size ``eps c_i``
along the normal ``y_i``, a direction that the lifted Jacobian leaves neutral, so the linear solve
of a Rosenbrock step multiplies it by ``h gamma`` and the lifting couples it back into the
tangent directions (measured: errors of 1e-8 instead of 1e-14 on a step of h = 1.7e10).

(D) costs O(l^2 d) memory and flops per trajectory (the differences ``y_j - y_i``): negligible
next to the O((l d)^2) Jacobian and O((l d)^3) solve of a stiff step, but 10-25 times a field
evaluation for l d in the hundreds, which is why the explicit steppers keep ``__call__``.

Fields other than NumPy attention fields with ``U=None`` and no context on the sphere or an
ellipsoid (general ``U``, where ``Pi_i U y_i`` is not zero; a cross-attention context, whose keys
are not the tokens; tensors; other fields) are evaluated as they are.
"""

from __future__ import annotations

import numpy as np

from ..geometry._fast import _FastMixin
from .attention import AttentionField

__all__ = ["applies", "on_manifold"]


def applies(field, y) -> bool:
    """Whether :func:`on_manifold` evaluates ``field`` at ``y`` in the form (D)."""
    return (isinstance(field, AttentionField) and field._U is None and field.context is None and type(y) is np.ndarray
            and isinstance(field.manifold, _FastMixin) and y.size > 0)


def on_manifold(field, t, y):
    """The field at tokens ``y`` on its manifold (points retracted by the stepper), in the form
    (D) where it applies (module docstring), else ``field(t, y)``; shape of ``y``."""
    if not applies(field, y):
        return field(t, y)
    A = field._attention(t, y)  # (..., i, h, j), internal layout; may be a work buffer: used at once
    A = A.sum(axis=-2) if A.shape[-2] > 1 else A[..., 0, :]
    D = y[..., None, :, :] - y[..., :, None, :]  # D[..., i, j, :] = y_j - y_i
    g = np.einsum("...ij,...ija->...ia", A, D)  # einsum: a trajectory's rounding is batch-independent
    return field.manifold.tangent(y, g)
