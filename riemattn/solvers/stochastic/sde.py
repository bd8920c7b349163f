r"""Stochastic attention: ``dY = F(t, Y) dt + sigma dB`` with B a Brownian motion on the token manifold.

The convention
--------------
Every token moves by the field ``F`` plus its own, independent Brownian motion on the manifold M
(the sphere S^(d-1), an ellipsoid E_W with the metric ``<X, Y>_W = X^T W Y``, or flat R^d), so
the law of the tokens has the generator

.. math:: \mathcal{L} f = \langle F, \nabla f \rangle + \frac{\sigma^2}{2} \Delta_M f

(``Delta_M`` the Laplace--Beltrami operator of each token's manifold). In the ambient R^d this is
the Stratonovich SDE ``dY = F dt + sigma P_Y o dB`` (``P_y = I - y y^T W`` the tangent projection,
B a Brownian motion in R^d with covariance ``W^{-1}``), whose Ito form on the unit sphere carries
the drift correction ``-(d - 1) (sigma^2 / 2) Y dt``. Consequence used by the tests: for F = 0 on
S^(d-1), ``E <x_0, Y_t> = exp(-(d - 1) sigma^2 t / 2)`` (degree-1 harmonics have eigenvalue
``-(d - 1)``), and on the circle the angle is ``theta_0 + sigma W_t``.

The methods (fixed step ``h``, noise ``xi ~ N(0, W^{-1})`` per token and step)
----------------------------------------------------------------------------------
``"em"``, projected Euler--Maruyama: ``Y_1 = pi_W(Y + h F(t, Y) + sigma sqrt(h) P_Y xi)``. The
retraction ``pi_W(x) = x / |x|_W`` supplies the Ito correction: for a tangent ``v``,
``pi_W(y + v) = (y + v)(1 - |v|_W^2 / 2 + ...)``, and ``E |v|_W^2 = (d - 1) sigma^2 h``.
Weak order 1, strong order 1/2; one field evaluation per step.

``"strang"``, a Strang splitting of the generator into the drift and the heat semigroup: half a step
of the drift (projected Heun, order 2), one curvature-corrected geodesic random-walk step, half a
step of the drift. The walk moves each token along the geodesic ``cos(r) y + sin(r) u`` in the
uniform tangent direction ``u = v / |v|_W`` of the tangent Gaussian ``v = sigma sqrt(h) P_y xi``,
by ``r = |v|_W exp(-(m - 1) sigma^2 h / 12)`` (m = d - 1 the manifold's dimension). By the
rotational symmetry about ``y``, ``E f(Y_1) = E M_f(r)`` with ``M_f(r)`` the mean of f over the
geodesic sphere of radius r, an even smooth function of r; so the step is weakly exact to O(h^3)
iff ``E r^2`` and ``E r^4`` are. The heat kernel has ``E cos R_h = exp(-m sigma^2 h / 2)`` and
``E R_h^4 = m (m + 2) sigma^4 h^2 + O(h^3)``, hence ``E R_h^2 = m sigma^2 h - m (m - 1) sigma^4
h^2 / 6 + O(h^3)``, which the factor above matches (the plain geodesic walk misses the h^2 term for
m >= 2 and is weak order 1; on the circle, m = 1, it is exact). On R^d the step is exact. Weak
order 2; four field evaluations per step.

Both methods end every step with the retraction, so the tokens are on the manifold to round-off.
Measured orders: docs/noise.md (``benchmarks/sde_weak_order.py``).

Design: a method is a fixed-step :class:`~riemattn.solvers.steppers.Stepper` that owns its noise
(sigma and a random generator); :func:`integrate_sde` builds one and runs it through
:func:`~riemattn.solvers.integrate.integrate`'s fixed-step loop, so saving (``saveat``,
``save_fn``), NaN handling, per-trajectory status, ``project`` and the PyTorch device path are the
deterministic ones. Noise is drawn for the whole batch at once: independent across tokens,
trajectories and steps; a seed gives the same result for the same batch shape, backend and device.

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", Problem 7
(noise). E. P. Hsu, *Stochastic Analysis on Manifolds*, AMS 2002, ch. 1-3 (Brownian motion on
submanifolds, Stratonovich projection). P. E. Kloeden, E. Platen, *Numerical Solution of
Stochastic Differential Equations*, Springer 1992, ch. 14 (weak order). G. N. Milstein,
M. V. Tretyakov, *Stochastic Numerics for Mathematical Physics*, 2004, section 2.2 (splitting).
"""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np

