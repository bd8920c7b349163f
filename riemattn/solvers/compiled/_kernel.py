"""The one place the compiled loops import the field kernels from (:mod:`riemattn.dynamics.kernels`;
importing it installs the engine-wide cache stamp of :mod:`riemattn.dynamics.kernels._kernel_cache` before
any compiled loop is defined), and the door through which the loops call the field.

The loops receive ``kk.evaluate`` as an argument ``fn`` of numba's first-class function type
:func:`evaluate_type` (a pointer to its compiled code), not as a global: numba links the code of a
function called by name into every compiled function that calls it and optimises it again there,
which made each loop (and each step function between it and the field) recompile the whole field
kernel -- most of the engine's compile time. Through the pointer, ``evaluate`` is compiled once
(and cached), and a loop's compilation covers only its own code. :func:`entry` compiles (or
loads from numba's cache) a loop for the argument types of a call with ``fn`` typed that way.
"""

from __future__ import annotations

import functools

import numpy as np

from ...dynamics.kernels import (  # noqa: F401
    BLOCK,
    LIFTED_JAC,
    RHS,
    RHS_DIFF,
    TIME_DERIVATIVE,
    UPDATE,
    evaluate,
    pack_field,
    project,
    to_tangent,
    wnorm,
)


@functools.lru_cache(maxsize=1)
def evaluate_type():
    """numba's type of ``evaluate`` as a first-class function:
    void(op int64, t float64, y (l, d), b int64, ints, floats, per, work, out (l, d) or (n, n))."""
    from numba import types

    A1, A2 = types.Array(types.float64, 1, "C"), types.Array(types.float64, 2, "C")
    return types.FunctionType(types.void(types.int64, types.float64, A2, types.int64,
                                         types.Array(types.int64, 1, "C"), A1, A2, A1, A2))


def _key(a):
    """What numba's type of an argument depends on, cheaply (numba.typeof of the ~40 arrays of a
    loop's arguments costs a quarter of a millisecond, the whole run of a small problem)."""
    if isinstance(a, np.ndarray):
        return (a.dtype.num, a.ndim, a.flags.c_contiguous, a.flags.writeable, a.flags.aligned)
    if isinstance(a, tuple):
        return (type(a),) + tuple(_key(v) for v in a)
    return type(a)


_ENTRIES: dict = {}


def entry(loop, args):
    """The compiled ``loop`` for ``args`` (whose first is ``evaluate``, passed as a pointer):
    compiled now, or loaded from numba's cache, once per argument types."""
    key = (loop, tuple(_key(a) for a in args[1:]))
    run = _ENTRIES.get(key)
    if run is None:
        import warnings

        import numba

        sig = (evaluate_type(),) + tuple(numba.typeof(a) for a in args[1:])
        with warnings.catch_warnings():  # numba flags the first-class function type as experimental
            warnings.simplefilter("ignore", numba.NumbaExperimentalFeatureWarning)
            run = _ENTRIES[key] = loop.compile(sig)
    return run
