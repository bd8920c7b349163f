"""Many tokens: when the compiled engine streams the attention, and on which threads (private).

Above :data:`STREAM_MIN_TOKENS` tokens the compiled engine's explicit steppers evaluate the field
with the streamed kernel (:mod:`riemattn.dynamics.kernels._kernel_stream`: no (h, l, l) matrix,
scratch O(l d)) instead of ``kernels.evaluate``. Its threads: over the trajectories (each
trajectory on one thread, as for small problems) where that keeps the threads busy, else each
evaluation's query tiles on numba's threads (``prange``) and the trajectories one after another,
by the measured rule of :func:`streamed`. Both give the same bits (every row's sums in the order of
the keys). The Rosenbrock steppers and ``"auto"`` (an (l d, l d) Jacobian) are not streamed.
"""

from __future__ import annotations

import math

from ...dynamics.kernels._kernel_layout import STREAM_TILES

#: tokens from which the streamed kernel runs. Measured on the 2-core development machine
#: (2026-11-29, load 4.2 from other sessions, one evaluation of one trajectory on one thread, best of 5,
#: softmax, one head of random P / sqrt(d), streamed / generic kernel time): d = 3: 0.89 at l = 16,
#: 0.51 at 64, 0.35 at 256, 0.33 at 512; d = 8: 0.92, 0.66, 0.43, 0.39; d = 32: 1.97 at 16, 1.03 at
#: 128, 0.94 at 256, 0.62 at 512. From 256 tokens it was faster in every measured case; below, the
#: generic kernel (and the shaped kernels and lanes of small problems) keeps its bits.
STREAM_MIN_TOKENS = 256
#: query tiles on numba's threads when running the trajectories one per thread would keep fewer
#: than this share of the threads busy (B / (n ceil(B / n))): the parallel efficiency of the query
#: tiles for one trajectory, the smallest measured (2026-11-29, 2 cores, load 1.6, rk4 steps of SA on
#: S^2 through integrate, best of 3 alternations: 0.88 at 256 tokens, 0.91 at 1000, 0.96 at 4000;
#: dopri5 0.95 at 4000 and 16 000, an evaluation 0.97 at 10^5; docs/performance.md, "Many tokens")
TILES_EFFICIENCY = 0.88
#: ints[STREAM_TILES] values: not streamed, streamed on the calling thread, query tiles on numba's threads
OFF, ROWS, TILES = 0, 1, 2


def applies(step, pack) -> bool:
    """Whether a call streams the attention: an explicit stepper, a pack with a streamed form,
    at least :data:`STREAM_MIN_TOKENS` tokens."""
    from ...dynamics.kernels._kernel_stream import stream_supported
    from . import _tables

    kind = _tables.SUPPORTED[step.name][1]
    return (kind not in (_tables.ROSENBROCK, _tables.AUTO) and pack.l >= STREAM_MIN_TOKENS
            and stream_supported(pack.ints))


def streamed(step, pack, batch_size, n_threads) -> int:
    """:data:`OFF`, :data:`ROWS` (the trajectories one per thread, each evaluation on its thread)
    or :data:`TILES` (the trajectories one after another, each evaluation's query tiles on the
    ``n_threads`` threads): TILES where the trajectories one per thread would keep less than
    :data:`TILES_EFFICIENCY` of the threads busy."""
    if not applies(step, pack):
        return OFF
    n, B = max(1, n_threads), max(1, batch_size)
    return TILES if n > 1 and B / (n * math.ceil(B / n)) < TILES_EFFICIENCY else ROWS



def most(ints):
    """The largest number of worker threads for the trajectories (``_threads.in_threads``): one where
    the query tiles take numba's threads, else no limit."""
    return 1 if int(ints[STREAM_TILES]) == TILES else None


def work_length(ints, l, d) -> int:
    """The scratch of one streamed evaluation (``_kernel_stream.stream_work_length``)."""
    from ...dynamics.kernels._kernel_stream import stream_work_length

    return stream_work_length(ints, l, d)
