"""Eight query rows as one LLVM vector: the score and weighted-sum passes of the streamed kernel (private).

The streamed attention kernel (:mod:`riemattn.dynamics.kernels._kernel_stream`) takes the queries
eight at a time, one per lane of a ``<8 x double>`` vector (the layout of
:mod:`riemattn.dynamics.kernels._kernel_simd`, whose intrinsics it also uses), and a tile of keys
at a time. A tile's scores are stored key-major, ``S[8 j + r]`` = the score of query r of the
block against key j of the tile, so that each key gives one vector. The two passes here read a
key's components as scalars broadcast to the eight lanes.

Plain IEEE operations lane by lane (no fast-math flags: no reassociation, no fused multiply-add),
each lane's sums adding their terms in a fixed order: a lane's bits do not depend on which other
queries share its vector, nor on the thread that runs it.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._kernel_simd import _F64, _I64, _VEC, _load, _splat, _store


def _scalar(context, builder, aty, arr, off):
    """arr[off] (a float64 of a 1-D C-contiguous array) broadcast to the eight lanes."""
    data = context.make_array(aty)(context, builder, arr).data
    return _splat(builder, builder.load(builder.gep(data, [off])))


@intrinsic
def v_scores(typingctx, S, rs, Q, rq, Y, ry, d, n):
    """For the n keys j of a tile: S[rs + 8 j : +8] = sum_{c < d} Q[rq + 8 c : +8] * Y[ry + j d + c],
    the sum adding its terms in the order c = 0, 1, ... to 0.0 (the eight queries' q vectors,
    component-major, against key j of the row-major tokens Y)."""
    def codegen(context, builder, sig, args):
        s_, rs_, q_, rq_, y_, ry_, d_, n_ = args
        ty = sig.args
        eight = ir.Constant(_I64, 8)
        with cgutils.for_range(builder, n_) as keys:
            j = keys.index
            yj = builder.add(ry_, builder.mul(j, d_))
            acc = cgutils.alloca_once(builder, _VEC)
            builder.store(_splat(builder, ir.Constant(_F64, 0.0)), acc)
            with cgutils.for_range(builder, d_) as comps:
                c = comps.index
                qc = _load(context, builder, ty[2], q_, builder.add(rq_, builder.mul(c, eight)))
                yc = _scalar(context, builder, ty[4], y_, builder.add(yj, c))
                builder.store(builder.fadd(builder.load(acc), builder.fmul(qc, yc)), acc)
            _store(context, builder, ty[0], s_, builder.add(rs_, builder.mul(j, eight)), builder.load(acc))
    return types.void(S, rs, Q, rq, Y, ry, d, n), codegen


def _wsum(J):
    """The intrinsic ``v_wsum{J}(A, ra, E, re, Y, ry, c0, d, n)``: for k < J, A[ra + 8 (c0 + k) : +8]
    += sum_{j < n} E[re + 8 j : +8] * Y[ry + j d + c0 + k], adding its terms in the order j = 0, 1, ...
    (J components of the eight queries' weighted sums of the tile's values, carried in registers)."""
    def impl(typingctx, A, ra, E, re, Y, ry, c0, d, n):
        def codegen(context, builder, sig, args):
            a_, ra_, e_, re_, y_, ry_, c0_, d_, n_ = args
            ty = sig.args
            eight = ir.Constant(_I64, 8)
            slots = []
            for k in range(J):
                slot = cgutils.alloca_once(builder, _VEC)
                off = builder.add(ra_, builder.mul(builder.add(c0_, ir.Constant(_I64, k)), eight))
                builder.store(_load(context, builder, ty[0], a_, off), slot)
                slots.append((slot, off))
            with cgutils.for_range(builder, n_) as keys:
                j = keys.index
                e = _load(context, builder, ty[2], e_, builder.add(re_, builder.mul(j, eight)))
                base = builder.add(builder.add(ry_, builder.mul(j, d_)), c0_)
                for k, (slot, _) in enumerate(slots):
                    yk = _scalar(context, builder, ty[4], y_, builder.add(base, ir.Constant(_I64, k)))
                    builder.store(builder.fadd(builder.load(slot), builder.fmul(e, yk)), slot)
            for slot, off in slots:
                _store(context, builder, ty[0], a_, off, builder.load(slot))
        return types.void(A, ra, E, re, Y, ry, c0, d, n), codegen

    impl.__name__ = impl.__qualname__ = f"v_wsum{J}"
    return intrinsic(impl)


#: J components of the weighted sums at a time (see :func:`_wsum`)
v_wsum4, v_wsum3, v_wsum2, v_wsum1 = _wsum(4), _wsum(3), _wsum(2), _wsum(1)
