"""The one plotting style of every figure riemattn draws (reproductions, ``simulate``, the LLM loops).

* :func:`styled` decorates a ``plot(ds) -> Figure`` function: its figures are made under
  :data:`RC` (font sizes, constrained layout, so suptitles, 3-D axis labels and legends placed
  outside the axes get room; no ``tight_layout`` needed).
* :func:`plot_sphere_trajectories` draws tokens on S^2 or an ellipsoid with equal axis scales;
  :func:`draw_point` marks a special point (e.g. the consensus point v) on top of the tokens;
  :func:`draw_great_circle` draws the boundary {v^T y = 0} of a hemisphere.
* :func:`plot_circle_angles` draws angles on S^1 unwrapped in time (no jumps at +-pi) and cut at
  the widest gap of the final angles (no cluster split between the top and bottom of the panel).
* :func:`legend_below` puts a legend under an axes, off the data.
"""

from __future__ import annotations

import functools

import numpy as np

from .._validation import as_float_array, check_finite, check_flag, check_int, check_real, check_vector
from ..errors import InputTypeError, ValidationError

__all__ = [
    "RC", "draw_great_circle", "draw_point", "legend_below", "plot_circle_angles",
    "plot_sphere_trajectories", "set_pi_ticks", "styled",
]

#: matplotlib settings of every figure (used by :func:`styled`)
RC = {
    "figure.constrained_layout.use": True,
    "font.size": 9,
    "axes.titlesize": 9.5,
    "axes.labelsize": 9,
    "figure.titlesize": 10.5,
    "legend.fontsize": 8,
    "legend.framealpha": 0.9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "lines.linewidth": 1.2,
    "savefig.facecolor": "white",
}


def styled(plot):
    """Decorator: run a figure-making function under :data:`RC` (see the module docstring)."""
    if not callable(plot):
        raise InputTypeError(f"plot must be a function plot(...) -> Figure, got {type(plot).__name__}.")

    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        import matplotlib.pyplot as plt

        with plt.rc_context(RC):
            return plot(*args, **kwargs)

    return wrapper


def legend_below(ax, ncol=3, **kwargs):
    """A legend centred under ``ax`` (below its x label), so it never covers data; 1 <= ncol <= 100."""
    _axes(ax, "legend")
    ncol = check_int(ncol, "ncol", 1, maximum=100)
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=ncol, frameon=False, **kwargs)


def _label_3d(ax):
    import matplotlib.ticker as mticker

    ax.set_xlabel("$y^1$", labelpad=-2)
    ax.set_ylabel("$y^2$", labelpad=-2)
    ax.set_zlabel("$y^3$", labelpad=-4)
    for axis in (ax.xaxis, ax.yaxis, ax.zaxis):
        axis.set_tick_params(labelsize=7, pad=-1)
        axis.set_major_locator(mticker.MaxNLocator(5))


def plot_sphere_trajectories(ax, y, *, inv_sqrt_W=None, color="C0"):
    """Draw token trajectories y (time, l, 3) on a wireframe of S^2 (or E_W = W^{-1/2} S^2).

    Initial positions: white circles; final positions: gray circles; paths in blue (the papers'
    style). The three axes have equal scales (an ellipsoid is drawn with its true shape).
    """
    _axes(ax, "plot_wireframe", "set_zlim")
    y = check_finite(as_float_array(y, "y"), "y")
    if y.ndim != 3 or y.shape[-1] != 3 or not y.size:
        raise ValidationError(f"y must have shape (time, l, 3) with time, l >= 1, got shape {y.shape}.")
    if inv_sqrt_W is not None:
        inv_sqrt_W = check_finite(as_float_array(inv_sqrt_W, "inv_sqrt_W"), "inv_sqrt_W")
        if inv_sqrt_W.shape != (3, 3):
            raise ValidationError(f"inv_sqrt_W must be a (3, 3) matrix, got shape {inv_sqrt_W.shape}.")
    _color(color)
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 40), np.linspace(0, np.pi, 20))
    pts = np.stack([np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v)], axis=-1)
    if inv_sqrt_W is not None:
        pts = pts @ inv_sqrt_W
    ax.plot_wireframe(pts[..., 0], pts[..., 1], pts[..., 2], color="0.8", lw=0.3)
    for i in range(y.shape[1]):
        ax.plot(y[:, i, 0], y[:, i, 1], y[:, i, 2], color=color, lw=1.0)
    ax.scatter(*y[0].T, s=30, facecolor="white", edgecolor="k", depthshade=False, zorder=5)
    ax.scatter(*y[-1].T, s=30, facecolor="0.5", edgecolor="k", depthshade=False, zorder=5)
    # equal scales: the same half-width on every axis around the centre of the surface
    lo, hi = pts.reshape(-1, 3).min(axis=0), np.maximum(pts.reshape(-1, 3).max(axis=0), y.max(axis=(0, 1)))
    lo = np.minimum(lo, y.min(axis=(0, 1)))
    centre, half = (lo + hi) / 2, np.max(hi - lo) / 2
    ax.set_xlim(centre[0] - half, centre[0] + half)
    ax.set_ylim(centre[1] - half, centre[1] + half)
    ax.set_zlim(centre[2] - half, centre[2] + half)
    ax.set_box_aspect((1, 1, 1))
    _label_3d(ax)


def draw_point(ax, p, label, color="C3", ray=1.35):
    """Mark the point ``p`` of S^2 on top of the tokens: a cross at p, a dashed ray from p out to
    ``ray * p`` and the label at its end (a token sitting at p does not hide it)."""
    _axes(ax, "plot", "scatter", "text")
    p = check_vector(p, "p", 3, "the sphere S^2 in R^3")
    _label(label, "label")
    _color(color)
    ray = check_real(ray, "ray")
    end = ray * p
    ax.plot(*np.stack([p, end]).T, color=color, ls="--", lw=1.0, zorder=10)
    ax.scatter(*p, s=70, marker="x", color=color, linewidths=2.0, depthshade=False, zorder=10)
    ax.text(*(end * 1.04), label, color=color, fontsize=10, zorder=10)


