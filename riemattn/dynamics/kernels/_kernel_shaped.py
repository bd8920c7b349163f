"""Field kernels specialised to the tokens' shape (private): ``evaluate`` with l and d as constants.

:func:`~riemattn.dynamics.kernels.evaluate` reads the tokens' shape (l, d) at run time, so its
loops over tokens and components have run-time trip counts. :func:`shaped` compiles the same code
(:func:`~riemattn.dynamics.kernels.attention_at`, the attention field without a layer-norm
placement) once more with l and d as compile-time constants, for one shape: LLVM then unrolls the
short loops over components and vectorises the ones over tokens. The operations, and their order,
are the generic kernel's (no ``fastmath``), so the results are the same bits
(``tests/dynamics/test_kernel_shaped.py``); only the speed differs. Measured on the 2-core
development machine (one call in a compiled loop, 2026-11-27; docs/performance.md): the hemisphere
field (10 x 3, two time-varying heads) 2.09 -> 1.75 us, ``usa(9, 3)`` at 6 x 3 0.68 -> 0.57 us
(its lifted Jacobian 3.15 -> 1.38 us), softmax 8 x 4 0.90 -> 0.65 us; 16 x 8 within noise, 32 x 8
and 32 x 16 5-10 % slower (longer unrolled code). Hence only shapes with l d <=
:data:`SHAPED_MAX_SIZE`.

The compiled engine passes a kernel to its loops as a pointer (``solvers/compiled/_kernel.py``),
so a specialised kernel needs no recompilation of any loop. Each shape costs one compilation
(seconds), cached on disk like the rest of the engine, under a name of its own
(``evaluate_shaped_<l>x<d>``: the loops find a kernel's code by its name, see :func:`shaped`).
The engine uses it only once it is compiled in the process or found in the cache for this CPU
(:func:`ready`); until then it runs the generic kernel and compiles the shape in a background
process (``riemattn.solvers.compiled._background.start_shape``), or ``ra.warmup(shapes=...)``
compiles it now.
"""

from __future__ import annotations

import functools

from . import attention_at
from ._kernel_cache import jit
from ._kernel_layout import KIND, KIND_ATTENTION, PL_POST, PLACEMENT

#: specialise tokens of at most this many numbers, l d (measured above: faster up to 10 x 3 and 8 x 4,
#: no gain at 16 x 8, slower from 32 x 8)
SHAPED_MAX_SIZE = 64


def applies(ints, l: int, d: int) -> bool:
    """Whether a pack (its ``ints``) and token shape have a specialised kernel: the attention field
    without a layer-norm placement, l d <= :data:`SHAPED_MAX_SIZE`."""
    return (int(ints[KIND]) == KIND_ATTENTION and int(ints[PLACEMENT]) == PL_POST
            and 1 <= l * d <= SHAPED_MAX_SIZE)


@functools.lru_cache(maxsize=None)
def shaped(l: int, d: int):
    """The kernel ``evaluate_shaped(op, t, y, b, ints, floats, per, work, out)`` for tokens (l, d):
    ``evaluate``'s signature and results, for attention packs without placement (:func:`applies`).
    Not compiled here: numba compiles (or loads) it at its first use or in :func:`ready`."""
    l, d = int(l), int(d)

    def evaluate_shaped(op, t, y, b, ints, floats, per, work, out):
        attention_at(op, t, y, b, ints, floats, per, work, out, l, d)

    # A name of its own per shape. numba names machine code after the function's qualified name and
    # a counter of the process that compiled it, and the engine finds a kernel's code by that name
    # in the process's one JIT (numba's first-class function pointer): two shapes compiled by two
    # background processes had the same name, and once both were loaded, every call of the first
    # ran the code last loaded (a NaN or a wrong size error; test_two_shapes_from_two_processes_*).
    evaluate_shaped.__name__ = evaluate_shaped.__qualname__ = f"evaluate_shaped_{l}x{d}"
    return jit(evaluate_shaped)


def ready(l: int, d: int, sig) -> bool:
    """Whether the kernel for (l, d) is compiled in this process, or in numba's on-disk cache for
    this CPU (then it is loaded now, a few milliseconds), for the numba signature ``sig`` (the
    loops' type of a kernel, ``solvers/compiled/_kernel.py``); never compiles."""
    disp = shaped(l, d)
    if tuple(sig.args) in disp.overloads:
        return True
    try:
        if disp._cache.load_overload(sig, disp.targetctx) is None:  # (numba's cache lookup, no compilation)
            return False
    except Exception:  # noqa: BLE001 -- no cache, or a numba without these internals: not ready
        return False
    disp.compile(sig)  # found: loads it (again) and registers it
    return True


def compile_now(l: int, d: int, sig) -> None:
    """Compile (or load from the cache) the kernel for (l, d) and the numba signature ``sig`` in this process."""
    shaped(l, d).compile(sig)
