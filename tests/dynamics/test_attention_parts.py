"""Attention from parts (issue 55): masks, biases, sigmoid and the uncentred update, each against a
plainly written NumPy reference (loops over heads, queries and keys), on every spelling.

The reference applies the definitions of ``riemattn.dynamics.masks``, ``riemattn.dynamics.biases``
and ``AttentionField``: s_ij = beta y_i^T P_eta y_j + b_ij^eta over the admissible j; "softmax":
exp(s_ij) / sum_k exp(s_ik); "paper": the same divided by sqrt(d); "mean": exp(s_ij) / l;
"sigmoid": 1 / (1 + exp(-(s_ij - log l))); "hardmax": 1 / |M_i| on the maximisers; the update
sum_eta sum_j alpha_ij U_eta (y_j - y_i) on flat space (centred), sum alpha_ij U_eta y_j
(uncentred), or the tangent projection of sum alpha_ij U_eta y_j on the sphere.
"""

from __future__ import annotations

import itertools
import math
import re
import zlib

import numpy as np
import pytest

import riemattn as ra
from riemattn.errors import RiemattnError, UnsupportedByEngine

L = 6
EPS = np.finfo(float).eps


def admissible_ref(spelling, l, h):
    """Admissibility [eta][i][j] written from the docs' definitions."""
    rule = {
        "full": lambda i, j: True,
        "causal": lambda i, j: j <= i,
        "window2": lambda i, j: i - 2 < j <= i,
        "window1": lambda i, j: j == i,
        "window9": lambda i, j: j <= i,
        "prefix3": lambda i, j: j <= max(i, 2),
        "prefix1": lambda i, j: j <= i,
        "array": lambda i, j: (i + j) % 3 != 1 or i == j,
        "callable": lambda i, j: abs(i - j) <= 1,
        "perhead": None,
        "strict": lambda i, j: j < i,
    }[spelling]
    if spelling == "perhead":
        return [[[(j <= i) if eta == 0 else (j >= i) for j in range(l)] for i in range(l)] for eta in range(h)]
    return [[[bool(rule(i, j)) for j in range(l)] for i in range(l)] for _ in range(h)]


def mask_spelling(spelling, l, h):
    return {
        "full": "full", "causal": "causal", "window2": ra.masks.window(2), "window1": ra.masks.window(1),
        "window9": ra.masks.window(9), "prefix3": ra.masks.prefix(3), "prefix1": ra.masks.prefix(1),
        "array": np.array(admissible_ref("array", l, 1)[0]),
        "callable": lambda i, j: np.abs(i - j) <= 1,
        "perhead": np.array(admissible_ref("perhead", l, h)),
        "strict": ra.masks.strict_causal(),
    }[spelling]


def bias_ref(kind, l, h, rng_bias):
    if kind is None:
        return [[[0.0] * l for _ in range(l)] for _ in range(h)]
    if kind in ("alibi", "alibi-row"):  # the per-row normalisation is the reference's (per_row=True)
        m = [0.3, 1.1][:h] if h == 2 else [0.3]
        return [[[-m[eta if h == 2 else 0] * abs(i - j) for j in range(l)] for i in range(l)] for eta in range(h)]
    if kind == "array":
        return [[[float(rng_bias[i, j]) for j in range(l)] for i in range(l)] for _ in range(h)]
    if kind == "callable":
        return [[[0.1 * (i - j) ** 2 * (-1) for j in range(l)] for i in range(l)] for _ in range(h)]


def bias_spelling(kind, h, rng_bias):
    return {None: None, "alibi": ra.biases.alibi([0.3, 1.1] if h == 2 else 0.3), "array": rng_bias,
            "alibi-row": ra.biases.alibi([0.3, 1.1] if h == 2 else 0.3, per_row=True),
            "callable": lambda i, j: -0.1 * (i - j) ** 2.0}[kind]


