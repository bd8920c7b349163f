"""
Hemisphere consensus on the sphere
==================================

Ten tokens on :math:`S^2` start in the open hemisphere :math:`H^+(v)`, :math:`v = (1, 0, 0)`,
and move along the attention field of two heads with time-varying :math:`P_\\eta(t)`,
:math:`U_\\eta = I` (the setting of the hemisphere theorem, :ref:`thm-hemisphere`). The
Lyapunov function :math:`V(y) = \\max_i (1 - v^\\top y_i)` never increases and the tokens reach
consensus.
"""

import matplotlib.pyplot as plt
import numpy as np

import riemattn as ra

rng = np.random.default_rng(3)
d, tokens = 3, 10
P = rng.uniform(-0.5, 0.5, (2, d, d))
omega = np.array([[10.0, 6.0], [6.0, 4.0]]) * np.pi


def P_t(t):
    """Two heads whose matrices oscillate in time: P_eta(t) = 2 cos(omega_eta t) P'_eta."""
    return 2.0 * np.cos(omega[:, 0] * t)[:, None, None] * P


field = ra.AttentionField(P_t)
v = np.array([1.0, 0.0, 0.0])
x = rng.uniform(-0.5, 0.5, (tokens, d))
x[:, 0] = np.abs(x[:, 0]) + 0.05  # every token in H+(v)
y0 = field.manifold.projection(x)

t = np.linspace(0.0, 15.0, 301)
sol = ra.integrate(field, y0, (0.0, 15.0), stepper="dopri5", rtol=1e-8, saveat=t)
V = ra.diagnostics.hemisphere_lyapunov(sol.y, v)

fig = plt.figure(figsize=(9, 4), layout="constrained")
ax = fig.add_subplot(1, 2, 1, projection="3d")
u, w = np.mgrid[0 : 2 * np.pi : 40j, 0 : np.pi : 20j]
ax.plot_wireframe(np.cos(u) * np.sin(w), np.sin(u) * np.sin(w), np.cos(w), color="0.85", lw=0.4)
for i in range(tokens):
    ax.plot(*sol.y[:, i].T, lw=1.2)
    ax.scatter(*sol.y[0, i], color="k", s=8)
ax.scatter(*sol.y[-1, 0], color="red", s=40, label="consensus")
ax.set_box_aspect((1, 1, 1))
ax.set_title("tokens on $S^2$")
ax.legend(loc="upper left")

ax2 = fig.add_subplot(1, 2, 2)
ax2.semilogy(t, V, label=r"$V = \max_i (1 - v^\top y_i)$")
ax2.semilogy(t, ra.diagnostics.misalignment(sol.y), label="misalignment $E$")
ax2.set_xlabel("t")
ax2.legend()
ax2.set_title("Lyapunov function and misalignment")
print(f"V never increases: {bool(np.all(np.diff(V) <= 1e-12))}; final E = {ra.diagnostics.misalignment(sol.y[-1]):.1e}")
