"""``integrate(..., engine=...)``: which engine runs a call.

``"numpy"``: the NumPy engine. ``"compiled"``: the compiled engine, or
:class:`~riemattn.errors.UnsupportedByEngine` naming what in the call it cannot run. ``"auto"``
(the default): the compiled engine when it supports the call and its loops are ready (compiled in
this process, or in numba's on-disk cache), else the NumPy engine -- so a first call never waits
for a compilation. The environment variable ``RIEMATTN_ENGINE`` changes what ``"auto"`` means:
``compiled`` -- the compiled engine wherever it supports the call (compiling on first use);
``numpy`` -- never the compiled engine.
"""

from __future__ import annotations

import os

from ...errors import IntegrationError, UnsupportedByEngine, ValidationError

ENGINES = ("auto", "numpy", "compiled")
ENV = "RIEMATTN_ENGINE"


def check_engine(engine) -> str:
    if not isinstance(engine, str) or engine not in ENGINES:
        raise ValidationError(f"engine must be one of {list(ENGINES)}, got {engine!r}.")
    return engine


def _preference() -> str:
    value = os.environ.get(ENV, "").strip().lower()
    return value if value in ("compiled", "numpy") else ""


def ready(adaptive: bool) -> bool:
    """Whether the compiled loop a call would use is compiled in this process or in numba's cache
    (loading it from the cache takes a fraction of a second; compiling it, tens of seconds)."""
    try:
        if adaptive:
            from ._adaptive import solve_rows as loop
        else:
            from ._fixed import fixed_rows as loop
        if loop.signatures:
            return True
        # numba's index of cached compilations of this function, empty when stale (the engine's
        # code changed since: riemattn.dynamics._kernel_cache) or absent
        return bool(loop._cache._cache_file._load_index())
    except Exception:  # noqa: BLE001 -- a numba without these internals: never auto-compile
        return False


def dispatch(engine, field, step, y0, t0, t1, dt, rtol, atol, first_step, saveat, max_steps, events, event_tol,
             save_fn, progress, dense_output, raise_on_failure):
    """The compiled engine's Trajectory for this call (arguments validated by integrate), or None:
    run the NumPy engine."""
    engine = check_engine(engine)
    if engine == "numpy":
        return None
    preference = _preference()
    if engine == "auto" and preference == "numpy":
        return None
    from . import _engine

    why, pack = _engine.unsupported(field, step, y0, save_fn=save_fn, events=events or (), progress=progress,
                                    dense_output=dense_output)
    if why:
        if engine == "compiled":
            raise UnsupportedByEngine(
                "engine='compiled' cannot run this call: " + "; ".join(why)
                + ". Use engine='numpy' (or 'auto', which falls back to it).")
        return None
    if engine == "auto" and preference != "compiled" and not ready(step.adaptive):
        return None
    sol = _engine.run(field, step, y0, t0, t1, dt=dt, rtol=rtol, atol=atol, first_step=first_step,
                      saveat=saveat, max_steps=max_steps, events=events or (), event_tol=event_tol, pack=pack)
    if raise_on_failure and not sol.success:
        raise IntegrationError(sol.message)
    return sol
