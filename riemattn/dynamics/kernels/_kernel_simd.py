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


def _dots(J):
    """The intrinsic ``v_dots{J}(D, rd, dj, A, ra, ac, Bm, rb, bj, bc, n, S, rs)``: for j < J,
    D[rd + j dj : +8] = sum_{c < n} a_c * Bm[rb + j bj + c bc : +8] with a_c = A[ra + c ac : +8] *
    S[rs : rs + 8], each sum adding its terms in the order c = 0, 1, ... to 0.0 (the bits of
    ``v_mul`` by S on A, ``v_fill`` with 0.0 and then n ``v_muladd`` calls per j; S = 1.0 leaves A as
    it is). The J sums are carried in registers through one loop over c (a ``v_muladd`` reads and
    writes its accumulator in memory on every term), and a_c is formed once for the J of them."""
    def impl(typingctx, D, rd, dj, A, ra, ac, Bm, rb, bj, bc, n, S, rs):
        def codegen(context, builder, sig, args):
            d_, rd_, dj_, a_, ra_, ac_, b_, rb_, bj_, bc_, n_, s_, rs_ = args
            ty = sig.args
            scale = _load(context, builder, ty[11], s_, rs_)
            accs = []
            for j in range(J):
                slot = cgutils.alloca_once(builder, _VEC)
                builder.store(_splat(builder, ir.Constant(_F64, 0.0)), slot)
                accs.append(slot)
            with cgutils.for_range(builder, n_) as loop:
                c = loop.index
                a = builder.fmul(_load(context, builder, ty[3], a_, builder.add(ra_, builder.mul(c, ac_))), scale)
                base = builder.add(rb_, builder.mul(c, bc_))
                for j in range(J):
                    b = _load(context, builder, ty[6], b_, builder.add(base, builder.mul(bj_, ir.Constant(_I64, j))))
                    builder.store(builder.fadd(builder.load(accs[j]), builder.fmul(a, b)), accs[j])
            for j in range(J):
                off = builder.add(rd_, builder.mul(dj_, ir.Constant(_I64, j)))
                _store(context, builder, ty[0], d_, off, builder.load(accs[j]))
        return types.void(D, rd, dj, A, ra, ac, Bm, rb, bj, bc, n, S, rs), codegen

    impl.__name__ = impl.__qualname__ = f"v_dots{J}"
    return intrinsic(impl)


#: J sums of n products each, carried in registers (see :func:`_dots`)
v_dots8, v_dots4, v_dots1 = _dots(8), _dots(4), _dots(1)


def _comb(add_y):
    """The intrinsic ``v_comb(D, rd, coef, m, K, rk, ks, n, H, rh, Y, ry)``: for each of the n
    vectors e (at rd + 8 e in D, rk + 8 e in K): D_e = (sum_{j < m} coef[j] K[rk + j ks + 8 e]) * H[rh],
    the sum adding its terms in the order j = 0, 1, ... to 0.0, then ``+ Y[ry + 8 e]`` where
    ``add_y`` (``v_comb_y``); Y is not read otherwise. A stage combination of a Runge--Kutta step
    (the bits of ``v_fill``, m ``v_axpy``, ``v_mul`` and ``v_add`` passes), each element's sum
    carried in a register."""
    def impl(typingctx, D, rd, coef, m, K, rk, ks, n, H, rh, Y, ry):
        def codegen(context, builder, sig, args):
            d_, rd_, c_, m_, k_, rk_, ks_, n_, h_, rh_, y_, ry_ = args
            ty = sig.args
            cdata = context.make_array(ty[2])(context, builder, c_).data
            hv = _load(context, builder, ty[8], h_, rh_)
            step = ir.Constant(_I64, LANES)
            with cgutils.for_range(builder, n_) as outer:
                e8 = builder.mul(outer.index, step)
                acc = cgutils.alloca_once(builder, _VEC)
                builder.store(_splat(builder, ir.Constant(_F64, 0.0)), acc)
                with cgutils.for_range(builder, m_) as inner:
                    j = inner.index
                    cj = _splat(builder, builder.load(builder.gep(cdata, [j])))
                    kv = _load(context, builder, ty[4], k_, builder.add(builder.add(rk_, builder.mul(j, ks_)), e8))
                    builder.store(builder.fadd(builder.load(acc), builder.fmul(cj, kv)), acc)
                v = builder.fmul(builder.load(acc), hv)
                if add_y:
                    v = builder.fadd(v, _load(context, builder, ty[10], y_, builder.add(ry_, e8)))
                _store(context, builder, ty[0], d_, builder.add(rd_, e8), v)
        return types.void(D, rd, coef, m, K, rk, ks, n, H, rh, Y, ry), codegen

    impl.__name__ = impl.__qualname__ = "v_comb_y" if add_y else "v_comb"
    return intrinsic(impl)


