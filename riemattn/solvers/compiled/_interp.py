"""The dense output of one step of the compiled engine (saving between steps, events)."""

from __future__ import annotations

from ...dynamics.kernels._kernel_cache import njit

from ._rosenbrock import ros_dense
from ._steps import dop853_dense, dop853_prepare, dopri5_dense, rk_step

_JIT = dict(error_model="numpy")


@njit(**_JIT)
def interp(fn, m, mode, flat, native, t, y, h, K, Us, x1, Fd, Kx, r_new, k_next, prep, b, ints, floats, per,
           work, x, X, r, K2, r2, e2, theta, out):
    """The solution at t + theta h inside a step, on the manifold, into ``out``; returns the field
    evaluations it cost. ``native`` False: a fresh step of size theta h from (t, y) (the NumPy
    engine's :meth:`~riemattn.solvers.steppers.Stepper.interpolant` for steppers without a dense
    output); DOP853's extension is built on first use (``prep[0]``, 3 evaluations)."""
    kind = m.ints[0]
    if not native:
        return rk_step(fn, m, kind == 1, flat, t, y, theta * h, K2, kind < 0, b, ints, floats, per, work, x, X, r,
                       out, r2, e2)
    nfev = 0
    if kind == 2:
        if prep[0] == 0:
            nfev += dop853_prepare(fn, m, flat, t, y, h, K, r_new, k_next, b, ints, floats, per, work, Kx, Fd,
                                   x, X, r)
            prep[0] = 1
        dop853_dense(flat, y, Fd, theta, ints, floats, x, out)
    elif kind == 3 or (kind == 4 and mode == 1):
        ros_dense(m, flat, y, x1, Us, theta, ints, floats, x, out)
    else:
        dopri5_dense(m, flat, y, h, K, theta, ints, floats, x, out)
    return nfev
