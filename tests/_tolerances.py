"""Tolerances derived from the computation, for tests of accumulated floating-point quantities.

The policy (docs/contributing.md, "Tolerances"): a quantity computed by ``n_ops`` dependent
floating-point operations, each of relative rounding at most eps, on data of size ``scale`` and
with a conditioning (amplification of a relative perturbation) ``cond``, is held to

    eps_bound(n_ops, cond, scale) = n_ops * cond * scale * eps,

the worst-case linear accumulation of the roundings (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., section 3.1: |fl(sum) - sum| <= gamma_n sum |x_i|, gamma_n ~ n u, u = eps/2,
and the same for dot products and matrix products, whatever the order or kernel -- AVX-512,
AVX2, FMA or not). A worst case, not the typical sqrt(n) random walk: it holds on every x86-64
CPU and BLAS, where a bare constant measured on one machine does not (issue 34: 1.0e-12 against a
bare 1e-12 on an AVX-512 machine). Each use states its n_ops, cond and scale in a comment.
"""

from __future__ import annotations

import numpy as np

EPS = float(np.finfo(np.float64).eps)  # 2.22e-16


def eps_bound(n_ops, cond=1.0, scale=1.0) -> float:
    """``n_ops * cond * scale * eps``: a worst-case rounding bound (see the module docstring)."""
    if not (n_ops >= 1 and cond >= 1.0 and scale > 0):
        raise ValueError(f"need n_ops >= 1, cond >= 1, scale > 0, got {n_ops}, {cond}, {scale}.")
    return float(n_ops) * float(cond) * float(scale) * EPS