#: Runge--Kutta stage combinations, in registers (see :func:`_comb`)
v_comb, v_comb_y = _comb(False), _comb(True)


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
def v_rowmaxmin(typingctx, A, ra, ac, n, M, rm, N, rn):
    """For c = 0..n-1 in that order, per lane, with acc = A[ra + c ac + w]: M = acc where acc > M or
    acc is NaN (NaN stays the maximum once met), N = acc where acc < N; M[rm:rm+8] and N[rn:rn+8]
    carried in registers."""
    def codegen(context, builder, sig, args):
        a_, ra_, ac_, n_, m_, rm_, nn_, rn_ = args
        ty = sig.args
        mx, mn = cgutils.alloca_once(builder, _VEC), cgutils.alloca_once(builder, _VEC)
        builder.store(_load(context, builder, ty[4], m_, rm_), mx)
        builder.store(_load(context, builder, ty[6], nn_, rn_), mn)
        with cgutils.for_range(builder, n_) as loop:
            acc = _load(context, builder, ty[0], a_, builder.add(ra_, builder.mul(loop.index, ac_)))
            m, n = builder.load(mx), builder.load(mn)
            up = builder.or_(builder.fcmp_ordered(">", acc, m), builder.fcmp_unordered("uno", acc, acc))
            builder.store(builder.select(up, acc, m), mx)
            builder.store(builder.select(builder.fcmp_ordered("<", acc, n), acc, n), mn)
        _store(context, builder, ty[4], m_, rm_, builder.load(mx))
        _store(context, builder, ty[6], nn_, rn_, builder.load(mn))
    return types.void(A, ra, ac, n, M, rm, N, rn), codegen


@intrinsic
def v_rowsum(typingctx, S, rs, A, ra, ac, n):
    """S[rs:rs+8] += A[ra + c ac : +8] for c = 0..n-1 in that order, the sum carried in a register."""
    def codegen(context, builder, sig, args):
        s_, rs_, a_, ra_, ac_, n_ = args
        ty = sig.args
        acc = cgutils.alloca_once(builder, _VEC)
        builder.store(_load(context, builder, ty[0], s_, rs_), acc)
        with cgutils.for_range(builder, n_) as loop:
            a = _load(context, builder, ty[2], a_, builder.add(ra_, builder.mul(loop.index, ac_)))
            builder.store(builder.fadd(builder.load(acc), a), acc)
        _store(context, builder, ty[0], s_, rs_, builder.load(acc))
    return types.void(S, rs, A, ra, ac, n), codegen


def _exp_vectors(builder, vs):
    """The Cody--Waite polynomial of :func:`riemattn.dynamics.kernels._kernel_rows.exp_shifted` on the
    vectors ``vs``, the same operations in the same order for each; the vectors' steps interleaved
    (independent chains for the out-of-order core)."""
    from ._kernel_rows import INV_LN2, LN2_HI, LN2_LO

    def c(x):
        return _splat(builder, ir.Constant(_F64, x))

    floor = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VEC, [_VEC]), "llvm.floor.v8f64")
    ks = [builder.call(floor, [builder.fadd(builder.fmul(v, c(INV_LN2)), c(0.5))]) for v in vs]
    rs = [builder.fsub(builder.fsub(v, builder.fmul(k, c(LN2_HI))), builder.fmul(k, c(LN2_LO))) for v, k in zip(vs, ks)]
    ps = [c(1.0 / 6227020800.0) for _ in vs]
    for coef in (1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
                 1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0):
        ps = [builder.fadd(c(coef), builder.fmul(r, p)) for r, p in zip(rs, ps)]
    out = []
    for r, p, k in zip(rs, ps, ks):
        y = builder.fadd(c(1.0), builder.fmul(r, p))
        ki = builder.shl(builder.fptosi(k, _IVEC), _splat_i(builder, 52))
        out.append(builder.bitcast(builder.add(builder.bitcast(y, _IVEC), ki), _VEC))
    return out