from ..._backend import constant, device_of, is_torch, namespace
from ..._validation import as_float_array, check_finite, check_int, check_nonnegative, check_positive, check_times, plain
from ...errors import InputTypeError, ValidationError
from ..core.integrate import integrate
from ..explicit.steppers import ProjectedHeun, StepResult, Stepper, per_trajectory

__all__ = ["integrate_sde", "SDE_METHODS", "SDEStepper", "ProjectedEulerMaruyama", "StrangGeodesic",
           "brownian_mean_cosine"]


def brownian_mean_cosine(t, d: int, sigma: float):
    """``E <x_0, Y_t>`` for Brownian motion with generator (sigma^2/2) Delta on S^(d-1): exp(-(d-1) sigma^2 t / 2).

    References
    ----------
    E. P. Hsu, *Stochastic Analysis on Manifolds*, section 3.3 (degree-1 spherical harmonics are
    eigenfunctions of the Laplacian with eigenvalue -(d - 1)).
    """
    t = check_times(t, "t")
    d, sigma = check_int(d, "d", 2), np.float64(check_nonnegative(sigma, "sigma"))
    with np.errstate(over="ignore", invalid="ignore"):  # sigma^2 t overflowing is a mean cosine of 0
        rate = (d - 1) * np.square(sigma) / 2.0
        return np.exp(-np.where(t == 0, 0.0, rate * t))  # 1 at t = 0 even where sigma^2 overflows (inf * 0)


class _Zero:
    """The zero field on a manifold (plain Brownian motion)."""

    def __init__(self, manifold):
        self.manifold = manifold

    def __call__(self, t, y):
        return y * 0.0


class SDEStepper(Stepper):
    """A fixed-step stochastic method: ``step`` draws its own noise (sigma, a generator).

    Parameters
    ----------
    sigma : float or ndarray
        Noise strength, a scalar or one value per trajectory (broadcasting over the batch axes).
    seed : int, numpy.random.Generator, torch.Generator or None
        The random stream; an int seeds a NumPy ``Generator`` (NumPy tokens) or a
        ``torch.Generator`` on the tokens' device (tensors).
    """

    adaptive = False
    forward_only = True
    weak_order = 1
    strong_order = 0.5

    def __init__(self, sigma=0.0, seed=None):
        if not is_torch(sigma):  # a scalar or one value per trajectory: finite, >= 0
            s = check_finite(as_float_array(sigma, "sigma"), "sigma")
            if np.any(s < 0):
                raise ValidationError(f"sigma must be >= 0, got {plain(s)}.")
            sigma = float(s) if s.ndim == 0 else s
        if seed is not None and not (isinstance(seed, np.random.Generator) or hasattr(seed, "manual_seed")):
            seed = check_int(seed, "seed", 0)
        self.sigma = sigma
        self.seed = seed
        self._rng = None if isinstance(seed, (Integral, type(None))) else seed

    def _generator(self, y):
        if self._rng is None:
            if is_torch(y):
                import torch

                g = torch.Generator(device=device_of(y))
                seed = self.seed if self.seed is not None else np.random.SeedSequence().entropy % 2**63
                g.manual_seed(int(seed))  # (None: fresh entropy, without touching torch's global generator)
                self._rng = g
            else:
                self._rng = np.random.default_rng(self.seed)
        return self._rng

    def gaussian(self, y):
        """Ambient Gaussian increments of covariance W^{-1} (standard in the W-metric), shape of y."""
        rng = self._generator(y)
        if is_torch(y):
            import torch

            if not isinstance(rng, torch.Generator):
                raise InputTypeError(f"seed must be an int or a torch.Generator for tensors, got {type(rng).__name__}.")
            z = torch.randn(tuple(y.shape), generator=rng, dtype=y.dtype, device=y.device)
        else:
            if not isinstance(rng, np.random.Generator):
                raise InputTypeError(
                    f"seed must be an int or a numpy.random.Generator for NumPy tokens, got {type(rng).__name__}."
                )
            z = rng.standard_normal(y.shape)
        return z

    def tangent_noise(self, manifold, y, h):
        """``sigma sqrt(h) P_y xi``: the tangent Gaussian increment of one step, shape of y."""
        z = self.gaussian(y)
        if not getattr(manifold, "is_identity", True):
            if not hasattr(self, "_consts"):
                self._consts = {}
            z = z @ constant(self._consts, "isw", manifold.inv_sqrt_W, y)  # W^{-1/2} z (symmetric)
        scale = per_trajectory(self.sigma, y) * math.sqrt(h) if np.ndim(h) == 0 else (
            per_trajectory(self.sigma, y) * namespace(y).sqrt(per_trajectory(h, y)))
        return manifold.tangent(y, scale * z)


