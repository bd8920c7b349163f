"""Step-size control of the adaptive loop (:func:`riemattn.solvers.core._loops.run_adaptive`): the
starting step size and the PI controller's constants (the compiled engine,
:mod:`riemattn.solvers.compiled`, reads the same constants)."""

from __future__ import annotations

import numpy as np

from ..._backend import namespace


def _rms(x):
    xp = namespace(x)
    return xp.sqrt(xp.mean(xp.square(x), axis=(-2, -1)))


def initial_step(field, stepper, t0, y0, f0, rtol, atol, t1):
    """Hairer, Norsett & Wanner (1993), II.4 'starting step size', per trajectory (2 evaluations)."""
    xp = namespace(y0)
    scale = atol + xp.abs(y0) * rtol
    d0, d1 = _rms(y0 / scale), _rms(f0 / scale)
    h0 = xp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / xp.where(d1 > 0, d1, 1.0))
    h0 = xp.clip(h0, None, t1 - t0)
    y1 = field.manifold.retract(y0 + h0[..., None, None] * f0)
    f1 = field(t0 + h0, y1)
    d2 = _rms((f1 - f0) / scale) / h0
    dmax = xp.maximum(d1, d2)
    with np.errstate(divide="ignore"):
        h1 = xp.where(dmax <= 1e-15, xp.clip(h0 * 1e-3, 1e-6, None),
                      (0.01 / xp.where(dmax > 0, dmax, 1.0)) ** (1.0 / (stepper.order + 1)))
    return xp.clip(xp.minimum(100 * h0, h1), None, t1 - t0)


#: PI step-size controller (Gustafsson 1991, as in Hairer's DOPRI5 with its default beta = 0.04):
#: h_new = h * safety * err^(-alpha) * err_prev^beta, alpha = 1/k - 0.75 beta, k = error order + 1.
#: The integral term alone (beta = 0) lets the step size oscillate where it is limited by a stiff
#: or contracting mode (large beta attention, near consensus); the small proportional term damps
#: that at no cost elsewhere. After a rejection the step is not allowed to grow.
PI_BETA, SAFETY, FACMIN, FACMAX = 0.04, 0.9, 0.2, 10.0
#: A step that ends within LAST_STEP_RTOL * max(1, |t1|) of t1 is stretched to end on t1 exactly;
#: a rejected step shorter than UNDERFLOW_RTOL * max(1, |t|) stops the trajectory (step size
#: underflow); the previous error the PI term sees is at least ERR_PREV_FLOOR.
LAST_STEP_RTOL, UNDERFLOW_RTOL, ERR_PREV_FLOOR = 1e-12, 1e-14, 1e-4
