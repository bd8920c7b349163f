"""Head sources of the compiled kernels (riemattn.dynamics.kernels._kernel_heads).

Row-separable time-varying heads, M_eta(t) = D_eta(t) P'_eta (each sine term nonzero on one row of
one head, no two terms on one row: the hemisphere ensemble), are packed in the compact kind
``SRC_ROWSINES`` and must give the values of the dense ``SRC_SINES`` form: bit for bit where B
has no -0.0 entry (the argument is the comment above ``heads_at``: the dense sum only adds
w_k * (+-0) = +-0 terms, which change nothing but the sign of a -0.0). Hence the field, its
Jacobian and its time derivative are bit-identical too (the same operations on the same numbers).
"""

from __future__ import annotations

import numpy as np

import riemattn as ra
from riemattn.dynamics import kernels as kk
from riemattn.dynamics.kernels import _kernel_layout as K
from riemattn.dynamics.kernels import _kernel_pack as kp
from riemattn.dynamics.kernels._kernel_heads import heads_at, heads_rate
from riemattn.dynamics.schedules import TimeVaryingHeads
from riemattn.experiments._papers import hemisphere_heads

EPS = np.finfo(float).eps
TIMES = np.arange(-24, 57, 5) / 8.0  # dyadic: t +- 2^-14 exact (the finite difference below)


def _packs(field, shape, monkeypatch):
    """The field packed compact (row-separable detection on) and dense (off)."""
    compact = kk.pack_field(field, shape)
    monkeypatch.setattr(kp, "ROW_SEPARABLE", False)
    dense = kk.pack_field(field, shape)
    monkeypatch.setattr(kp, "ROW_SEPARABLE", True)
    return compact, dense


def _heads(pack, which, t, fn=heads_at, scale=1.7, b=0):
    kind, loc, off, nh, terms = (int(pack.ints[k]) for k in (
        (K.P_KIND, K.P_LOC, K.P_OFF, K.P_HEADS, K.P_TERMS) if which == "P"
        else (K.U_KIND, K.U_LOC, K.U_OFF, K.U_HEADS, K.U_TERMS)))
    src = pack.floats if loc == K.LOC_FLOATS else pack.per[b]
    out = np.full(nh * pack.d * pack.d, np.nan)
    fn(t, kind, src, off, nh, terms, pack.d, scale, out, 0)
    return out


def _bits(a):
    return np.ascontiguousarray(a).view(np.int64)


def _separable(rng, h, d, n_terms, lead=(), zero_B=False):
    """A random row-separable TimeVaryingHeads: n_terms terms on distinct random (head, row) pairs,
    in random order, one of them with A_k = 0 (left out by the packer); B without -0.0 entries."""
    rows = rng.permutation(h * d)[:n_terms - 1]
    A = np.zeros((n_terms,) + lead + (h, d, d))
    for k, rho in zip(rng.permutation(n_terms)[:n_terms - 1], rows):
        A[(k,) + (slice(None),) * len(lead) + divmod(int(rho), d)] = rng.normal(size=lead + (d,))
    B = np.zeros(lead + (h, d, d)) if zero_B else rng.normal(size=lead + (h, d, d)) / 2
    return TimeVaryingHeads(B, A, rng.uniform(0.3, 3.0, n_terms), rng.uniform(-np.pi, np.pi, n_terms))


def _cases(rng):
    hemi = hemisphere_heads()
    sep = _separable(rng, 2, 3, 5)
    sep_b = _separable(rng, 2, 3, 4, lead=(3,))
    return {
        "hemisphere": (ra.AttentionField(hemi, beta=np.array([0.5, 2.0])), (2, 5, 3)),
        "separable P and U, B, softmax causal": (ra.AttentionField(sep, sep, normalization="softmax", mask="causal"),
                                                 (2, 4, 3)),
        "separable per trajectory, mean": (ra.AttentionField(sep_b, normalization="mean", beta=0.7), (3, 4, 3)),
    }


def test_row_separable_heads_pack_compact_with_the_dense_values(monkeypatch):
    rng = np.random.default_rng(0)
    for name, (field, shape) in _cases(rng).items():
        compact, dense = _packs(field, shape, monkeypatch)
        assert compact.ints[K.P_KIND] == K.SRC_ROWSINES and dense.ints[K.P_KIND] == K.SRC_SINES, name
        smaller = compact.per.size + compact.floats.size < dense.per.size + dense.floats.size
        assert smaller, name
        for which in ("P", "U") if field._U is not None else ("P",):
            for b in range(shape[0]):
                for t in TIMES:
                    for fn in (heads_at, heads_rate):
                        c, dn = _heads(compact, which, t, fn, b=b), _heads(dense, which, t, fn, b=b)
                        assert np.array_equal(_bits(c), _bits(dn)), (name, which, fn, t)


def test_row_separable_field_values_bit_identical_to_dense(monkeypatch):
    """The field, its lifted Jacobian and its time derivative (Rosenbrock's) from both packs."""
    rng = np.random.default_rng(1)
    for name, (field, shape) in _cases(rng).items():
        compact, dense = _packs(field, shape, monkeypatch)
        y = rng.normal(size=shape)
        y /= np.linalg.norm(y, axis=-1, keepdims=True)
        l, d = shape[-2:]
        for op, out_shape in ((kk.RHS, (l, d)), (kk.LIFTED_JAC, (l * d, l * d)), (kk.TIME_DERIVATIVE, (l, d))):
            for b in range(shape[0]):
                for t in (0.0, 0.3, 2.71):
                    outs = []
                    for pack in (compact, dense):
                        out, work = np.full(out_shape, np.nan), np.zeros(max(compact.work, dense.work))
                        kk.evaluate(op, t, np.ascontiguousarray(y[b]), b, pack.ints, pack.floats, pack.per, work, out)
                        outs.append(out)
                    assert np.all(np.isfinite(outs[0])), (name, op)
                    assert np.array_equal(_bits(outs[0]), _bits(outs[1])), (name, op, b, t)
        if name == "hemisphere":
            assert np.any(outs[0] != 0.0)  # the time derivative of a time-varying field


