"""The CUDA engine of :func:`riemattn.integrate` (``engine="cuda"``): one GPU thread per trajectory.

The whole solve -- stages, error norm, step-size control, saving -- runs inside one numba-cuda
kernel, one thread per trajectory, with no host round trip (the design of DiffEqGPU.jl's
``EnsembleGPUKernel``, Utkarsh et al., 2024). The algorithms are the compiled engine's
(:mod:`riemattn.solvers.compiled`): its tableaux, controller constants and field pack, and the
field's kernel sources compiled again for the GPU (``riemattn.solvers.compiled.cuda._field``).
Steppers: rk4, dopri5, dop853 (``._gen``), and rodas4, rodas4p and auto (the explicit/stiff switch,
``._autoloop``) for tokens of l d <= 64 numbers in float64 (``._ros``: the exact Jacobian and an LU
in per-thread local memory). Every
module here is private and imports numba-cuda; the only door is ``integrate(..., engine="cuda")``.
"""
