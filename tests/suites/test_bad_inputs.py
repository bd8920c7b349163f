"""Bad inputs across the public API: the package's error naming the argument, or a documented result.

Two parts:

* ``test_issue_14_example`` -- one regression test per example of issue 14 (silent NaN or wrong
  results, raw library errors, the wrong argument named, hangs, user exceptions).
* ``test_generated_bad_input`` -- for every (entry point, argument) in ``ENTRIES``, Hypothesis
  draws a bad variant of a valid value (NaN/inf at a drawn position, complex, a wrong last axis,
  a missing or extra axis, an empty axis, a wrong type, out-of-range scalars) and asserts: either a
  :class:`~riemattn.errors.RiemattnError` whose message names the argument as the user wrote it,
  or a result without NaN (e.g. an empty batch gives an empty result); never another exception;
  and within a time limit.

Convention (documented in docs/index.md, "Errors"): an exception raised by a user's callable (P(t),
U(t), a VectorField's func, save_fn) is re-raised as ValidationError naming the callable and the
time, with the original exception as ``__cause__``, at every time.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import riemattn as ra
from riemattn import diagnostics as dg
from riemattn import gradient_flow as gf
from riemattn import theory as th
from riemattn.errors import InputTypeError, RiemattnError, ValidationError
from riemattn.solvers.core.events import Event

# the sweep's guard, TIME_LIMIT (5 s) a call: a hang raises a BaseException that no `except Exception`
# in the code can swallow (the slowest valid calls here take a few milliseconds)
from _sweep_catalogue import TIME_LIMIT, time_limit

Y = ra.Sphere(2).projection(np.array([[1.0, 0.2, 0.1], [0.3, 1.0, 0.0], [0.1, 0.4, 1.0], [1.0, 1.0, 1.0]]))
W = np.diag([1.0, 2.0, 3.0])
YW = ra.Ellipsoid(W).projection(Y)
FIELD = ra.AttentionField(np.eye(3))


def _arrays(out):
    if isinstance(out, ra.Trajectory):
        return [out.t] + ([out.y] if out.y is not None else [])
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _arrays(o)]
    if isinstance(out, dict):
        return [a for o in out.values() for a in _arrays(o)]
    arr = np.asarray(out) if isinstance(out, (np.ndarray, float, int, np.number)) else None
    return [] if arr is None or arr.dtype.kind not in "fc" else [arr]


def check_outcome(call, name):
    """Run ``call()``: a RiemattnError naming ``name``, or a result with no NaN, in time."""
    start = time.perf_counter()
    try:
        with time_limit(), np.errstate(all="ignore"):
            out = call()
    except RiemattnError as exc:
        assert name in str(exc), f"the message does not name {name!r}: {exc}"
        assert isinstance(exc, (ValidationError, InputTypeError)), type(exc)
        return exc
    assert time.perf_counter() - start < TIME_LIMIT
    for arr in _arrays(out):
        assert not np.isnan(arr).any(), f"NaN in the result for a bad {name}"
    return out


# ------------------------------------------------------------------------------------------------
# generated bad inputs
# ------------------------------------------------------------------------------------------------
NOT_ARRAYS = [None, "abc", b"x", object(), print, [[1.0, 2.0], [3.0]], {"a": 1}]
BAD_SCALARS = [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, -1, 0, 2.5, 1e300, 1 + 1j,
               True, None, "1", [1.0, 2.0], np.array([1.0, 2.0]), np.nan * np.ones(())]


@st.composite
def bad_arrays(draw, valid):
    """A bad variant of the valid array ``valid``."""
    valid = np.asarray(valid, dtype=float)
    kind = draw(st.sampled_from(["nonfinite", "complex", "last_axis", "drop_axis", "add_axis",
                                 "empty", "not_array", "bool", "object", "int"]))
    if kind == "nonfinite":
        out = valid.copy()
        idx = draw(st.integers(0, out.size - 1))
        out.flat[idx] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
        return out
    if kind == "complex":
        return valid + 1j * draw(st.sampled_from([0.0, 1e-3, 1.0]))
    if kind == "last_axis":
        k = draw(st.sampled_from([-1, 1, 2]))
        if k < 0:
            return valid[..., :-1]
        return np.concatenate([valid] + [valid[..., :1]] * k, axis=-1)
    if kind == "drop_axis":
        return valid.reshape(-1) if valid.ndim > 1 else valid[0]
    if kind == "add_axis":  # a trailing axis: never a valid layout
        return valid[..., None]
    if kind == "empty":
        axis = draw(st.integers(0, valid.ndim - 1))
        return np.take(valid, [], axis=axis)
    if kind == "not_array":
        return draw(st.sampled_from(NOT_ARRAYS))
    if kind == "bool":
        return valid > 0
    if kind == "object":
        return valid.astype(object).tolist() + [None]
    return np.round(valid * 10).astype(np.int64)  # integers: accepted, converted (may be off E_W)


def bad_scalars():
    return st.sampled_from(BAD_SCALARS)


def _integrate(**kw):
    args = dict(field=FIELD, y0=Y, t_span=(0.0, 0.1), stepper="rk4", dt=0.05)
    args.update(kw)
    return ra.integrate(**args)


def _adaptive(**kw):
    return _integrate(**{"stepper": "dopri5", "dt": None, **kw})


LAYER = ra.TransformerLayer(np.eye(3), np.eye(3), np.eye(3), np.eye(3))

#: (label, argument name as the user writes it, valid value or None for scalars, call(value)).
ENTRIES = [
    ("Sphere.projection", "point", Y, lambda v: ra.Sphere(2).projection(v)),
    ("Ellipsoid.projection", "point", Y, lambda v: ra.Ellipsoid(W).projection(v)),
    ("Euclidean.projection", "point", Y, lambda v: ra.Euclidean(3).projection(v)),
    ("Sphere", "dim", None, lambda v: ra.Sphere(v)),
    ("Euclidean", "dim", None, lambda v: ra.Euclidean(v)),
    ("Ellipsoid", "W", W, lambda v: ra.Ellipsoid(v)),
    ("Sphere.random_uniform", "n_samples", None, lambda v: ra.Sphere(2).random_uniform(v)),
    ("AttentionField P", "P", np.eye(3), lambda v: ra.AttentionField(v)),
    ("AttentionField U", "U", np.eye(3), lambda v: ra.AttentionField(np.eye(3), v)),
    ("AttentionField W", "W", W, lambda v: ra.AttentionField(np.eye(3), W=v)),
    ("AttentionField beta", "beta", None, lambda v: ra.AttentionField(np.eye(3), beta=v)),
    ("field(t, y)", "y", Y, lambda v: FIELD(0.0, v)),
    ("field.update", "y", Y, lambda v: FIELD.update(0.0, v)),
    ("field.attention", "y", Y, lambda v: FIELD.attention(0.0, v)),
    ("sa d", "d", None, lambda v: ra.sa(1.0, v)),
    ("usa d", "d", None, lambda v: ra.usa(1.0, v)),
    ("sa beta", "beta", None, lambda v: ra.sa(v, 3)),
    ("TransformerLayer Q", "Q", np.eye(3), lambda v: ra.TransformerLayer(v, np.eye(3), np.eye(3), np.eye(3))),
    ("layer(y)", "y", Y, lambda v: LAYER(v)),
    ("integrate y0", "y0", Y, lambda v: _integrate(y0=v)),
    ("integrate dt", "dt", None, lambda v: _integrate(dt=v)),
    ("integrate first_step", "first_step", None, lambda v: _adaptive(first_step=v)),
    ("integrate rtol", "rtol", None, lambda v: _adaptive(rtol=v)),
    ("integrate atol", "atol", None, lambda v: _adaptive(atol=v)),
    ("integrate max_steps", "max_steps", None, lambda v: _integrate(max_steps=v)),
    ("integrate t_span", "t_span", np.array([0.0, 0.1]), lambda v: _integrate(t_span=v)),
    ("integrate saveat", "saveat", np.array([0.0, 0.05, 0.1]), lambda v: _integrate(saveat=v)),
    ("misalignment", "y", Y, lambda v: dg.misalignment(v)),
    ("hemisphere_lyapunov y", "y", Y, lambda v: dg.hemisphere_lyapunov(v, np.array([0.0, 0.0, 1.0]))),
    ("hemisphere_lyapunov v", "v", np.array([0.0, 0.0, 1.0]), lambda v: dg.hemisphere_lyapunov(Y, v)),
    ("token_lyapunov v", "v", np.array([0.0, 0.0, 1.0]), lambda v: dg.token_lyapunov(Y, v)),
    ("cluster_count y", "y", Y, lambda v: dg.cluster_count(v, 0.1)),
    ("cluster_count tol", "tol", None, lambda v: dg.cluster_count(Y, v)),
    ("consensus_distance", "y", Y, lambda v: dg.consensus_distance(v)),
    ("in_common_hemisphere", "y", Y, lambda v: dg.in_common_hemisphere(v)),
    ("theory.equiangular_rate rho", "rho", np.array([0.0, 0.5]), lambda v: th.equiangular_rate(v, 1.0, 3)),
    ("theory.equiangular_rate beta", "beta", None, lambda v: th.equiangular_rate(0.5, v, 3)),
    ("theory.equiangular_rate n", "n", None, lambda v: th.equiangular_rate(0.5, 1.0, v)),
    ("theory.equiangular_rho t", "t", np.array([0.0, 1.0]), lambda v: th.equiangular_rho(v, 1.0, 3)),
    ("theory.clustering_time eps", "eps", None, lambda v: th.clustering_time(1.0, 3, v)),
    ("gradient_flow.potential x", "x", YW, lambda v: gf.potential(v, W)),
    ("gradient_flow.potential P", "P", W, lambda v: gf.potential(YW, v)),
    ("gradient_flow.energy beta", "beta", None, lambda v: gf.energy(Y, v)),
    ("gradient_flow.energy_field d", "d", None, lambda v: gf.energy_field(1.0, v)),
    ("GradientField(t, y)", "y", Y, lambda v: gf.energy_field(1.0, 3)(0.0, v)),
    ("ButcherTableau order", "order", None, lambda v: ra.ButcherTableau((0.0,), ((0.0,),), (1.0,), v)),
    ("ButcherTableau b", "b", np.array([1.0]), lambda v: ra.ButcherTableau((0.0,), ((0.0,),), v, 1)),
    ("tableaux.rooted_trees", "order", None, lambda v: ra.tableaux.rooted_trees(v)),
    ("generator_matrix F", "F", Y, lambda v: ra.lie.generator_matrix(v, Y)),
    ("LinearField A", "A", np.zeros((3, 3)), lambda v: ra.LinearField(v, ra.Sphere(2))),
]


def _part_entries():
    """Attention parts (issue 55), from the registries: every array spelling a part accepts (a mask, a
    bias, a context) and the scalar of each constructor in riemattn.masks / riemattn.biases that takes
    one, evaluated on Y through a field; and the populations' tokens. A constructor added to those
    modules' __all__ without an entry here fails test_every_part_constructor_has_a_bad_input_entry."""
    l = Y.shape[0]
    on = lambda **kw: ra.AttentionField(np.eye(3), normalization="mean", **kw)(0.0, Y)  # noqa: E731
    pop = ra.Populations((2, 2), {(0, 0): ra.AttentionField(np.eye(3), mask="causal"), (0, 1): ra.AttentionField(np.eye(3))})
    return [
        ("mask array", "mask", np.tril(np.ones((l, l))).astype(bool), lambda v: on(mask=v)),
        ("bias array", "bias", np.zeros((l, l)), lambda v: on(bias=v)),
        ("Bias rule", "rule", np.zeros((l, l)), lambda v: on(bias=ra.biases.Bias(v))),
        ("Mask rule", "rule", np.ones((l, l), bool), lambda v: on(mask=ra.masks.Mask(v, "m"))),
        ("alibi slopes", "slopes", np.array([0.5]), lambda v: on(bias=ra.biases.alibi(v))),
        ("alibi per_row slopes", "slopes", np.array([0.5]), lambda v: on(bias=ra.biases.alibi(v, per_row=True))),
        ("window k", "k", None, lambda v: on(mask=ra.masks.window(v))),
        ("prefix k", "k", None, lambda v: on(mask=ra.masks.prefix(v))),
        ("context", "context", np.ones((2, 3)) / np.sqrt(3), lambda v: on(context=v)),
        ("Populations y", "y", Y, lambda v: pop(0.0, v)),
    ]


