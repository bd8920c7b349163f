"""The stiff ensemble of ``benchmarks/gpu_ensemble.py --stiff``: USA at beta = 9, rodas4 on the GPU against the CPU.

Issue 56, item 4: low-temperature phase diagrams are stiff ensembles. The problem: GLPR's USA
(``riemattn.usa(9.0, 3)``, unnormalised attention at beta = 9) for 10 tokens on S^2, each
trajectory's tokens a cap of spread 0.3 around its own random pole (seeded; the first 16 are the
same at every B), T = 1 (T = 0.2 in ``--smoke``). The tokens collapse into one cluster, where the
in-cluster rates are ~e^beta: dopri5 is stability-bound (measured on the compiled engine at rtol
= atol = 1e-7, the 16 reference trajectories, T = 1: at most 2499 steps, against 156 for rodas4,
which meets the target 1e-7 there: error 1.5e-9; at 1e-6 one of the 16 ends 1.05 away). References: SciPy DOP853 at rtol = atol = 1e-13 (an explicit method,
stability-bound but accurate; a trial stage far off the sphere, where the weights overflow, is
given inf and rejected), final tokens renormalised, as the hemisphere references (they agree with
riemattn's projected dop853 at 1e-13 to 1e-13).

Contenders (each in its own process, as in gpu_ensemble.py):

- ``riemattn-cuda-rodas4``: ``integrate(..., "rodas4", engine="cuda")`` (the generated Rosenbrock
  kernel, ``riemattn.solvers.compiled.cuda._ros``; float64);
- ``compiled-cpu-rodas4``: the same call with ``engine="compiled"`` (every core of the machine);
- ``riemattn-cuda-auto``, ``compiled-cpu-auto``: the same with ``"auto"`` (dopri5 until the stiffness
  test switches to rodas4p: ``riemattn.solvers.compiled.cuda._autoloop`` on the GPU).

Equal measured error: each finds the loosest tolerance of :data:`LADDER` whose error on the
references is <= :data:`TARGET` (the same algorithm on both: the same tolerance), then times
every B. The target of issue 56: the GPU at least :data:`SPEEDUP` times the CPU engine at
B = 10^4 (checked when both are measured at that B).
"""

from __future__ import annotations

import time
import warnings

import numpy as np

BETA, L, D, SPREAD = 9.0, 10, 3, 0.3
TARGET = 1e-7
LADDER = (1e-5, 1e-6, 1e-7, 1e-8, 1e-9)
CONTENDERS = ("riemattn-cuda-rodas4", "compiled-cpu-rodas4", "riemattn-cuda-auto", "compiled-cpu-auto")
SIZES = "16,10000,100000"
SPEEDUP, SPEEDUP_B = 5.0, 10_000


def initial(B, seed=0):
    """B trajectories of L tokens on S^2: caps of spread SPREAD around random poles."""
    g = np.random.default_rng(seed).normal(size=(B, L + 1, D))  # row b: its pole, then its tokens' offsets
    pole = g[:, :1] / np.linalg.norm(g[:, :1], axis=-1, keepdims=True)  # (the first rows the same at every B)
    y = pole + SPREAD * g[:, 1:]
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def references(T, n):
    from scipy.integrate import solve_ivp

    import riemattn as ra

    field = ra.usa(BETA, D)

    def rhs(t, x):  # a trial stage far off the sphere overflows the weights: inf, and SciPy rejects the step
        try:
            return field(t, x.reshape(L, D)).ravel()
        except ra.ValidationError:
            return np.full(x.shape, np.inf)

    y0 = initial(n)
    out = np.empty_like(y0)
    for b in range(n):
        with np.errstate(invalid="ignore"), warnings.catch_warnings():  # (SciPy's sums of the inf stages)
            warnings.simplefilter("ignore", RuntimeWarning)
            sol = solve_ivp(rhs, (0, T), y0[b].ravel(), method="DOP853", rtol=1e-13, atol=1e-13)
        assert sol.success, sol.message
        out[b] = sol.y[:, -1].reshape(L, D)
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def method(name):
    """The stepper of a contender: the last part of its name (rodas4, auto)."""
    return name.rsplit("-", 1)[1]


def runner(engine, T, n_ref, stepper="rodas4"):
    """run(y0, tol) -> (seconds, final tokens of the first n_ref trajectories, success)."""
    import riemattn as ra

    field = ra.usa(BETA, D)

    def run(y0, tol):
        t0 = time.perf_counter()
        sol = ra.integrate(field, y0, (0.0, T), stepper, rtol=tol, atol=tol, saveat=[T], engine=engine)
        return time.perf_counter() - t0, np.asarray(sol.y[-1][:n_ref], dtype=float), sol.success
    return run


def speedup(results):
    """(CPU seconds / GPU seconds at SPEEDUP_B, or None when not both measured there)."""
    at = {r["contender"]: r["seconds"] for r in results if r.get("B") == SPEEDUP_B and "seconds" in r}
    if not all(c in at for c in CONTENDERS):
        return None
    return at["compiled-cpu-rodas4"] / at["riemattn-cuda-rodas4"]
