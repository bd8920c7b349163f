"""
Work–precision of the steppers
==============================

Error at :math:`t = 5` against field evaluations for the fixed-step projected Runge–Kutta and
Lie-group steppers (dots: several step sizes) and the adaptive ones (several tolerances) on a
hemisphere problem with two heads, one trajectory. The slopes are the methods' orders
(:ref:`theory-steppers`). ``benchmarks/work_precision.py`` is the full benchmark (ensembles,
SciPy, timings).
"""

import matplotlib.pyplot as plt
import numpy as np

import riemattn as ra

rng = np.random.default_rng(1)
P = rng.uniform(-0.5, 0.5, (2, 3, 3))
field = ra.AttentionField(lambda t: np.cos(3 * t) * P)
y0 = field.manifold.projection(rng.uniform(-0.5, 0.5, (10, 3)))
t1 = 5.0
ref = ra.integrate(field, y0, (0.0, t1), stepper="dop853", rtol=1e-13, atol=1e-13).y[-1]

fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
for name in ["euler", "heun", "rk4", "lie-euler", "cg3", "rkmk4"]:
    work, err = [], []
    for dt in [0.2, 0.1, 0.05, 0.025]:
        sol = ra.integrate(field, y0, (0.0, t1), stepper=name, dt=dt)
        work.append(sol.nfev)
        err.append(np.abs(sol.y[-1] - ref).max())
    ax.loglog(work, err, "o-", label=f"{name} (order {ra.STEPPERS[name].order})")
for name in ["dopri5", "dop853"]:
    work, err = [], []
    for tol in [1e-4, 1e-6, 1e-8, 1e-10]:
        sol = ra.integrate(field, y0, (0.0, t1), stepper=name, rtol=tol, atol=tol)
        work.append(sol.nfev)
        err.append(np.abs(sol.y[-1] - ref).max())
    ax.loglog(work, err, "s--", label=f"{name} (adaptive)")
ax.set_xlabel("field evaluations")
ax.set_ylabel(r"max error at $t = 5$")
ax.legend(fontsize=8, ncol=2)