#: the constructors of riemattn.masks / riemattn.biases with an argument the entries above draw bad values for
PART_CONSTRUCTORS = {"Mask", "Bias", "alibi", "window", "prefix"}
ENTRIES += _part_entries()


def test_every_part_constructor_has_a_bad_input_entry():
    """Enumerated: a constructor with arguments added to riemattn.masks or riemattn.biases must be listed
    (constructors without arguments -- full, causal, strict_causal -- and the spellings' parsers take none)."""
    import inspect

    for mod in (ra.masks, ra.biases):
        for name in mod.__all__:
            params = inspect.signature(getattr(mod, name)).parameters
            if name.startswith("as_") or not params:
                continue
            assert name in PART_CONSTRUCTORS, f"{mod.__name__}.{name}: add a bad-input entry to _part_entries"


@pytest.mark.parametrize("label, name, valid, call", ENTRIES, ids=[e[0] for e in ENTRIES])
@given(data=st.data())
def test_generated_bad_input(label, name, valid, call, data):
    value = data.draw(bad_scalars() if valid is None else bad_arrays(valid), label=name)
    check_outcome(lambda: call(value), name)


@pytest.mark.parametrize("label, name, valid, call", [e for e in ENTRIES if e[2] is not None],
                         ids=[e[0] for e in ENTRIES if e[2] is not None])