class ProjectedEulerMaruyama(SDEStepper):
    """Projected Euler--Maruyama: ``Y_1 = pi_W(Y + h F(t, Y) + sigma sqrt(h) P_Y xi)``; weak order 1.

    References
    ----------
    Kloeden, Platen (1992), section 14.1 (Euler--Maruyama); the retraction gives the Ito correction
    (module docstring).
    """

    name = "em"
    order = 1
    weak_order = 1

    def step(self, field, t, y, h, k1=None) -> StepResult:
        m = field.manifold
        dy = h * (field(t, y) if k1 is None else k1)
        return StepResult(m.retract(y + dy + self.tangent_noise(m, y, h)), None, 1)


class StrangGeodesic(SDEStepper):
    """Strang splitting: half a projected Heun drift step, a curvature-corrected geodesic random walk
    step, half a drift step; weak order 2 (module docstring).

    References
    ----------
    Milstein, Tretyakov (2004), section 2.2 (splitting, weak order 2); the radial correction is
    derived in the module docstring from the heat kernel's moments.
    """

    name = "strang"
    order = 2
    weak_order = 2

    _drift = ProjectedHeun()

    def walk(self, manifold, y, h):
        """One curvature-corrected geodesic random-walk step of every token (exact on R^d)."""
        v = self.tangent_noise(manifold, y, h)
        if not hasattr(manifold, "inv_sqrt_W"):  # flat: the Gaussian step is exact
            return y + v
        xp = namespace(y)
        m = manifold.dim  # the manifold's dimension, d - 1
        s2h = per_trajectory(self.sigma, y) ** 2 * (per_trajectory(h, y) if np.ndim(h) else h)
        r0 = manifold.norm(v)[..., None]
        shrink = -(m - 1) * s2h / 12.0
        r = r0 * (math.exp(shrink) if isinstance(shrink, (int, float)) else xp.exp(shrink))
        safe = xp.where(r0 > 0, r0, xp.ones_like(r0))
        return manifold.retract(xp.cos(r) * y + (xp.sin(r) / safe) * v)

    def step(self, field, t, y, h, k1=None) -> StepResult:
        half = h / 2
        y = self._drift.step(field, t, y, half).y
        y = self.walk(field.manifold, y, h)
        y = self._drift.step(field, t + half, y, half).y
        return StepResult(y, None, 4)


#: The stochastic methods of :func:`integrate_sde`, by name.
SDE_METHODS = {cls.name: cls for cls in (ProjectedEulerMaruyama, StrangGeodesic)}


