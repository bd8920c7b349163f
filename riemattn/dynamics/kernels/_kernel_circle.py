r"""Compiled circle form of GLPR's SA / USA (private; ``KIND_CIRCLE`` of :mod:`riemattn.dynamics.kernels`).

Angles ``theta`` are tokens of dimension 1 on flat space (``y[:, 0]``), and, with
``Delta_ij = theta_j - theta_i`` (GLPR eq. 7.1),

.. math::

    \dot\theta_i = \frac{1}{N_i} \sum_j w_{ij} \sin\Delta_{ij}, \qquad
    w_{ij} = e^{\beta \cos\Delta_{ij}} \;(N_i = n, \text{USA}), \quad
    w_{ij} = e^{\beta (\cos\Delta_{ij} - 1)} \;(N_i = \textstyle\sum_j w_{ij}, \text{SA}).

Rescaled USA (``ints[RESCALED]``, :class:`~riemattn.dynamics.circle.CircleField` with
``rescaled=True``): e^{-beta} times USA, ``w_ij = e^{beta (cos Delta_ij - 1)}``, ``N_i = n``,
finite at every beta (the exponents are <= 0; exactly 0 on the diagonal).

Jacobian, ``k != i``: USA (plain and rescaled) ``(w_ik / n) (cos - beta sin^2)``; SA ``(w_ik / Z_i) (cos - beta
sin^2 + beta sin * theta_dot_i)`` (all of ``Delta_ik``); the diagonal is minus the sum of the
row's other entries (the field is invariant under a common rotation). A causal mask (``j <=
i``) restricts every sum.

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
section 7.1, eq. (7.1).
"""

from __future__ import annotations

import math

from ._kernel_attention import jit, source
from ._kernel_layout import BETA_LOC, BETA_OFF, L, MASK, MASK_CAUSAL, MODEL, MODEL_USA, RESCALED


@jit
def circle_rhs(t, y, b, ints, floats, per, work, out):
    l = ints[L]
    beta = source(ints[BETA_LOC], floats, per, b)[ints[BETA_OFF]]
    usa = ints[MODEL] == MODEL_USA
    shift = 1.0 if ints[RESCALED] != 0 else 0.0  # rescaled USA: e^{beta (cos - 1)}
    causal = ints[MASK] == MASK_CAUSAL
    for i in range(l):
        jmax = i + 1 if causal else l
        num, z = 0.0, 0.0
        for j in range(jmax):
            dlt = y[j, 0] - y[i, 0]
            if usa:
                w = math.exp(beta * (math.cos(dlt) - shift)) / l
            else:
                w = math.exp(beta * (math.cos(dlt) - 1.0))
                z += w
            num += w * math.sin(dlt)
        out[i, 0] = num if usa else num / z


@jit
def circle_jac(t, y, b, ints, floats, per, work, J):
    l = ints[L]
    beta = source(ints[BETA_LOC], floats, per, b)[ints[BETA_OFF]]
    usa = ints[MODEL] == MODEL_USA
    shift = 1.0 if ints[RESCALED] != 0 else 0.0
    causal = ints[MASK] == MASK_CAUSAL
    J[:, :] = 0.0
    for i in range(l):
        jmax = i + 1 if causal else l
        num, z = 0.0, 0.0
        if not usa:  # theta_dot_i and Z_i first
            for j in range(jmax):
                dlt = y[j, 0] - y[i, 0]
                w = math.exp(beta * (math.cos(dlt) - 1.0))
                z += w
                num += w * math.sin(dlt)
        v = num / z if not usa else 0.0
        diag = 0.0
        for k in range(jmax):
            if k == i:
                continue
            dlt = y[k, 0] - y[i, 0]
            sn, cs = math.sin(dlt), math.cos(dlt)
            if usa:
                jik = math.exp(beta * (cs - shift)) / l * (cs - beta * sn * sn)
            else:
                jik = math.exp(beta * (cs - 1.0)) / z * (cs - beta * sn * sn + beta * sn * v)
            J[i, k] = jik
            diag += jik
        J[i, i] = -diag