def test_only_row_separable_heads_pack_compact():
    rng = np.random.default_rng(2)
    h, d = 2, 3

    def kind(A, B=None):
        tv = TimeVaryingHeads(np.zeros((h, d, d)) if B is None else B, A, np.ones(len(A)), np.zeros(len(A)))
        return int(kk.pack_field(ra.AttentionField(tv), (4, d)).ints[K.P_KIND])

    one_row = np.zeros((2, h, d, d))
    one_row[0, 0, 1] = rng.normal(size=d)
    one_row[1, 1, 2, 0] = 1.0
    assert kind(one_row) == K.SRC_ROWSINES
    two_rows = one_row.copy()
    two_rows[0, 0, 2, 2] = 0.5  # term 0 on two rows of head 0
    assert kind(two_rows) == K.SRC_SINES
    two_heads = one_row.copy()
    two_heads[0, 1, 1, 0] = 0.5  # term 0 on row 1 of both heads
    assert kind(two_heads) == K.SRC_SINES
    shared_row = one_row.copy()
    shared_row[1, 0, 1, 0] = 0.5  # terms 0 and 1 both on row 1 of head 0 (not separable: a sum on a row)
    shared_row[1, 1, 2, 0] = 0.0
    assert kind(shared_row) == K.SRC_SINES
    dense = rng.normal(size=(2, h, d, d))
    assert kind(dense) == K.SRC_SINES
    assert kind(one_row[:1]) == K.SRC_SINES  # separable, but one term reads fewer numbers dense
    # per-trajectory A: term 0 on row 1 in one trajectory and row 2 in the other is on two rows
    per = np.zeros((2, 2, h, d, d))
    per[0, 0, 0, 1, 0], per[0, 1, 0, 1, 1], per[1, :, 1, 0, 2] = 1.0, 2.0, 3.0

    def kind_per(A):
        tv = TimeVaryingHeads(np.zeros((2, h, d, d)), A, np.ones(2), np.zeros(2))
        return int(kk.pack_field(ra.AttentionField(tv), (2, 4, d)).ints[K.P_KIND])

    assert kind_per(per) == K.SRC_ROWSINES
    per[0, 1, 0, 1, 1], per[0, 1, 0, 2, 1] = 0.0, 2.0
    assert kind_per(per) == K.SRC_SINES


def test_rowsines_rate_is_the_central_difference(monkeypatch):
    """heads_rate against (M(t + h) - M(t - h)) / 2h, h = 2^-14 (t dyadic: t +- h exact). Bound per
    entry: truncation h^2 / 6 sum_k |omega_k|^3 |A_k| plus rounding: M(t +- h) each within
    (K + 3) eps (|B| + sum_k |A_k|) (sin within an ulp, its argument omega t + phi within eps
    (|omega| |t| + |phi|), K + 1 additions), and their difference divided by 2h; the rate's own
    rounding, (K + 3) eps sum_k |omega_k| |A_k| -- all times scale."""
    rng = np.random.default_rng(3)
    tv = _separable(rng, 2, 3, 6, zero_B=False)
    pack = kk.pack_field(ra.AttentionField(tv), (4, 3))
    assert pack.ints[K.P_KIND] == K.SRC_ROWSINES
    hstep, scale = 2.0 ** -14, 1.7
    absA = np.abs(tv.A).reshape(len(tv.omega), -1)
    trunc = hstep ** 2 / 6 * (np.abs(tv.omega) ** 3) @ absA
    for t in TIMES:
        arg = np.abs(tv.omega) * (abs(t) + hstep) + np.abs(tv.phi)
        rnd = (len(tv.omega) + 3) * EPS * (np.abs(tv.B).ravel() + absA.sum(0)) + EPS * arg @ absA
        fd = (_heads(pack, "P", t + hstep, scale=scale) - _heads(pack, "P", t - hstep, scale=scale)) / (2 * hstep)
        rate = _heads(pack, "P", t, heads_rate, scale=scale)
        bound = scale * (trunc + rnd / hstep + (len(tv.omega) + 3) * EPS * np.abs(tv.omega) @ absA)
        assert np.all(np.abs(rate - fd) <= bound), (t, np.max(np.abs(rate - fd) / bound))
        assert np.max(np.abs(rate)) > 1e3 * np.max(bound)  # the check can fail: the rate is not ~0


def test_compiled_engine_same_trajectory_dense_or_compact(monkeypatch):
    """The compiled engine, explicit and Rosenbrock (Jacobian and time derivative), from both packs."""
    field = ra.AttentionField(hemisphere_heads(), beta=np.array([1.0, 3.0]))
    rng = np.random.default_rng(4)
    y0 = rng.normal(size=(2, 4, 3))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    for stepper in ("dopri5", "rodas4"):
        runs = []
        for flag in (True, False):
            monkeypatch.setattr(kp, "ROW_SEPARABLE", flag)
            sol = ra.integrate(field, y0, (0.0, 0.5), stepper, rtol=1e-7, atol=1e-7, saveat=[0.25, 0.5],
                               engine="compiled")
            runs.append((np.asarray(sol.y), sol.per_trajectory.nfev))
        assert np.array_equal(_bits(runs[0][0]), _bits(runs[1][0])), stepper
        assert np.array_equal(runs[0][1], runs[1][1]), stepper
