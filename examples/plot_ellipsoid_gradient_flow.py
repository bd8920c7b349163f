"""
Gradient flow on an ellipsoid
=============================

With one head, :math:`U = I` and a constant symmetric positive definite :math:`P = W`, attention
on the ellipsoid :math:`E_P` is the gradient descent of the potential
:math:`V_P(y) = -\\tfrac12 \\sum_{i,j} e^{y_i^\\top P y_j}` for the metric :math:`g_P`
(:ref:`thm-gradient-flow`). The potential decreases to its minimum at consensus.
"""

import matplotlib.pyplot as plt
import numpy as np

import riemattn as ra
from riemattn import gradient_flow as gf

P = np.array([[0.9432, 0.0587, -0.1813], [0.0587, 0.8450, -0.1013], [-0.1813, -0.1013, 0.5519]])
field = gf.arxiv_field(P)  # AttentionField(P, W=P)
rng = np.random.default_rng(0)
y0 = field.manifold.projection(rng.uniform(-0.5, 0.5, (10, 3)))

t = np.linspace(0.0, 30.0, 301)
sol = ra.integrate(field, y0, (0.0, 30.0), stepper="rk4", dt=0.05, saveat=t)
V = gf.potential(sol.y, P)

fig = plt.figure(figsize=(9, 4), layout="constrained")
ax = fig.add_subplot(1, 2, 1, projection="3d")
# the ellipsoid x^T P x = 1 as the image of the unit sphere under P^{-1/2}
lam, Q = np.linalg.eigh(P)
u, w = np.mgrid[0 : 2 * np.pi : 40j, 0 : np.pi : 20j]
s = np.stack([np.cos(u) * np.sin(w), np.sin(u) * np.sin(w), np.cos(w)], axis=-1)
e = s @ (Q / np.sqrt(lam)).T
ax.plot_wireframe(e[..., 0], e[..., 1], e[..., 2], color="0.85", lw=0.4)
for i in range(10):
    ax.plot(*sol.y[:, i].T, lw=1.2)
ax.scatter(*sol.y[-1, 0], color="red", s=40)
ax.set_box_aspect(np.ptp(e.reshape(-1, 3), axis=0))
ax.set_title("tokens on $E_P$")

ax2 = fig.add_subplot(1, 2, 2)
ax2.plot(t, V)
ax2.axhline(-0.5 * 10**2 * np.e, color="0.5", ls="--", label=r"$-\ell^2 e/2$ (consensus)")
ax2.set_xlabel("t")
ax2.set_ylabel("$V_P(y(t))$")
ax2.legend()
print(f"V_P non-increasing: {bool(np.all(np.diff(V) <= 1e-9))}; V_P(30) = {V[-1]:.4f}")