def draw_great_circle(ax, v, color="C3", label=None):
    """Draw the great circle {y in S^2 : v^T y = 0}, the boundary of the hemisphere {v^T y > 0}."""
    _axes(ax, "plot")
    v = check_vector(v, "v", 3, "the sphere S^2 in R^3")
    if not np.any(v):
        raise ValidationError("v must be a nonzero vector (the hemisphere's pole), got 0.")
    _color(color)
    if label is not None:
        _label(label, "label")
    v = v / np.linalg.norm(v)
    a = np.linalg.svd(v[None, :])[2][1:]  # an orthonormal basis of v's orthogonal complement
    s = np.linspace(0.0, 2 * np.pi, 200)
    c = np.cos(s)[:, None] * a[0] + np.sin(s)[:, None] * a[1]
    return ax.plot(c[:, 0], c[:, 1], c[:, 2], color=color, lw=1.2, ls="-", label=label)


def unwrap_angles(theta):
    """Angles (time, particle) in (-pi, pi], unwrapped in time and shifted by multiples of 2 pi so
    that the final angles lie in one window of width 2 pi cut at the middle of their widest gap.

    Continuous paths (no jump of 2 pi between saved times, assuming each particle moves less than
    pi between two of them) and no final cluster split across the window's edges.
    """
    theta = np.unwrap(np.asarray(theta, dtype=float), axis=0)
    final = np.sort(np.mod(theta[-1], 2 * np.pi))
    gaps = np.diff(np.concatenate([final, final[:1] + 2 * np.pi]))
    k = int(np.argmax(gaps))
    cut = final[k] + gaps[k] / 2  # the window is [cut, cut + 2 pi): it starts in the widest gap
    shift = np.mod(theta[-1] - cut, 2 * np.pi) + cut - theta[-1]
    out = theta + shift
    # centre the window on 0 (by whole turns) so the usual range (-pi, pi] shows when it can
    mid = np.round(np.mean(out[-1]) / (2 * np.pi)) * 2 * np.pi
    return out - mid


def set_pi_ticks(ax, lo, hi):
    """y ticks at multiples of pi/2 between lo and hi (finite, lo <= hi), labelled in units of pi."""
    import matplotlib.ticker as mticker

    _axes(ax, "set_ylim")
    lo, hi = check_real(lo, "lo"), check_real(hi, "hi")
    if not lo <= hi:
        raise ValidationError(f"lo must be <= hi, got lo = {lo!r}, hi = {hi!r}.")

    ax.yaxis.set_major_locator(mticker.MultipleLocator(np.pi / 2))

    def fmt(x, _pos):
        k = int(np.round(2 * x / np.pi))  # x = k pi / 2
        sign, k = ("−" if k < 0 else ""), abs(k)
        if k == 0:
            return "0"
        if k % 2 == 0:
            return f"{sign}{'' if k == 2 else k // 2}π"
        return f"{sign}{'' if k == 1 else k}π/2"

    ax.yaxis.set_major_formatter(mticker.FuncFormatter(fmt))
    pad = 0.05 * (hi - lo)
    ax.set_ylim(lo - pad, hi + pad)


def plot_circle_angles(ax, t, theta, color="C0", lw=0.7, logx=False):
    """Draw angles theta (time, particle) of particles on S^1 against t, unwrapped
    (:func:`unwrap_angles`), with y ticks in units of pi. Returns the unwrapped angles."""
    _axes(ax, "plot", "set_ylim")
    t = check_finite(as_float_array(t, "t"), "t")
    theta = check_finite(as_float_array(theta, "theta"), "theta")
    if t.ndim != 1 or not t.size or theta.ndim != 2 or theta.shape[0] != t.size or not theta.shape[1]:
        raise ValidationError(f"t must have shape (time,) and theta (time, n) with time, n >= 1, got shapes "
                              f"{t.shape} and {theta.shape}.")
    _color(color)
    lw = check_real(lw, "lw")
    if not lw > 0:
        raise ValidationError(f"lw must be > 0, got {lw!r}.")
    if check_flag(logx, "logx") and hasattr(ax, "get_zlim"):
        raise ValidationError("logx=True needs a 2-D matplotlib Axes (a 3-D one has no log scale).")
    ang = unwrap_angles(theta)
    plot = ax.semilogx if logx else ax.plot
    plot(t, ang, color=color, lw=lw)
    set_pi_ticks(ax, float(np.min(ang)), float(np.max(ang)))
    return ang


def _axes(ax, *methods):
    """``ax`` as a matplotlib Axes: it has ``methods`` (3-D ones for a 3-D plot), else InputTypeError."""
    missing = [m for m in methods if not callable(getattr(ax, m, None))]
    if missing:
        kind = "a 3-D matplotlib Axes" if "set_zlim" in methods or "plot_wireframe" in methods else "a matplotlib Axes"
        raise InputTypeError(f"ax must be {kind}, got {type(ax).__name__} (without .{missing[0]}).")


def _color(color):
    from matplotlib.colors import is_color_like

    if not is_color_like(color) or not isinstance(color, (str, tuple, list, np.ndarray)):
        raise ValidationError(f"color must be a matplotlib color ('C3', 'k', '#1f77b4' or (r, g, b)), got {color!r}.")


def _label(label, name):
    if not isinstance(label, str):
        raise InputTypeError(f"{name} must be a str, got {type(label).__name__}.")