def reference(y, P, U, beta, normalization, adm, bias, flat, centred, per_row=False):
    """The field from its definition; ``per_row``: the bias minus log sum_k exp(b_ik) over the admissible k."""
    l, d = y.shape
    h = P.shape[0]
    out = np.zeros_like(y)
    for eta in range(h):
        for i in range(l):
            keys = [j for j in range(l) if adm[eta][i][j]]
            if not keys:  # a query with no key ("mean", "sigmoid"): no weights, no update
                continue
            shift = math.log(sum(math.exp(bias[eta][i][j]) for j in keys)) if per_row else 0.0
            s = {j: beta * (y[i] @ P[eta] @ y[j]) + bias[eta][i][j] - shift for j in keys}
            if normalization in ("softmax", "paper"):
                top = max(s.values())
                z = sum(math.exp(v - top) for v in s.values()) * (math.sqrt(d) if normalization == "paper" else 1)
                a = {j: math.exp(v - top) / z for j, v in s.items()}
            elif normalization == "mean":
                a = {j: math.exp(v) / l for j, v in s.items()}
            elif normalization == "sigmoid":
                a = {j: 1.0 / (1.0 + math.exp(-(v - math.log(l)))) for j, v in s.items()}
            else:  # hardmax
                top = max(s.values())
                M = [j for j, v in s.items() if v >= top - 2.0**-40 * max(abs(v) for v in s.values())]
                a = {j: 1.0 / len(M) for j in M}
            Ue = U[eta] if U.shape[0] > 1 else U[0]
            for j, w in a.items():
                term = w * (Ue @ (y[j] - y[i]) if flat and centred else Ue @ y[j])
                out[i] += term
                MAG[0] = max(MAG[0], np.abs(w) * np.abs(Ue).sum() * (np.abs(y[j]).max() + np.abs(y[i]).max()))
    if not flat:
        out -= np.einsum("ia,ia->i", y, out)[:, None] * y
    return out


#: the largest |term| bound of the last reference: the sums' rounding is a few eps of it per term
MAG = [0.0]


def tol(n_terms):
    """A few roundings per term of the largest term's size (set by the last reference), n_terms terms,
    and the tangent projection's product with |y|^2 <= 10 (a second rounding of the same size)."""
    return 16 * n_terms * EPS * max(1.0, MAG[0]) * 10


MASKS = ["full", "causal", "window2", "window1", "window9", "prefix3", "prefix1", "array", "callable", "perhead", "strict"]
CASES = [(m, b, n) for m, b, n in itertools.product(
    MASKS, [None, "alibi", "alibi-row", "array", "callable"], ["softmax", "paper", "mean", "sigmoid", "hardmax"])
    if m != "strict" or n in ("mean", "sigmoid")]  # a query with no key: only where rows are not normalised


@pytest.mark.parametrize("mask, bias, normalization", CASES)
def test_parts_match_the_reference(mask, bias, normalization):
    rng = np.random.default_rng(zlib.crc32(repr((mask, bias, normalization)).encode()))
    h, d = 2, 3
    P, U = rng.normal(size=(h, d, d)), rng.normal(size=(h, d, d))
    flat = normalization in ("sigmoid", "hardmax")  # flat space too
    y = rng.normal(size=(L, d))
    if not flat:
        y /= np.linalg.norm(y, axis=1, keepdims=True)
    rb = rng.normal(size=(L, L))
    field = ra.AttentionField(P, U, W="flat" if flat else None, beta=0.9, normalization=normalization,
                              mask=mask_spelling(mask, L, h), bias=bias_spelling(bias, h, rb))
    MAG[0] = 0.0
    want = reference(y, P, U, 0.9, normalization, admissible_ref(mask, L, h), bias_ref(bias, L, h, rb), flat, True,
                     per_row=bias == "alibi-row")
    # l h terms, each a few roundings of the largest term (the reference sums in another order)
    np.testing.assert_allclose(field(0.0, y), want, rtol=0, atol=tol(L * h))


@pytest.mark.parametrize("mask", [m for m in MASKS if m != "strict"])
def test_uncentred_flat_update(mask):
    rng = np.random.default_rng(5)
    h, d = 2, 3
    P, U = rng.normal(size=(h, d, d)), rng.normal(size=(h, d, d))
    y = rng.normal(size=(L, d))
    field = ra.AttentionField(P, U, W="flat", normalization="softmax", mask=mask_spelling(mask, L, h), update="uncentred")
    MAG[0] = 0.0
    want = reference(y, P, U, 1.0, "softmax", admissible_ref(mask, L, h), bias_ref(None, L, h, None), True, False)
    np.testing.assert_allclose(field(0.0, y), want, rtol=0, atol=tol(L * h))
    np.testing.assert_array_equal(field(0.0, y), field.update(0.0, y))


