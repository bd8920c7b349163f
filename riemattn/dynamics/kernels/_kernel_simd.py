"""Eight float64 lanes as one LLVM vector: the operations of the lane kernels (private).

numba compiles with LLVM's SLP vectoriser off (``NUMBA_SLP_VECTORIZE=0``) and unrolls loops of
eight iterations before its loop vectoriser sees them, so a loop over eight lanes stays scalar.
These intrinsics emit ``<8 x double>`` operations directly: each reads and writes eight
consecutive float64 of 1-D C-contiguous arrays at an element offset. They are plain IEEE
operations, lane by lane (no fast-math flags: no reassociation, no fused multiply-add), so every
lane holds the bits of the same scalar operation; LLVM lowers them to one AVX-512 instruction, two
AVX2 or four SSE2 ones. Offsets are not checked: callers index inside their arrays.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 8
_F64 = ir.DoubleType()
_I64 = ir.IntType(64)
_VEC = ir.VectorType(_F64, LANES)
_IVEC = ir.VectorType(_I64, LANES)


def _ptr(context, builder, aty, arr, off, vty=_VEC):
    """Pointer to arr[off:off + 8] as a vector."""
    data = context.make_array(aty)(context, builder, arr).data
    return builder.bitcast(builder.gep(data, [off]), vty.as_pointer())


def _load(context, builder, aty, arr, off):
    return builder.load(_ptr(context, builder, aty, arr, off), align=8)


def _store(context, builder, aty, arr, off, v):
    builder.store(v, _ptr(context, builder, aty, arr, off), align=8)


def _splat(builder, x):
    v = cgutils.get_null_value(_VEC)
    for w in range(LANES):
        v = builder.insert_element(v, x, ir.Constant(_I64, w))
    return v


@intrinsic
def v_muladd(typingctx, D, r, A, ra, B, rb):
    """D[r:r+8] = D[r:r+8] + A[ra:ra+8] * B[rb:rb+8]."""
    def codegen(context, builder, sig, args):
        d, a, b = (_load(context, builder, sig.args[k], args[k], args[k + 1]) for k in (0, 2, 4))
        _store(context, builder, sig.args[0], args[0], args[1], builder.fadd(d, builder.fmul(a, b)))
    return types.void(D, r, A, ra, B, rb), codegen


@intrinsic
def v_submul(typingctx, D, r, F, rf, C, rc, Y, ry):
    """D[r:r+8] = F[rf:rf+8] - C[rc:rc+8] * Y[ry:ry+8]."""
    def codegen(context, builder, sig, args):
        f, c, y = (_load(context, builder, sig.args[k], args[k], args[k + 1]) for k in (2, 4, 6))
        _store(context, builder, sig.args[0], args[0], args[1], builder.fsub(f, builder.fmul(c, y)))
    return types.void(D, r, F, rf, C, rc, Y, ry), codegen


@intrinsic
def v_axpy(typingctx, D, r, c, A, ra):
    """D[r:r+8] = D[r:r+8] + c * A[ra:ra+8] (c a scalar)."""
    def codegen(context, builder, sig, args):
        d = _load(context, builder, sig.args[0], args[0], args[1])
        a = _load(context, builder, sig.args[3], args[3], args[4])
        _store(context, builder, sig.args[0], args[0], args[1], builder.fadd(d, builder.fmul(_splat(builder, args[2]), a)))
    return types.void(D, r, c, A, ra), codegen


@intrinsic
def v_div(typingctx, D, r, A, ra, B, rb):
    """D[r:r+8] = A[ra:ra+8] / B[rb:rb+8]."""
    def codegen(context, builder, sig, args):
        a, b = (_load(context, builder, sig.args[k], args[k], args[k + 1]) for k in (2, 4))
        _store(context, builder, sig.args[0], args[0], args[1], builder.fdiv(a, b))
    return types.void(D, r, A, ra, B, rb), codegen


@intrinsic
def v_sqrt(typingctx, D, r):
    """D[r:r+8] = sqrt(D[r:r+8]) (correctly rounded, as math.sqrt)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC]), "llvm.sqrt.v8f64")
        v = _load(context, builder, sig.args[0], args[0], args[1])
        _store(context, builder, sig.args[0], args[0], args[1], builder.call(fn, [v]))
    return types.void(D, r), codegen


