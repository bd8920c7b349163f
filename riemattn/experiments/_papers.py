"""Matrices printed in the papers (ARXIV section 7; the ICML version prints them to two decimals).

Source: Rodriguez Abella, Silvestre, Tabuada, "Asymptotic behavior of continuous-time attention"
(arXiv long version of "Consensus is all you get", ICML 2025), section 7.1-7.3.
"""

import numpy as np

from .._backend import constant, is_torch, namespace

#: ARXIV section 7.1 (Figure 1): SPD P of the gradient-flow example, tokens on E_P.
P_FIG1 = np.array(
    [[0.9432, 0.0587, -0.1813], [0.0587, 0.8450, -0.1013], [-0.1813, -0.1013, 0.5519]]
)

#: ARXIV section 7.2 (Figures 2-3): P'_1 and P'_2 of the two-head hemisphere example.
P1_FIG23 = np.array(
    [[0.0805, -0.1929, 0.1991], [-0.2312, 0.3131, -0.2335], [0.1788, -0.1732, -0.1594]]
)
P2_FIG23 = np.array(
    [[-0.3067, 0.0349, 0.1107], [0.0572, -0.0557, 0.1343], [0.1375, 0.1083, 0.1018]]
)

#: ARXIV section 7.3 (Figure 4): P' and the symmetric U of the causal example.
P_FIG4 = np.array(
    [[0.3598, 0.4150, 0.1319], [0.0971, -0.0668, -0.2046], [0.1548, -0.2102, 0.1220]]
)
U_FIG4 = np.array(
    [[-0.2590, 0.4965, 0.5609], [0.4965, -0.7174, -0.5003], [0.5609, -0.5003, -0.0247]]
)


def _diagonals(t, freqs):
    """2 (cos f0 pi t, sin f1 pi t, cos f2 pi t), shape t.shape + (3,)."""
    t = np.asarray(t, dtype=float)
    return 2.0 * np.stack(
        [np.cos(freqs[0] * np.pi * t), np.sin(freqs[1] * np.pi * t), np.cos(freqs[2] * np.pi * t)], axis=-1
    )


def D1(t):
    """D_1(t) = 2 diag(cos 10 pi t, sin 10 pi t, cos 6 pi t) (ARXIV section 7.2-7.3)."""
    return np.diag(_diagonals(float(t), (10, 10, 6)))


def D2(t):
    """D_2(t) = 2 diag(cos 6 pi t, sin 6 pi t, cos 4 pi t) (ARXIV section 7.2)."""
    return np.diag(_diagonals(float(t), (6, 6, 4)))


#: angular frequencies of D_1 (row 0) and D_2 (row 1), and which entries are sines
_HEMI_FREQS = np.pi * np.array([[10.0, 10.0, 6.0], [6.0, 6.0, 4.0]])
_HEMI_SINE = np.array([False, True, False])
_HEMI_P = np.stack([P1_FIG23, P2_FIG23])


def hemisphere_P(t):
    """P_eta(t) = D_eta(t) P'_eta: the two heads of ARXIV Figures 2-3.

    ``t`` a float gives shape (2, 3, 3); an array of times gives t.shape + (2, 3, 3), so the
    function can be used with ``AttentionField(..., time_vectorized=True)``. The same values as
    ``np.stack([D1(t) @ P1_FIG23, D2(t) @ P2_FIG23])``, computed with one cosine and one sine
    call for all times (it is the right-hand side's time dependence in the benchmarks).

    ``t`` a PyTorch tensor (0-d or of times, CPU or CUDA) gives a tensor on its device, of its
    floating dtype (float64 for integer times); the constants are converted once per device and
    dtype and cached. Any other ``t`` (float, array_like) gives a float64 NumPy array.
    """
    if not is_torch(t):
        arg = np.asarray(t, dtype=float)[..., None, None] * _HEMI_FREQS  # (..., 2, 3)
        D = 2.0 * np.where(_HEMI_SINE, np.sin(arg), np.cos(arg))
        return D[..., :, None] * _HEMI_P
    xp = namespace(t)
    if not t.is_floating_point():
        t = t.to(dtype=xp.float64)
    arg = t[..., None, None] * constant(_HEMI_CONSTS, "freqs", _HEMI_FREQS, t)
    sine = constant(_HEMI_CONSTS, "sine", _HEMI_SINE, t) != 0  # stored in t's dtype, used as a mask
    D = 2.0 * xp.where(sine, xp.sin(arg), xp.cos(arg))
    return D[..., :, None] * constant(_HEMI_CONSTS, "P", _HEMI_P, t)


def hemisphere_heads():
    """:func:`hemisphere_P` as a :class:`~riemattn.dynamics.schedules.TimeVaryingHeads`, the kind the
    compiled engine reads as data: P_eta(t) = sum_k A_k sin(omega_k t + phi_k) with one term per
    row of each head (row r of head eta is 2 P'_eta[r] times cos(omega t) = sin(omega t + pi/2),
    or sin(omega t)). Equal to ``hemisphere_P(t)`` to rounding (sin(x + pi/2) for cos x).
    """
    from ..dynamics.schedules import TimeVaryingHeads

    h, d, _ = _HEMI_P.shape
    A = np.zeros((h * d, h, d, d))
    omega, phi = np.zeros(h * d), np.zeros(h * d)
    for eta in range(h):
        for r in range(d):
            k = eta * d + r
            A[k, eta, r] = 2.0 * _HEMI_P[eta, r]
            omega[k] = _HEMI_FREQS[eta, r]
            phi[k] = 0.0 if _HEMI_SINE[r] else np.pi / 2
    return TimeVaryingHeads(np.zeros((h, d, d)), A, omega, phi)


#: _HEMI_FREQS, _HEMI_SINE, _HEMI_P converted per device and dtype (see riemattn._backend.constant)
_HEMI_CONSTS: dict = {}
