"""
Phase diagram of self-attention
===============================

GLPR's (SA) dynamics with :math:`n` particles i.i.d. uniform on :math:`S^{d-1}`: the fraction
of runs in which the first two particles are clustered,
:math:`\\langle x_1(t), x_2(t)\\rangle \\ge 1 - \\varepsilon`, over the plane
:math:`(t, \\beta)`, next to the boundary predicted by the equiangular solution
(:ref:`glpr-phase`). All :math:`\\beta` run in one batched call: ``beta`` is an array, one inverse
temperature per trajectory. (A small grid: ``riemattn reproduce glpr-fig3`` draws the papers'.)
"""

import matplotlib.pyplot as plt
import numpy as np

import riemattn as ra

d, n, runs, eps = 16, 16, 8, 1e-3
betas = np.linspace(0.0, 6.0, 13)
t = np.linspace(0.0, 12.0, 49)
rng = np.random.default_rng(0)
x0 = rng.standard_normal((runs, n, d))
x0 /= np.linalg.norm(x0, axis=-1, keepdims=True)
x0 = np.broadcast_to(x0, (betas.size, runs, n, d))  # the same runs for every beta

field = ra.sa(betas[:, None], d)  # one beta per row of the batch
sol = ra.integrate(field, x0, (0.0, t[-1]), stepper="layer", dt=0.1, saveat=t,
                   save_fn=lambda s, y: np.einsum("...k,...k->...", y[..., 0, :], y[..., 1, :]))
inner = np.asarray(sol.observables["value"])  # (time, beta, run)
clustered = (inner >= 1 - eps).mean(axis=-1)

boundary = ra.theory.phase_boundary(t[1:], n, eps=eps, model="sa")

fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
mesh = ax.pcolormesh(t, betas, clustered.T, shading="nearest", cmap="viridis", vmin=0, vmax=1)
ax.plot(t[1:], boundary, color="w", lw=2, label="equiangular prediction")
ax.set_xlabel("t")
ax.set_ylabel(r"$\beta$")
ax.set_ylim(betas[0], betas[-1])
ax.legend(loc="lower right")
fig.colorbar(mesh, label=r"P($\langle x_1, x_2\rangle \geq 1-\varepsilon$)")
