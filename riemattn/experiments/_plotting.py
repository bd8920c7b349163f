"""Plot helpers shared by the reproductions (the papers' visual conventions)."""

from __future__ import annotations

import numpy as np


def plot_sphere_trajectories(ax, y, *, inv_sqrt_W=None, color="C0"):
    """Draw token trajectories y (time, l, 3) on a wireframe of S^2 (or E_W = W^{-1/2} S^2).

    Initial positions: white circles; final positions: gray circles; paths in blue (the papers' style).
    """
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 40), np.linspace(0, np.pi, 20))
    pts = np.stack([np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v)], axis=-1)
    if inv_sqrt_W is not None:
        pts = pts @ inv_sqrt_W
    ax.plot_wireframe(pts[..., 0], pts[..., 1], pts[..., 2], color="0.8", lw=0.3)
    for i in range(y.shape[1]):
        ax.plot(y[:, i, 0], y[:, i, 1], y[:, i, 2], color=color, lw=1.0)
    ax.scatter(*y[0].T, s=30, facecolor="white", edgecolor="k", depthshade=False, zorder=5)
    ax.scatter(*y[-1].T, s=30, facecolor="0.5", edgecolor="k", depthshade=False, zorder=5)
    ax.set_box_aspect((1, 1, 1))
    ax.set_xlabel("$y^1$")
    ax.set_ylabel("$y^2$")
    ax.set_zlabel("$y^3$")
