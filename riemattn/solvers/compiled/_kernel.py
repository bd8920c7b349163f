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
from ...dynamics.kernels._kernel_layout import STREAM_TILES
from ...dynamics.kernels._kernel_stream import evaluate_streamed


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


def _fingerprint_fn():
    """numba's own C function that its dispatchers key compiled versions by (``compute_fingerprint``:
    an argument's type as bytes, about 1 us for the ~40 arrays of a loop's arguments against 15 us
    for :func:`_key`), or None where this numba lacks it (not a public API)."""
    try:
        from numba._dispatcher import compute_fingerprint
    except ImportError:  # pragma: no cover -- numba is pinned to a range that has it
        return None
    return compute_fingerprint


_FINGERPRINT = _fingerprint_fn()
_ENTRIES: dict = {}


def _args_key(args):
    """The key of a loop's arguments' types: numba's fingerprint of the tuple (it tells arrays apart
    by dtype, dimensions, layout and writeability; the engine's arrays are its own, aligned,
    copies), or :func:`_key` per argument where the fingerprint is not available or refuses a value."""
    if _FINGERPRINT is not None:
        try:
            return _FINGERPRINT(args)
        except (TypeError, ValueError, NotImplementedError):  # pragma: no cover -- a type numba does not fingerprint
            pass
    return tuple(_key(a) for a in args)


def entry(loop, args):
    """The compiled ``loop`` for ``args`` (whose first is ``evaluate``, passed as a pointer):
    compiled now, or loaded from numba's cache, once per argument types."""
    key = (loop, _args_key(tuple(args[1:])))
    run = _ENTRIES.get(key)
    if run is None:
        import warnings

        import numba

        sig = (evaluate_type(),) + tuple(numba.typeof(a) for a in args[1:])
        with warnings.catch_warnings():  # numba flags the first-class function type as experimental
            warnings.simplefilter("ignore", numba.NumbaExperimentalFeatureWarning)
            run = _ENTRIES[key] = loop.compile(sig)
    return run


#: shapes whose specialised kernel is ready in this process; when one was last found not ready (a
#: cache lookup, repeated at most every NOT_READY_RECHECK seconds)
_READY: set = set()
_NOT_READY: dict = {}
NOT_READY_RECHECK = 1.0


def field_kernel(ints, l, d):
    """The field kernel the loops call for tokens (l, d): the streamed kernel where the engine set
    ``ints[STREAM_TILES]`` (many tokens); the kernel specialised to the shape
    (:mod:`riemattn.dynamics.kernels._kernel_shaped`: the same bits, faster) where it applies and is
    compiled in this process or in the cache; else ``evaluate``, and the shape is compiled in a
    background process for the calls to come (``riemattn.solvers.compiled._background.start_shape``)."""
    import time

    from ...dynamics.kernels import _kernel_shaped as shaped

    l, d = int(l), int(d)
    if int(ints[STREAM_TILES]) != 0:  # many tokens (riemattn.solvers.compiled._stream)
        return evaluate_streamed
    if not shaped.applies(ints, l, d):
        return evaluate
    key = (l, d)
    if key in _READY:
        return shaped.shaped(l, d)
    last = _NOT_READY.get(key)
    if last is None or time.monotonic() - last >= NOT_READY_RECHECK:
        if shaped.ready(l, d, evaluate_type().signature):
            _READY.add(key)
            _NOT_READY.pop(key, None)
            return shaped.shaped(l, d)
        _NOT_READY[key] = time.monotonic()
        from ._background import start_shape

        start_shape(l, d)
    return evaluate