def _check_sigma(sigma, batch):
    if is_torch(sigma):
        sigma = sigma.detach().cpu().numpy()
    arr = check_finite(as_float_array(sigma, "sigma"), "sigma")
    if np.any(arr < 0):
        raise ValidationError(f"sigma must be >= 0, got a minimum of {arr.min()!r}.")
    if arr.ndim == 0:
        return float(arr)
    try:
        shape = np.broadcast_shapes(arr.shape, tuple(batch))
    except ValueError:
        shape = None
    if shape != tuple(batch):
        raise ValidationError(
            f"sigma of shape {arr.shape} must be a scalar or broadcast against the batch axes {tuple(batch)} "
            "of y0 (one noise strength per trajectory)."
        )
    return arr


def integrate_sde(field, y0, t_span, *, sigma, dt, method="em", seed=None, saveat=None, save_fn=None,
                  progress=False, max_steps=1_000_000, raise_on_failure=False, project=False):
    """Integrate ``dY = F(t, Y) dt + sigma dB`` on the field's manifold (B: Brownian motion on it).

    Parameters
    ----------
    field : Field or manifold
        The drift F (any :class:`~riemattn.dynamics.fields.Field`, e.g. ``riemattn.sa(beta, d)``);
        a manifold (``Sphere``, ``Ellipsoid``, ``Euclidean``) means F = 0 (Brownian motion).
    y0 : array_like or tensor, shape (..., l, d)
        Initial tokens on the manifold; leading axes are independent trajectories.
    t_span : (t0, t1)
        Start and end time, t0 <= t1.
    sigma : float or array_like
        Noise strength (generator ``(sigma^2 / 2) Delta_M`` per token); an array gives one per
        trajectory (it broadcasts against the batch axes ``y0.shape[:-2]``), so a sweep over sigma
        is one batch.
    dt : float
        Step size; each interval between save times is split into equal steps <= dt.
    method : {"em", "strang"}
        Projected Euler--Maruyama (weak order 1, 1 field evaluation per step) or the Strang
        splitting with a geodesic random walk (weak order 2, 4 evaluations); see the module notes.
    seed : int, numpy.random.Generator, torch.Generator or None
        Random stream (None: fresh entropy). Same seed, batch shape, backend and device: same result.
    saveat, save_fn, progress, max_steps, raise_on_failure, project
        As in :func:`~riemattn.solvers.integrate.integrate`.

    Returns
    -------
    Trajectory
        As :func:`~riemattn.solvers.integrate.integrate`; ``stepper`` is the method's name.

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    Problem 7. Kloeden, Platen (1992), ch. 14.
    """
    if not callable(field) and hasattr(field, "tangent") and hasattr(field, "normalize"):
        field = _Zero(field)
    if getattr(field, "manifold", None) is None or not callable(field):
        raise InputTypeError(
            f"field must be a riemattn Field or a manifold (Sphere, Ellipsoid, Euclidean), got {type(field).__name__}."
        )
    if method not in SDE_METHODS:
        raise ValidationError(f"method must be one of {sorted(SDE_METHODS)}, got {method!r}.")
    if not isinstance(seed, (Integral, type(None))) or isinstance(seed, bool):
        ok = isinstance(seed, np.random.Generator) or type(seed).__name__ == "Generator"
        if not ok or isinstance(seed, bool):
            raise InputTypeError(
                f"seed must be an int, None, a numpy.random.Generator or a torch.Generator, got {type(seed).__name__}."
            )
    if isinstance(seed, Integral) and seed < 0:
        raise ValidationError(f"seed must be >= 0 (NumPy and torch streams need it), got {seed}.")
    dt = check_positive(dt, "dt")
    batch = tuple(getattr(y0, "shape", np.shape(y0)))[:-2]
    sigma = _check_sigma(sigma, batch)
    stepper = SDE_METHODS[method](sigma, seed)
    return integrate(field, y0, t_span, stepper, dt, saveat=saveat, save_fn=save_fn, progress=progress,
                     max_steps=max_steps, raise_on_failure=raise_on_failure, project=project)