def test_valid_values_of_the_table_are_accepted(label, name, valid, call):
    """The valid values the bad ones are drawn from do pass (so a failure above is the bad value's)."""
    with time_limit():
        call(valid)


# ------------------------------------------------------------------------------------------------
# issue 14, one regression test per example
# ------------------------------------------------------------------------------------------------
def _raising_P(t):
    if np.any(np.asarray(t) > 0):
        raise RuntimeError("P broke")
    return np.eye(3)


def _nan_field():
    return ra.VectorField(lambda t, y: np.full(y.shape, np.nan), ra.Sphere(2))


def _wrong_shape_field():
    return ra.VectorField(lambda t, y: np.zeros(y.shape[:-1]), ra.Sphere(2))


EXAMPLES = [
    # silent wrong results / NaN
    ("Sphere.projection of zero vectors", lambda: ra.Sphere(2).projection(np.zeros((2, 3))),
     ValidationError, ["point", "zero"]),
    ("Sphere.projection of the wrong d", lambda: ra.Sphere(2).projection(np.ones((2, 5))),
     ValidationError, ["point", "(..., 3)", "(2, 5)"]),
    ("complex W", lambda: ra.Ellipsoid(W * (1 + 1j)), InputTypeError, ["W", "complex"]),
    ("complex P", lambda: ra.AttentionField(np.eye(3) * (1 + 1j)), InputTypeError, ["P", "complex"]),
    ("complex y0", lambda: _integrate(y0=Y + 0j), InputTypeError, ["y0", "complex"]),
    ("field of NaN tokens", lambda: FIELD(0.0, np.full((4, 3), np.nan)), ValidationError, ["y", "NaN"]),
    ("layer of NaN tokens", lambda: LAYER(np.full((4, 3), np.nan)), ValidationError, ["y", "NaN"]),
    ("layer of zero tokens", lambda: LAYER(np.zeros((4, 3))), ValidationError, ["y", "not on"]),
    ("layer of tokens off the manifold", lambda: LAYER(2 * Y), ValidationError, ["y", "not on"]),
    ("misalignment of NaN tokens", lambda: dg.misalignment(np.full((4, 3), np.nan)),
     ValidationError, ["y", "NaN"]),
    ("misalignment of zero tokens", lambda: dg.misalignment(np.zeros((4, 3))), ValidationError, ["y", "zero"]),
    ("hemisphere_lyapunov with v of the wrong shape", lambda: dg.hemisphere_lyapunov(Y, np.ones((3, 3))),
     ValidationError, ["v", "(3,)", "(3, 3)"]),
    ("hemisphere_lyapunov with v of the wrong d", lambda: dg.hemisphere_lyapunov(Y, np.ones(5)),
     ValidationError, ["v", "(3,)", "(5,)"]),
    ("hemisphere_lyapunov with NaN v", lambda: dg.hemisphere_lyapunov(Y, [np.nan, 0, 1]),
     ValidationError, ["v", "NaN"]),
    ("equiangular_rate of rho out of range", lambda: th.equiangular_rate(5.0, 1.0, 3),
     ValidationError, ["rho", "[-1/(n-1), 1]", "5"]),
    ("equiangular_rate of NaN rho", lambda: th.equiangular_rate(np.nan, 1.0, 3), ValidationError, ["rho", "NaN"]),
    ("equiangular_rate with non-integer n", lambda: th.equiangular_rate(0.1, 1.0, 1.5),
     InputTypeError, ["n", "integer", "1.5"]),
    ("equiangular_rate with negative beta", lambda: th.equiangular_rate(0.1, -1.0, 3),
     ValidationError, ["beta", ">= 0", "-1"]),
    ("max_steps=True", lambda: _integrate(max_steps=True), InputTypeError, ["max_steps", "integer", "True"]),
    ("max_steps=0", lambda: _integrate(max_steps=0), ValidationError, ["max_steps", ">= 1", "0"]),
    # raw library errors
    ("Ellipsoid([[2.]])", lambda: ra.Ellipsoid([[2.0]]), ValidationError, ["W", "2 x 2", "(1, 1)"]),
    ("the field on an empty token set", lambda: FIELD(0.0, np.zeros((0, 3))), ValidationError, ["y", "no tokens"]),
    ("sa(beta, -1)", lambda: ra.sa(1.0, -1), ValidationError, ["d", ">= 2", "-1"]),
    ("sa(beta, 2.5)", lambda: ra.sa(1.0, 2.5), InputTypeError, ["d", "integer", "2.5"]),
    ("a user field of the wrong output shape (rk4)", lambda: _integrate(field=_wrong_shape_field()),
     ValidationError, ["func(t, y)", "(4,)", "(4, 3)"]),
    ("a user field of the wrong output shape (dopri5)", lambda: _adaptive(field=_wrong_shape_field()),
     ValidationError, ["func(t, y)", "(4,)", "(4, 3)"]),
    ("Ellipsoid.projection of the wrong d", lambda: ra.Ellipsoid(W).projection(np.ones((2, 5))),
     ValidationError, ["point", "(..., 3)", "(2, 5)"]),
    # the wrong argument named
    ("a W of the wrong size", lambda: ra.AttentionField(np.eye(3), W=np.eye(4)),
     ValidationError, ["W must have shape (3, 3)", "(4, 4)"]),
    ("sa(beta, 1)", lambda: ra.sa(1.0, 1), ValidationError, ["d", ">= 2", "got 1"]),
    ("Ellipsoid(None)", lambda: ra.Ellipsoid(None), InputTypeError, ["W", "NoneType"]),
    ("phase_boundary with negative beta_max", lambda: th.phase_boundary([1.0], 3, beta_max=-1.0),
     ValidationError, ["beta_max"]),
    ("phase_boundary with a string beta_max", lambda: th.phase_boundary([1.0], 3, beta_max="x"),
     InputTypeError, ["beta_max"]),
    # hangs
    ("first_step=0", lambda: _adaptive(first_step=0.0), ValidationError, ["first_step", "positive"]),
    ("first_step<0", lambda: _adaptive(first_step=-0.1), ValidationError, ["first_step", "positive"]),
    ("first_step=nan", lambda: _adaptive(first_step=np.nan), ValidationError, ["first_step", "finite"]),
    ("dt=0 (adaptive, as the first step)", lambda: _adaptive(dt=0.0), ValidationError, ["dt", "positive"]),
    # user exceptions: wrapped at every t, the original kept as __cause__
    ("P(t) raising at t > 0", lambda: _integrate(field=ra.AttentionField(_raising_P)),
     ValidationError, ["P(t)", "P broke", "t = "]),
    ("P(t) raising at t = 0", lambda: ra.AttentionField(lambda t: 1 / 0), ValidationError, ["P(t)", "t = 0"]),
    ("a VectorField func raising", lambda: _integrate(field=ra.VectorField(lambda t, y: 1 / 0, ra.Sphere(2))),
     ValidationError, ["func(t, y)", "ZeroDivisionError"]),
    ("save_fn raising", lambda: _integrate(save_fn=lambda t, y: 1 / 0), ValidationError, ["save_fn", "ZeroDivision"]),
    ("an AlgebraField generator raising",
     lambda: _integrate(field=ra.AlgebraField(lambda t, y: 1 / 0, ra.Sphere(2)), stepper="rkmk4"),
     ValidationError, ["generator(t, y)", "ZeroDivisionError"]),
    # more raw errors of the same classes, found by the generated test
    ("an AlgebraField generator of the wrong shape",
     lambda: _integrate(field=ra.AlgebraField(lambda t, y: np.zeros(3), ra.Sphere(2)), stepper="rkmk4"),
     ValidationError, ["generator(t, y)", "(3,)", "(3, 3)"]),
    ("ButcherTableau with a non-integer order", lambda: ra.ButcherTableau((0.0,), ((0.0,),), (1.0,), 2.5),
     InputTypeError, ["order", "integer", "2.5"]),
    ("ButcherTableau with None weights", lambda: ra.ButcherTableau((0.0,), ((0.0,),), None, 1),
     InputTypeError, ["b", "NoneType"]),
    ("a complex t_span", lambda: _integrate(t_span=(0.0, 1j)), InputTypeError, ["t_span", "1j"]),
    ("Euclidean.projection of NaN", lambda: ra.Euclidean(3).projection([np.nan, 0.0, 1.0]),
     ValidationError, ["point", "NaN"]),
    ("a NaN beta for CircleField", lambda: ra.circle.CircleField(np.nan), ValidationError, ["beta", "nan"]),
    # issue 58: hangs (each ran over 20 s), raw errors and silent garbage
    ("Event(samples=10**30)", lambda: Event(lambda t, y: y[..., 0, 0], samples=10**30),
     ValidationError, ["samples", "[0, 10000]"]),
    ("Event(direction=True)", lambda: Event(lambda t, y: y[..., 0, 0], direction=True),
     ValidationError, ["direction", "True"]),
    ("Event(direction=2.5)", lambda: Event(lambda t, y: y[..., 0, 0], direction=2.5),
     ValidationError, ["direction", "2.5"]),
    ("ButcherTableau(order=10**30)", lambda: ra.ButcherTableau((0.0,), ((0.0,),), (1.0,), 10**30),
     ValidationError, ["order", "<= 12"]),
    ("CircleDensity.solve(dt=1e-300)", lambda: _density().solve(np.full(16, 1 / (2 * np.pi)), (0.0, 0.1), dt=1e-300),
     ValidationError, ["dt", "max_steps"]),
    ("wendel_probability(10**30, 2)", lambda: _nan_result(dg.wendel_probability(10**30, 2)), AssertionError, ["0.0"]),
    ("warmup(shapes=[(10**30, 3)])", lambda: ra.warmup(shapes=[(10**30, 3)]), ValidationError, ["shapes[0]", "64"]),
    ("Sphere(10**30)", lambda: ra.Sphere(10**30), ValidationError, ["dim", "2147483647"]),
    ("critical_noise(1e300, 'sa') (NaN before)", lambda: _nan_result(_critical_noise(1e300)), AssertionError,
     ["1.414213562373095"]),
    ("a field at t = NaN", lambda: FIELD(np.nan, Y), ValidationError, ["t", "finite", "nan"]),
    ("a field at t = 'abc'", lambda: FIELD("abc", Y), InputTypeError, ["t", "real"]),
    ("cluster_staircase beyond its half-turn", lambda: _staircase([0.0, 4.0]), ValidationError,
     ["theta0", "half-turn"]),
]