@intrinsic
def v_exp_poly(typingctx, A, ra):
    """A[ra:ra+8] <- exp by the Cody--Waite polynomial of
    :func:`riemattn.dynamics.kernels._kernel_rows.exp_shifted`, the same operations in the same order
    (valid on [-708, 708]; the callers send other values to ``math.exp``)."""
    def codegen(context, builder, sig, args):
        v = _load(context, builder, sig.args[0], args[0], args[1])
        _store(context, builder, sig.args[0], args[0], args[1], _exp_vectors(builder, [v])[0])
    return types.void(A, ra), codegen


#: vectors of :func:`v_exp_run` in flight at once
EXP_GROUP = 4


def _exp_groups(context, builder, ta, a_, ra_, n_, shift=None, acc=None):
    """The n consecutive vectors from A[ra] <- exp (``A - shift`` first where a shift vector is
    given), :data:`EXP_GROUP` of them interleaved, then the rest one at a time; each new vector
    added to the register ``acc`` (an alloca) in index order where one is given."""
    G = EXP_GROUP
    step = ir.Constant(_I64, LANES)

    def run(offs):
        vs = [_load(context, builder, ta, a_, o) for o in offs]
        if shift is not None:
            vs = [builder.fsub(v, shift) for v in vs]
        for o, e in zip(offs, _exp_vectors(builder, vs)):
            _store(context, builder, ta, a_, o, e)
            if acc is not None:
                builder.store(builder.fadd(builder.load(acc), e), acc)

    groups = builder.sdiv(n_, ir.Constant(_I64, G))
    with cgutils.for_range(builder, groups) as loop:
        base = builder.add(ra_, builder.mul(loop.index, ir.Constant(_I64, G * LANES)))
        run([builder.add(base, builder.mul(step, ir.Constant(_I64, g))) for g in range(G)])
    done = builder.mul(groups, ir.Constant(_I64, G))
    with cgutils.for_range(builder, builder.sub(n_, done)) as loop:
        run([builder.add(ra_, builder.mul(builder.add(done, loop.index), step))])


@intrinsic
def v_exp_run(typingctx, A, ra, n):
    """``v_exp_poly`` on the n consecutive vectors from A[ra], :data:`EXP_GROUP` of them interleaved
    (each vector's bits as ``v_exp_poly``'s)."""
    def codegen(context, builder, sig, args):
        _exp_groups(context, builder, sig.args[0], *args)
    return types.void(A, ra, n), codegen


@intrinsic
def v_exp_row(typingctx, A, ra, n, M, rm, S, rs):
    """For the n consecutive vectors from A[ra]: A_j <- exp(A_j - M[rm:rm+8]) by the polynomial of
    :func:`v_exp_poly` (the shift a subtraction first, as a ``v_sub`` pass would do), and
    S[rs:rs+8] += the new A_j, added in the order j = 0, 1, ... (the shifted exponentials of a
    softmax row and their sum in one pass; :data:`EXP_GROUP` vectors' polynomials interleaved)."""
    def codegen(context, builder, sig, args):
        a_, ra_, n_, m_, rm_, s_, rs_ = args
        ts = sig.args[5]
        acc = cgutils.alloca_once(builder, _VEC)
        builder.store(_load(context, builder, ts, s_, rs_), acc)
        _exp_groups(context, builder, sig.args[0], a_, ra_, n_, _load(context, builder, sig.args[3], m_, rm_), acc)
        _store(context, builder, ts, s_, rs_, builder.load(acc))
    return types.void(A, ra, n, M, rm, S, rs), codegen


def _splat_i(builder, x):
    v = cgutils.get_null_value(_IVEC)
    for w in range(LANES):
        v = builder.insert_element(v, ir.Constant(_I64, x), ir.Constant(_I64, w))
    return v