@intrinsic
def v_copy(typingctx, D, r, A, ra):
    """D[r:r+8] = A[ra:ra+8]."""
    def codegen(context, builder, sig, args):
        _store(context, builder, sig.args[0], args[0], args[1], _load(context, builder, sig.args[2], args[2], args[3]))
    return types.void(D, r, A, ra), codegen


def _inplace(name, op, doc):
    """The intrinsic ``name(D, r, A, ra)``: D[r:r+8] = D[r:r+8] op A[ra:ra+8] (op an IR builder method)."""
    def impl(typingctx, D, r, A, ra):
        def codegen(context, builder, sig, args):
            d, a = (_load(context, builder, sig.args[k], args[k], args[k + 1]) for k in (0, 2))
            _store(context, builder, sig.args[0], args[0], args[1], getattr(builder, op)(d, a))
        return types.void(D, r, A, ra), codegen

    impl.__name__ = impl.__qualname__ = name
    impl.__doc__ = doc
    return intrinsic(impl)


v_add = _inplace("v_add", "fadd", "D[r:r+8] = D[r:r+8] + A[ra:ra+8].")
v_sub = _inplace("v_sub", "fsub", "D[r:r+8] = D[r:r+8] - A[ra:ra+8].")
v_mul = _inplace("v_mul", "fmul", "D[r:r+8] = D[r:r+8] * A[ra:ra+8].")


@intrinsic
def v_fill(typingctx, D, r, x):
    """D[r:r+8] = x."""
    def codegen(context, builder, sig, args):
        _store(context, builder, sig.args[0], args[0], args[1], _splat(builder, args[2]))
    return types.void(D, r, x), codegen


@intrinsic
def v_maxmin(typingctx, A, ra, M, rm, N, rn):
    """Per lane, with acc = A[ra + w]: M = acc where acc > M or acc is NaN (NaN stays the maximum
    once met), N = acc where acc < N."""
    def codegen(context, builder, sig, args):
        acc, m, n = (_load(context, builder, sig.args[k], args[k], args[k + 1]) for k in (0, 2, 4))
        up = builder.or_(builder.fcmp_ordered(">", acc, m), builder.fcmp_unordered("uno", acc, acc))
        _store(context, builder, sig.args[2], args[2], args[3], builder.select(up, acc, m))
        _store(context, builder, sig.args[4], args[4], args[5], builder.select(builder.fcmp_ordered("<", acc, n), acc, n))
    return types.void(A, ra, M, rm, N, rn), codegen


@intrinsic
def v_exp_poly(typingctx, A, ra):
    """A[ra:ra+8] <- exp by the Cody--Waite polynomial of
    :func:`riemattn.dynamics.kernels._kernel_rows.exp_shifted`, the same operations in the same order
    (valid on [-708, 708]; the callers send other values to ``math.exp``)."""
    from ._kernel_rows import INV_LN2, LN2_HI, LN2_LO

    def codegen(context, builder, sig, args):
        def c(x):
            return _splat(builder, ir.Constant(_F64, x))

        v = _load(context, builder, sig.args[0], args[0], args[1])
        floor = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC]), "llvm.floor.v8f64")
        k = builder.call(floor, [builder.fadd(builder.fmul(v, c(INV_LN2)), c(0.5))])
        r = builder.fsub(builder.fsub(v, builder.fmul(k, c(LN2_HI))), builder.fmul(k, c(LN2_LO)))
        p = c(1.0 / 6227020800.0)
        for coef in (1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
                     1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0):
            p = builder.fadd(c(coef), builder.fmul(r, p))
        y = builder.fadd(c(1.0), builder.fmul(r, p))
        ki = builder.shl(builder.fptosi(k, _IVEC), _splat_i(builder, 52))
        bits = builder.add(builder.bitcast(y, _IVEC), ki)
        _store(context, builder, sig.args[0], args[0], args[1], builder.bitcast(bits, _VEC))
    return types.void(A, ra), codegen


def _splat_i(builder, x):
    v = cgutils.get_null_value(_IVEC)
    for w in range(LANES):
        v = builder.insert_element(v, ir.Constant(_I64, x), ir.Constant(_I64, w))
    return v