def _nan_result(value):
    """Raise AssertionError with the value (a finite one is the expected answer of the example)."""
    raise AssertionError(f"{value!r} (finite: {bool(np.all(np.isfinite(value)))})")


def _density():
    from riemattn.analysis.meanfield import CircleDensity

    return CircleDensity(1.0, sigma=0.1, N=16)


def _critical_noise(beta):
    from riemattn.analysis.meanfield import critical_noise

    return critical_noise(beta, "sa")


def _staircase(theta0):
    from riemattn.analysis.weighted_clusters import cluster_staircase

    return cluster_staircase(theta0, 10.0)


@pytest.mark.parametrize("label, call, exc, words", EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_issue_14_example(label, call, exc, words):
    with time_limit(), pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"
    if "raising" in label:
        assert info.value.__cause__ is not None


def test_nan_field_under_dopri5_is_reported_as_nan_not_as_stiffness():
    sol = _adaptive(field=_nan_field())
    assert not sol.success
    assert "NaN or inf" in sol.message and "underflow" not in sol.message


def test_empty_batch_gives_an_empty_result():
    """Documented acceptance: leading (batch) axes may be empty; the result is empty, not an error."""
    empty = np.zeros((0, 4, 3))
    assert FIELD(0.0, empty).shape == (0, 4, 3)
    assert FIELD.update(0.0, empty).shape == (0, 4, 3)
    assert FIELD.attention(0.0, empty).shape == (0, 1, 4, 4)
    assert LAYER(empty).shape == (0, 4, 3)
    assert dg.misalignment(empty).shape == (0,)
    assert dg.hemisphere_lyapunov(empty, [0.0, 0.0, 1.0]).shape == (0,)
    for stepper, dt in (("rk4", 0.05), ("dopri5", None)):
        sol = _integrate(y0=empty, stepper=stepper, dt=dt)
        assert sol.success and sol.y.shape == (2, 0, 4, 3) and sol.nfev == 0
        assert sol.per_trajectory.status.shape == (0,)


def test_integer_and_float32_inputs_are_accepted_as_float64():
    """Documented acceptance: integer and float32 arrays are converted to float64."""
    out = ra.Sphere(2).projection(np.array([[3, 0, 4]]))
    np.testing.assert_allclose(out, [[0.6, 0.0, 0.8]])
    assert out.dtype == np.float64
    np.testing.assert_allclose(FIELD(0.0, Y.astype(np.float32).astype(np.float64)), FIELD(0.0, Y), atol=1e-6)
    assert ra.AttentionField(np.eye(3, dtype=np.int64)).P().dtype == np.float64
    sol = _integrate(y0=Y.astype(np.float32), project=True)
    assert sol.success and sol.y.dtype == np.float64


def test_the_field_is_the_ambient_extension_off_the_manifold():
    """Documented acceptance: field(t, y) off E_W is the same formula (what ambient ODE solvers
    evaluate at their stage points); on E_W it is tangent."""
    F = FIELD(0.0, 2 * Y)
    f = FIELD.update(0.0, 2 * Y)
    np.testing.assert_allclose(F, f - np.sum(2 * Y * f, axis=-1, keepdims=True) * 2 * Y, atol=1e-14)