@pytest.mark.parametrize("normalization", ["softmax", "paper"])
def test_a_per_row_bias_changes_nothing_under_softmax(normalization):
    """softmax(s + c_i) = softmax(s) for a constant c_i per row: normalising ALiBi per row is invisible there
    (to the rounding of the shift: one addition per score, amplified by the l-term row sums)."""
    rng = np.random.default_rng(8)
    y = rng.normal(size=(3, L, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    P = rng.normal(size=(2, 3, 3))
    for mask in ("causal", ra.masks.window(3)):
        plain = ra.AttentionField(P, normalization=normalization, mask=mask, bias=ra.biases.alibi([0.4, 2.0]))
        row = ra.AttentionField(P, normalization=normalization, mask=mask, bias=ra.biases.alibi([0.4, 2.0], per_row=True))
        np.testing.assert_allclose(row(0.0, y), plain(0.0, y), rtol=0, atol=16 * L * EPS * 4)


def test_a_query_with_no_key_does_not_move():
    """strict_causal(): the first token attends to nothing; "mean" and "sigmoid" give it the update 0, and
    every other token the same update as the causal mask with its own weight removed."""
    rng = np.random.default_rng(9)
    y = rng.normal(size=(2, L, 3))
    for norm in ("mean", "sigmoid"):
        f = ra.AttentionField(np.eye(3), W="flat", normalization=norm, mask=ra.masks.strict_causal(), update="uncentred")
        out = f(0.0, y)
        assert np.all(out[:, 0] == 0.0)
        A = f.attention(0.0, y)
        assert np.all(A[..., 0, :] == 0.0) and np.all(np.triu(A[..., 0, :, :]) == 0.0)
        A_causal = ra.AttentionField(np.eye(3), W="flat", normalization=norm, mask="causal").attention(0.0, y)
        np.testing.assert_array_equal(A[..., 0, :, :], np.tril(A_causal[..., 0, :, :], -1))


def test_the_old_keywords_as_parts_give_the_same_bits():
    rng = np.random.default_rng(6)
    y = rng.normal(size=(3, L, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    P = rng.normal(size=(2, 3, 3))
    for norm in ("softmax", "paper", "mean", "hardmax"):
        old = ra.AttentionField(P, alibi=[0.4, 0.9], normalization=norm, mask="causal")
        new = ra.AttentionField(P, bias=ra.biases.alibi([0.4, 0.9]), normalization=norm, mask=ra.masks.causal())
        np.testing.assert_array_equal(old(0.3, y), new(0.3, y))
        assert new.mask == "causal"  # a builtin mask part is the string: every engine runs it
    assert ra.AttentionField(P, mask=ra.masks.full()).mask == "full"


def test_mask_definitions():
    i, j = np.arange(7)[:, None], np.arange(7)[None, :]
    for k in range(1, 9):
        np.testing.assert_array_equal(ra.masks.window(k).array(7), (j <= i) & (i - k < j))
        np.testing.assert_array_equal(ra.masks.prefix(k).array(7), j <= np.maximum(i, k - 1))
    assert repr(ra.masks.window(3)) == "window(3)" and repr(ra.masks.prefix(2)) == "prefix(2)"


def test_time_dependent_bias_and_per_trajectory_times():
    rng = np.random.default_rng(7)
    y = rng.normal(size=(2, L, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    bias = ra.biases.Bias(lambda t, i, j: -t * np.abs(i - j), time_dependent=True)
    field = ra.AttentionField(np.eye(3), normalization="softmax", bias=bias)
    for t in (0.0, 0.7):
        want = ra.AttentionField(np.eye(3), normalization="softmax", alibi=t)(0.0, y)
        np.testing.assert_array_equal(field(t, y), want)
    both = field(np.array([0.0, 0.7]), y)  # one time per trajectory
    np.testing.assert_allclose(both[1], ra.AttentionField(np.eye(3), normalization="softmax", alibi=0.7)(0.0, y[1]),
                               rtol=0, atol=16 * EPS)


def _registered_parts():
    from _edge_problems import BIAS_PARTS, MASK_PARTS, ROWLESS_MASKS

    for name, make in MASK_PARTS.items():
        yield f"mask {name}", make(), dict(mask=make(), normalization="mean" if name in ROWLESS_MASKS else "softmax")
    for name, make in BIAS_PARTS.items():
        if name != "none":
            yield f"bias {name}", make(), dict(bias=make(), normalization="softmax")


@pytest.mark.parametrize("label, part, kw", list(_registered_parts()), ids=lambda v: v if isinstance(v, str) else "")
def test_each_part_runs_on_the_engines_it_declares(label, part, kw):
    """Enumerated from the registries: a part's ``engines`` says whether engine="compiled" runs it; where it
    does not, UnsupportedByEngine names the part (its repr), and engine="auto" runs NumPy."""
    y0 = np.random.default_rng(10).normal(size=(2, L, 3))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    field = ra.AttentionField(np.eye(3), **kw)
    engines = ra.masks.as_mask(part).engines if label.startswith("mask") else part.engines
    if "compiled" in engines:
        assert ra.integrate(field, y0, (0.0, 0.5), "rk4", dt=0.1, engine="compiled").engine == "compiled"
    else:
        with pytest.raises(UnsupportedByEngine, match=re.escape(repr(ra.masks.as_mask(part)) if label.startswith("mask")
                                                                else repr(part))):
            ra.integrate(field, y0, (0.0, 0.5), "rk4", dt=0.1, engine="compiled")
        assert ra.integrate(field, y0, (0.0, 0.5), "rk4", dt=0.1).engine == "numpy"


def test_parts_run_through_integrate_and_the_compiled_engine_names_them():
    rng = np.random.default_rng(8)
    y0 = rng.normal(size=(2, L, 3))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    for kw in (dict(mask=ra.masks.window(2)), dict(bias=ra.biases.alibi(0.5)), dict(normalization="sigmoid")):
        field = ra.AttentionField(np.eye(3), **kw)
        sol = ra.integrate(field, y0, (0.0, 1.0), "dopri5", rtol=1e-9, atol=1e-9)  # auto: the NumPy engine
        assert sol.success and sol.engine == "numpy"
        stiff = ra.integrate(field, y0, (0.0, 1.0), "rodas4", rtol=1e-9, atol=1e-9)  # finite-difference Jacobian
        np.testing.assert_allclose(stiff.y[-1], sol.y[-1], rtol=0, atol=1e-7)
        with pytest.raises(UnsupportedByEngine, match=str(next(iter(kw.values()))).split("(")[0]):
            ra.integrate(field, y0, (0.0, 1.0), "dopri5", engine="compiled")


def test_parts_on_torch_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    y = rng.normal(size=(2, L, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    for kw in (dict(mask=ra.masks.window(2), bias=ra.biases.alibi(0.5)), dict(normalization="sigmoid", mask="causal"),
               dict(mask=ra.masks.prefix(2), normalization="hardmax"),
               dict(mask=ra.masks.strict_causal(), normalization="mean", bias=ra.biases.alibi(0.5, per_row=True))):
        field = ra.AttentionField(np.eye(3), **kw)
        got = field(0.0, torch.as_tensor(y))
        assert isinstance(got, torch.Tensor)
        np.testing.assert_allclose(got.numpy(), field(0.0, y), rtol=0, atol=64 * EPS)


@pytest.mark.parametrize("kw, match", [
    (dict(mask=np.array([[True, False], [False, False]])), "no key"),
    (dict(mask=ra.masks.strict_causal()), "no key.*'paper'"),
    (dict(mask=ra.masks.strict_causal(), normalization="hardmax", W="flat"), "no key.*'hardmax'"),
    (dict(bias=ra.biases.alibi([0.5, 0.2])), "2 heads"),
    (dict(mask=np.ones((3, 4, 4), bool)), "heads"),
    (dict(mask=np.ones((4, 4))), "boolean"),
    (dict(mask="diagonal"), "mask"),
    (dict(mask=3.0), "mask"),
    (dict(bias=np.full((4, 4), np.nan)), "bias"),
    (dict(bias=np.ones((3, 4, 4))), "heads"),
    (dict(bias="alibi"), "bias"),
    (dict(W="flat", update="sideways"), "update"),
    (dict(update="uncentred"), "W='flat'"),
    (dict(normalization="sinkhorn", mask=ra.masks.window(2)), "sinkhorn"),
])
def test_bad_parts_are_named(kw, match):
    with pytest.raises(RiemattnError, match=match):
        ra.AttentionField(np.eye(3), **kw)(0.0, np.eye(4, 3))


def test_per_row_must_be_a_bool():
    for make in (lambda: ra.biases.alibi(0.5, per_row=1), lambda: ra.biases.Bias(np.zeros((2, 2)), per_row="yes")):
        with pytest.raises(RiemattnError, match="per_row"):
            make()


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "3"])
def test_window_and_prefix_need_a_positive_integer(bad):
    for make in (ra.masks.window, ra.masks.prefix):
        with pytest.raises(RiemattnError, match="k"):
            make(bad)


def test_a_users_arrays_are_copied_not_frozen():
    m, b = np.tril(np.ones((4, 4), bool)), np.zeros((4, 4))
    ra.AttentionField(np.eye(3), mask=m, bias=b)
    assert m.flags.writeable and b.flags.writeable


def test_every_attention_part_is_drawn():
    """Discovery (the edges suite, tests/suites/test_edges.py, draws its fields from these registries):
    every public constructor of riemattn.masks and riemattn.biases is in the suite's
    registries (tests/_edge_problems.py: MASK_PARTS, BIAS_PARTS), so the edges draw it; a new part
    added to those modules fails here until it is registered."""
    from _edge_problems import BIAS_PARTS, MASK_PARTS

    helpers = {"as_mask", "as_bias"}  # spellings' parser, not parts
    assert set(ra.masks.__all__) - helpers <= set(MASK_PARTS), set(ra.masks.__all__) - helpers - set(MASK_PARTS)
    assert set(ra.biases.__all__) - helpers <= set(BIAS_PARTS), set(ra.biases.__all__) - helpers - set(BIAS_PARTS)
    for make in (*MASK_PARTS.values(), *BIAS_PARTS.values()):
        make()  # each registered part builds


# ---------------------------------------------------------------------------------------------
# cross-attention: keys and values from a fixed context
# ---------------------------------------------------------------------------------------------
def cross_reference(y, C, P, U, beta, normalization, flat, centred):
    l, d = y.shape
    m = C.shape[0]
    out = np.zeros_like(y)
    for eta in range(P.shape[0]):
        for i in range(l):
            s = [beta * (y[i] @ P[eta] @ C[j]) for j in range(m)]
            if normalization in ("softmax", "paper"):
                top = max(s)
                z = sum(math.exp(v - top) for v in s) * (math.sqrt(d) if normalization == "paper" else 1)
                a = [math.exp(v - top) / z for v in s]
            elif normalization == "mean":
                a = [math.exp(v) / m for v in s]
            elif normalization == "sigmoid":
                a = [1.0 / (1.0 + math.exp(-(v - math.log(m)))) for v in s]
            else:
                top = max(s)
                M = [j for j in range(m) if s[j] >= top - 2.0**-40 * max(abs(v) for v in s)]
                a = [1.0 / len(M) if j in M else 0.0 for j in range(m)]
            Ue = U[eta] if U.shape[0] > 1 else U[0]
            for j in range(m):
                out[i] += a[j] * (Ue @ (C[j] - y[i]) if flat and centred else Ue @ C[j])
                MAG[0] = max(MAG[0], abs(a[j]) * np.abs(Ue).sum() * (np.abs(C[j]).max() + np.abs(y[i]).max()))
    if not flat:
        out -= np.einsum("ia,ia->i", y, out)[:, None] * y
    return out


@pytest.mark.parametrize("normalization, space, values", list(itertools.product(
    ["softmax", "paper", "mean", "sigmoid", "hardmax"], ["sphere", "flat", "uncentred"], ["identity", "matrices"])))
def test_cross_attention_matches_the_reference(normalization, space, values):
    rng = np.random.default_rng(zlib.crc32(repr((normalization, space, values)).encode()))
    h, d, m = 2, 3, 7
    P = rng.normal(size=(h, d, d))
    U = np.eye(d)[None] if values == "identity" else rng.normal(size=(h, d, d))
    y, C = rng.normal(size=(L, d)), rng.normal(size=(m, d))
    if space == "sphere":
        y /= np.linalg.norm(y, axis=1, keepdims=True)
    field = ra.AttentionField(P, None if values == "identity" else U, W=None if space == "sphere" else "flat",
                              normalization=normalization, beta=0.8, context=C,
                              update="uncentred" if space == "uncentred" else "centred")
    MAG[0] = 0.0
    want = cross_reference(y, C, P, U, 0.8, normalization, space != "sphere", space == "flat")
    np.testing.assert_allclose(field(0.0, y), want, rtol=0, atol=tol(m * h))
    assert field.attention(0.0, y).shape == (h, L, m)


def test_the_tokens_as_their_own_context_are_self_attention():
    """At one instant, cross-attention with c = y (a copy) is self-attention: the same formulas."""
    rng = np.random.default_rng(10)
    y = rng.normal(size=(3, L, 3))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    P, U = rng.normal(size=(2, 3, 3)), rng.normal(size=(2, 3, 3))
    for norm in ("softmax", "paper", "mean", "sigmoid"):
        self_ = ra.AttentionField(P, U, normalization=norm)
        for b in range(3):
            cross = ra.AttentionField(P, U, normalization=norm, context=y[b].copy())
            np.testing.assert_allclose(cross(0.0, y[b]), self_(0.0, y[b]), rtol=0, atol=1e-14)


def test_one_context_per_trajectory_through_an_adaptive_solve():
    """Batched contexts (one per trajectory) ride along the adaptive loop's compaction: the batch's
    solution equals each trajectory solved alone with its own context."""
    rng = np.random.default_rng(11)
    y0 = rng.normal(size=(3, 4, 3))
    y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
    C = rng.normal(size=(3, 5, 3)) * np.array([0.2, 1.0, 3.0])[:, None, None]  # different stiffness: steps differ
    field = ra.AttentionField(np.eye(3), context=C, normalization="softmax", beta=2.0)
    sol = ra.integrate(field, y0, (0.0, 2.0), "dopri5", rtol=1e-10, atol=1e-10)
    assert sol.success and len(set(sol.per_trajectory.n_steps.tolist())) > 1  # compaction happened
    for b in range(3):
        alone = ra.integrate(ra.AttentionField(np.eye(3), context=C[b], normalization="softmax", beta=2.0),
                             y0[b], (0.0, 2.0), "dopri5", rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(sol.y[-1, b], alone.y[-1], rtol=0, atol=1e-13)
    with pytest.raises(UnsupportedByEngine, match="cross-attention"):
        ra.integrate(field, y0, (0.0, 1.0), "dopri5", engine="compiled")
    with pytest.raises(RiemattnError, match="context"):
        field(0.0, y0[:2])  # three contexts, two trajectories


def test_cross_attention_on_torch_tensors():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    y = rng.normal(size=(2, L, 3))
    field = ra.AttentionField(rng.normal(size=(2, 3, 3)), rng.normal(size=(3, 3)), W="flat", context=rng.normal(size=(5, 3)))
    got = field(0.0, torch.as_tensor(y))
    np.testing.assert_allclose(got.numpy(), field(0.0, y), rtol=0, atol=64 * EPS * 10)


@pytest.mark.parametrize("kw, match", [
    (dict(context=np.ones((5, 4))), "context"),
    (dict(context=np.full((5, 3), np.nan)), "context"),
    (dict(context=np.ones((0, 3))), "context"),
    (dict(context=np.ones((5, 3)), mask="causal"), "mask"),
    (dict(context=np.ones((5, 3)), alibi=0.5), "alibi"),
    (dict(context=np.ones((5, 3)), normalization="sinkhorn"), "sinkhorn"),
])
def test_bad_context_is_named(kw, match):
    with pytest.raises(RiemattnError, match=match):
        ra.AttentionField(np.eye(3), **kw)
