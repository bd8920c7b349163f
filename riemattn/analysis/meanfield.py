r"""The mean-field limit on the circle: a spectral solver of the continuity equation for SA and USA.

n tokens ``theta_i`` on the circle, each with its own Brownian motion of generator
``(sigma^2/2) d^2/dtheta^2`` (:func:`riemattn.solvers.sde.integrate_sde` on ``Sphere(1)``), move by
GLPR eq. (7.1). As n grows their empirical measure follows a density rho(t, theta) (on [0, 2 pi),
``int rho = 1``) solving

.. math:: \partial_t \rho + \partial_\theta (\rho\, v[\rho]) = \frac{\sigma^2}{2} \partial_\theta^2 \rho,

.. math:: v[\rho](\theta) = \frac{1}{Z[\rho](\theta)} \int e^{\beta \cos(\theta' - \theta)} \sin(\theta' - \theta)\, \rho(\theta')\, d\theta'

with ``Z = 1`` for USA and ``Z = int e^{beta cos(theta' - theta)} rho(theta') dtheta'`` for SA.

Discretisation: rho on N equispaced angles, its discrete Fourier coefficients ``rho_k``
(``rho(theta) = sum_k rho_k e^{i k theta}``). The kernels are convolutions with exact Fourier
coefficients (modified Bessel functions): ``v_k = i pi (I_{k-1}(beta) - I_{k+1}(beta)) rho_k``
(numerator) and ``Z_k = 2 pi I_k(beta) rho_k``; the product rho v and the quotient by Z are taken on
the grid. Time stepping: the exponential time differencing RK4 of Cox and Matthews (the diffusion
``-sigma^2 k^2 / 2`` exactly, the transport explicitly; the phi-functions by Kassam and Trefethen's
contour integrals), fourth order in time; its fixed points are exactly the stationary states of the
spatial discretisation, so long-time integration and :func:`CircleDensity.stationary_state` agree
to round-off. The k = 0 mode of ``d/dtheta (rho v)`` is zero, so
the mass is conserved to round-off. The solution is analytic for analytic data, and the Fourier
coefficients of the kernels decay like ``(beta/2)^k / k!``: the error decays exponentially in N
(docs/noise.md shows it).

Stationary states: the velocity is a gradient, ``v = d/dtheta Phi`` with ``Phi = (1/beta) int
e^{beta cos(theta - theta')} rho(theta') dtheta'`` (USA) or ``Phi = (1/beta) log Z`` (SA), so a
stationary state has zero flux, ``rho v = (sigma^2/2) rho'``, i.e. ``rho = exp(2 Phi[rho] /
sigma^2) / norm``; :meth:`CircleDensity.stationary_state` solves this self-consistency by Newton's method on the
grid values (at beta = 0 both models have ``Phi = int cos(theta - theta') rho(theta') dtheta'``, the
Kuramoto model).

References
----------
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers", section 3
(the continuity equation), eq. (7.1), Problem 7. S. M. Cox,
P. C. Matthews, "Exponential time differencing for stiff systems", J. Comput. Phys. 176 (2002),
eq. (26)-(29); A.-K. Kassam, L. N. Trefethen, "Fourth-order time-stepping for stiff PDEs", SIAM J.
Sci. Comput. 26 (2005).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from .._validation import as_float_array, check_beta, check_choice, check_finite, check_int, check_memory, \
    check_nonnegative, check_positive, check_size
from ..errors import IntegrationError, ValidationError
from ._stability import critical_noise, uniform_growth_rate  # documented here

__all__ = ["CircleDensity", "DensityTrajectory", "uniform", "order_parameter", "fourier_moments", "particle_moments",
           "critical_noise", "uniform_growth_rate"]


def uniform(N: int) -> np.ndarray:
    """The uniform density 1 / (2 pi) on N grid angles, shape (N,); 4 <= N <= 2**31 - 1, in memory."""
    N = check_size(N, "N", 4)
    check_memory((N,), "N")
    return np.full(N, 1.0 / (2.0 * math.pi))


def grid(N: int) -> np.ndarray:
    """The grid angles 2 pi j / N, j = 0..N-1; 4 <= N <= 2**31 - 1, in memory."""
    N = check_size(N, "N", 4)
    check_memory((N,), "N")
    return 2.0 * math.pi * np.arange(N) / N


def fourier_moments(rho, kmax: int = 1) -> np.ndarray:
    """mu_k = ``int e^{i k theta} rho(theta) dtheta`` for k = 1..kmax of a density on the grid
    (complex, shape (..., kmax)).

    Parameters
    ----------
    rho : array_like, shape (..., N)
        Values of a probability density on the N grid angles ``2 pi j / N`` (``CircleDensity.theta``):
        ``int rho = (2 pi / N) sum_j rho_j = 1`` is checked to 1e-6 (ValidationError otherwise). For
        particle angles use :func:`particle_moments`.
    kmax : int, 1 <= kmax <= 2**31 - 1
        With the result (shape (..., kmax), complex) fitting in memory (ValidationError otherwise).

    Notes
    -----
    The sum ``(2 pi / N) sum_j e^{i k theta_j} rho_j`` is the trapezoidal rule, exact for the
    trigonometric polynomials of degree < N - k. Sign convention: mu_k = int e^{+i k theta}, the
    moment whose particle estimate is :func:`particle_moments`; mu_1 is the complex order parameter
    (Kuramoto's r e^{i psi}). The Fourier coefficient int e^{-i k theta} d mu used in the
    metastability literature (Bruno, Pasqualotto, Agazzi, arXiv 2410.23228) is its complex
    conjugate, mu_{-k}; moduli agree.
    """
    rho = check_finite(as_float_array(rho, "rho"), "rho")
    kmax = check_size(kmax, "kmax", 1)
    check_memory(rho.shape[:-1] + (kmax,), "kmax", 16)
    if rho.ndim < 1 or rho.shape[-1] < 2:
        raise ValidationError(f"rho must have shape (..., N) with N >= 2 grid values, got shape {rho.shape}.")
    N = rho.shape[-1]
    mass = rho.sum(axis=-1) * (2.0 * math.pi / N)
    if rho.size and not np.all(np.abs(mass - 1.0) <= 1e-6):
        worst = float(np.max(np.abs(mass - 1.0)))
        raise ValidationError(
            f"rho must be a probability density on the grid 2 pi j / N (int rho = 1, to 1e-6), got int rho off "
            f"by {worst:.3g}; for particle angles theta_i use particle_moments(theta, kmax)."
        )
    c = np.fft.fft(rho, axis=-1) * (2.0 * math.pi / N)  # c_k = int e^{-i k theta} rho
    return np.conj(c[..., np.arange(1, kmax + 1) % N])


def particle_moments(theta, kmax: int = 1, axis: int = -1) -> np.ndarray:
    """mu_k = mean_i e^{i k theta_i} of particle angles, k = 1..kmax (complex, shape (..., kmax)).

    The empirical measure's :func:`fourier_moments` (same sign convention: e^{+i k theta}, the
    complex conjugate of the metastability papers' int e^{-i k theta} d mu); |mu_1| is the
    order parameter of the particles, 1 for coincident particles and 0 for k equally spaced ones.

    Parameters
    ----------
    theta : array_like, shape (..., n) (n along ``axis``)
        Particle angles in radians (any real values; e.g. ``riemattn.dynamics.circle.from_points``
        of tokens on the circle).
    kmax : int, 1 <= kmax <= 2**31 - 1
        With the result (shape (..., kmax), complex) fitting in memory (ValidationError otherwise).
    axis : int
        The particles' axis (removed; the k axis is appended last).
    """
    theta = check_finite(as_float_array(theta, "theta"), "theta")
    kmax = check_size(kmax, "kmax", 1)
    check_memory(theta.shape + (kmax,), "kmax", 16)
    if theta.ndim < 1 or not -theta.ndim <= check_int(axis, "axis") < theta.ndim or theta.shape[axis] == 0:
        raise ValidationError(f"theta must hold at least one particle angle along axis {axis}, got shape {theta.shape}.")
    theta = np.moveaxis(theta, axis, -1)
    k = np.arange(1, kmax + 1)
    return np.exp(1j * theta[..., None, :] * k[:, None]).mean(axis=-1)


def order_parameter(rho) -> np.ndarray:
    """|int e^{i theta} rho(theta) dtheta| of a density on the grid, shape (...): 0 for the uniform
    density, 1 for a Dirac mass (for particles: ``abs(particle_moments(theta)[..., 0])``)."""
    return np.abs(fourier_moments(rho, 1)[..., 0])


class DensityTrajectory:
    """Result of :meth:`CircleDensity.solve`: ``t`` (m,), ``rho`` (m, N) on the grid ``theta`` (N,)."""

    def __init__(self, t, rho, theta):
        self.t, self.rho, self.theta = t, rho, theta

    def __repr__(self) -> str:
        return f"DensityTrajectory(m={len(self.t)}, N={self.theta.size})"


class CircleDensity:
    """The continuity equation of (SA) or (USA) on the circle, with noise, on N Fourier modes.

    Parameters
    ----------
    beta : float, >= 0
        Inverse temperature (GLPR's beta); 0 is the Kuramoto model.
    model : {"sa", "usa"}
    sigma : float, >= 0
        Noise strength: each token's angle has the generator ``(sigma^2/2) d^2/dtheta^2``.
    N : int, 8 <= N <= 2**31 - 1
        Grid points: Fourier modes |k| <= (N - 1) / 2 for odd N; for even N, -N/2 .. N/2 - 1 with
        the Nyquist mode k = N/2 kept at zero (its derivative is not a real trigonometric
        polynomial on the grid). Odd and even N converge to the same solution.

    Notes
    -----
    Densities are arrays (..., N) of values on ``theta``; leading axes are independent.
    USA's kernel grows like e^beta (beta <= 700); SA uses exponentially scaled Bessel functions.

    References
    ----------
    GLPR, section 3 and eq. (7.1); the module docstring gives the discretisation.
    """

    def __init__(self, beta: float = 1.0, model: str = "sa", sigma: float = 0.0, N: int = 128):
        self.beta = check_beta(beta)
        self.model = check_choice(model, "model", ("sa", "usa"))
        self.sigma = check_nonnegative(sigma, "sigma")
        if not self.sigma < 1e150:  # sigma^2 must be a float
            raise ValidationError(f"sigma must be < 1e150 (sigma^2 overflows), got {self.sigma!r}.")
        self.N = check_size(N, "N", 8)
        check_memory((8, self.N), "N")
        if self.model == "usa" and self.beta > 700:
            raise ValidationError(f"USA's kernel overflows at beta = {self.beta} > 700; use model='sa'.")
        self.theta = grid(self.N)
        k = np.fft.rfftfreq(self.N, 1.0 / self.N)  # 0..N/2
        self.k = k
        scale = 1.0 if self.model == "sa" else math.exp(self.beta)  # SA: ratios, e^-beta scaling is fine
        ive = special.ive
        # numerator N(theta) = int e^{beta cos(theta'-theta)} sin(theta'-theta) rho: N_k = i pi (I_{k-1}-I_{k+1}) rho_k
        self._num = 1j * math.pi * scale * (ive(k - 1, self.beta) - ive(k + 1, self.beta))
        self._den = 2.0 * math.pi * scale * ive(k, self.beta)  # Z_k = 2 pi I_k rho_k
        self._ik = 1j * k
        if self.N % 2 == 0:  # the Nyquist mode: no real derivative on the grid
            self._num[-1] = 0.0
            self._ik[-1] = 0.0
        self._diff = -0.5 * self.sigma**2 * k**2

    # --- the right-hand side ------------------------------------------------------------------
    def velocity(self, rho) -> np.ndarray:
        """v[rho] on the grid, shape (..., N)."""
        r = np.fft.rfft(self._check_rho(rho, "rho"), axis=-1)
        return self._velocity_hat(r)

    def _velocity_hat(self, r):
        num = np.fft.irfft(self._num * r, n=self.N, axis=-1)
        if self.model == "usa":
            return num
        return num / np.fft.irfft(self._den * r, n=self.N, axis=-1)

    def transport(self, r):
        """Fourier coefficients (rfft) of ``-d/dtheta (rho v[rho])`` from those of rho."""
        rho = np.fft.irfft(r, n=self.N, axis=-1)
        return -self._ik * np.fft.rfft(rho * self._velocity_hat(r), axis=-1)

    def rhs(self, rho) -> np.ndarray:
        """``d rho / dt`` on the grid, shape (..., N)."""
        r = np.fft.rfft(self._check_rho(rho, "rho"), axis=-1)
        return np.fft.irfft(self.transport(r) + self._diff * r, n=self.N, axis=-1)

    def growth_rates(self, kmax: int = 4) -> np.ndarray:
        """Eigenvalues lambda_k, k = 1..kmax, of the linearisation about the uniform density, computed
        from this discretisation (finite differences of :meth:`rhs` along cos(k theta)).

        ``kmax`` is at most N // 2, the modes the grid resolves (ValidationError otherwise)."""
        kmax = check_size(kmax, "kmax", 1)
        if kmax > self.N // 2:
            raise ValidationError(f"kmax must be <= N // 2 = {self.N // 2} (the modes the grid of N = {self.N} "
                                  f"points resolves), got {kmax}.")
        eps = 1e-7
        u = uniform(self.N)
        out = []
        for kk in range(1, kmax + 1):
            p = np.cos(kk * self.theta)
            drho = (self.rhs(u + eps * p) - self.rhs(u - eps * p)) / (2 * eps)
            out.append(float(drho @ p / (p @ p)))
        return np.array(out)

    # --- time stepping --------------------------------------------------------------------------
    def _check_rho(self, rho, name="rho0"):
        rho = check_finite(as_float_array(rho, name), name)
        if rho.ndim < 1 or rho.shape[-1] != self.N:
            raise ValidationError(f"{name} must have shape (..., {self.N}) (values on the grid), got {rho.shape}.")
        return rho

    def solve(self, rho0, t_span, dt: float = 0.01, saveat=None, *, max_steps: int = 1_000_000) -> DensityTrajectory:
        """Integrate from ``rho0`` (values on ``theta``, shape (..., N)) with ETDRK4, fixed step <= dt.

        At most ``max_steps`` steps (default 10^6): a ``dt`` that needs more over ``t_span`` raises
        ValidationError naming dt and max_steps, before any step.

        Returns
        -------
        DensityTrajectory
            ``t`` (m,) = ``saveat`` (default t0 and t1), ``rho`` (m, ..., N).
        """
        rho0 = self._check_rho(rho0)
        span = check_finite(as_float_array(t_span, "t_span"), "t_span")
        if span.shape != (2,):
            raise ValidationError(f"t_span must be two times (t0, t1), got shape {span.shape}.")
        t0, t1 = float(span[0]), float(span[1])
        if not t1 >= t0:
            raise ValidationError(f"t_span must be finite with t0 <= t1, got {t_span!r}.")
        dt = check_positive(dt, "dt")
        save = np.array([t0, t1]) if saveat is None else check_finite(as_float_array(saveat, "saveat"), "saveat")
        if save.ndim != 1 or not save.size or np.any(np.diff(save) < 0) or save[0] < t0 or save[-1] > t1:
            raise ValidationError(f"saveat must be increasing times within [{t0}, {t1}], got {saveat!r}.")
        max_steps = check_size(max_steps, "max_steps", 1)
        need = sum(max(1, math.ceil((b - a) / dt - 1e-9)) for a, b in zip([t0, *save[:-1]], save) if b > a)
        if need > max_steps:
            raise ValidationError(f"dt = {dt!r} needs {need:.3g} steps over t_span = ({t0}, {t1}), more than "
                                  f"max_steps = {max_steps}; a larger dt (or max_steps).")
        r = np.fft.rfft(rho0, axis=-1)
        out, t = [], t0
        for target in save:
            n = max(1, math.ceil((target - t) / dt - 1e-9)) if target > t else 0
            h = (target - t) / n if n else 0.0
            if n:
                coef = self._etd_coefficients(h)
                for _ in range(n):
                    r = self._etdrk4(r, h, coef)
                if not np.all(np.isfinite(r)):
                    raise IntegrationError(f"the density became NaN or inf before t = {target} (dt too large?).")
            t = target
            out.append(np.fft.irfft(r, n=self.N, axis=-1))
        return DensityTrajectory(save, np.stack(out), self.theta)

    def _etd_coefficients(self, h):
        """E, E2, Q, f1, f2, f3 of ETDRK4 for the diagonal L = -sigma^2 k^2 / 2 (Kassam-Trefethen contour)."""
        L = self._diff * h
        r = np.exp(1j * math.pi * (np.arange(1, 33) - 0.5) / 32)
        LR = L[:, None] + r[None, :]
        Q = h * np.real(np.mean((np.exp(LR / 2) - 1) / LR, axis=1))
        f1 = h * np.real(np.mean((-4 - LR + np.exp(LR) * (4 - 3 * LR + LR**2)) / LR**3, axis=1))
        f2 = h * np.real(np.mean((2 + LR + np.exp(LR) * (LR - 2)) / LR**3, axis=1))
        f3 = h * np.real(np.mean((-4 - 3 * LR - LR**2 + np.exp(LR) * (4 - LR)) / LR**3, axis=1))
        return np.exp(L), np.exp(L / 2), Q, f1, f2, f3

    def _etdrk4(self, v, h, coef):
        E, E2, Q, f1, f2, f3 = coef
        f = self.transport
        Nv = f(v)
        a = E2 * v + Q * Nv
        Na = f(a)
        b = E2 * v + Q * Na
        Nb = f(b)
        c = E2 * a + Q * (2 * Nb - Nv)
        return E * v + f1 * Nv + 2 * f2 * (Na + Nb) + f3 * f(c)

    # --- stationary states ----------------------------------------------------------------------
    def potential(self, rho) -> np.ndarray:
        """Phi[rho] with v = dPhi/dtheta (up to a constant), shape (..., N); rho >= 0 (a density: SA's
        log Z is NaN otherwise, so negative values raise ValidationError)."""
        rho = self._check_rho(rho, "rho")
        if np.any(rho < 0):
            raise ValidationError(f"rho must be a density (>= 0 on the grid), got a minimum of {float(rho.min())!r}.")
        r = np.fft.rfft(rho, axis=-1)
        if self.beta == 0.0:
            return np.fft.irfft(math.pi * (self.k == 1) * r, n=self.N, axis=-1)  # int cos(theta - theta') rho
        Z = np.fft.irfft(self._den * r, n=self.N, axis=-1)
        if self.model == "sa":
            return np.log(Z) / self.beta
        return Z / self.beta

    def stationary_state(self, guess=None, *, tol: float = 1e-12, picard: int = 200) -> np.ndarray:
        """A stationary density: ``rho = exp(2 Phi[rho] / sigma^2) / norm``, solved directly.

        The rotations make every stationary state one of a circle of them; the solution is sought
        among densities symmetric about theta = 0 (``rho(-theta) = rho(theta)``, which fixes the
        phase), by ``picard`` damped fixed-point iterations from ``guess`` followed by Newton's
        method (SciPy's ``hybr``) on the log-density.

        Parameters
        ----------
        guess : array_like, shape (N,), optional
            Start (default: the von Mises bump ``exp(kappa cos theta)``, ``kappa = 2 / sigma^2``);
            the uniform density is always a solution, the guess selects the branch (symmetrised).
        tol : float
            Tolerance on the max residual ``|log rho - (2 Phi / sigma^2 - log norm)|``.
        picard : int, 0 <= picard <= 100_000
            Fixed-point iterations before Newton.

        Returns
        -------
        ndarray, shape (N,)
            The density on ``theta``; its maximum is at theta = 0 unless it is uniform.
        """
        tol = check_positive(tol, "tol")
        if self.sigma == 0.0:
            raise ValidationError("stationary_state needs sigma > 0 (without noise the stationary states are "
                                  "Dirac masses).")
        dth = 2.0 * math.pi / self.N
        if guess is None:
            guess = np.exp(2.0 / self.sigma**2 * np.cos(self.theta))
        guess = self._check_rho(guess, "guess")
        if guess.ndim != 1 or np.any(guess <= 0):
            raise ValidationError("guess must be one positive density of shape (N,).")
        half = self.N // 2 + 1
        j = np.arange(self.N)
        mirror = np.minimum(j, self.N - j)  # theta_j -> its value at -theta_j = theta_{N - j}

        def full(u):  # log-density on the grid from its values at theta in [0, pi]
            return u[mirror]

        def F(u):  # the fixed-point map on the half grid
            phi = 2.0 * self.potential(np.exp(full(u))) / self.sigma**2
            phi = phi - phi.max()
            return (phi - np.log(np.exp(phi).sum() * dth))[:half]

        g = np.log(guess / (guess.sum() * dth))
        u = ((g + g[mirror]) / 2)[:half]
        for _ in range(check_size(picard, "picard", 0, 100_000)):
            u = 0.5 * u + 0.5 * F(u)
        sol = optimize.root(lambda u: u - F(u), u, method="hybr", tol=tol * 1e-3)
        res = float(np.max(np.abs(sol.x - F(sol.x))))
        if not res <= tol:
            raise IntegrationError(f"stationary_state did not converge (residual {res:.3g}: {sol.message}).")
        return np.exp(full(sol.x))

    def __repr__(self) -> str:
        return f"CircleDensity(beta={self.beta}, model={self.model!r}, sigma={self.sigma}, N={self.N})"
