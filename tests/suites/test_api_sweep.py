"""API-wide bad-input sweep (issue 41, "Deliver" 4): every public callable, every parameter, bad values.

What is swept, found by introspection (tests/_sweep_catalogue.py), so that a public name added
later is covered without editing this file: every callable named in the ``__all__`` of riemattn and
of each public submodule, and the public methods (defined in riemattn) of each public class. For
each parameter a valid example comes from tests/_sweep_valid.py (``VALID``, keyed by parameter
name; ``VALID_AT`` per callable) or the parameter's default; the bad values are derived from the
example's type (:func:`_sweep_catalogue.bad_values`: wrong type, NaN, +-inf, negative, 1e300, an
array where a scalar is meant, empty, a trailing axis, a flattened array, float32/float16, a torch
tensor; and ``batch``: this array with a leading axis of 2 and the other array parameters with 3).
The other parameters keep their valid values (required ones) or defaults (optional ones).

Each call must give a :class:`riemattn.errors.RiemattnError` whose message names the parameter
("clear"), or a result without NaN where that is documented ("result": float32/float16 and torch
input are converted, docs/index.md "Errors", "Dtypes"; large or negative values where the
parameter has no sign constraint); never another exception ("raw"), a riemattn error not naming
the parameter ("unclear"), more than 5 s ("hang": tests/_sweep_guard.py's alarm, and a
faulthandler backstop for compiled code), a change to any argument ("mutated": every array is
passed as a read-only copy and every argument compared after the call, the valid call included),
NaN in the result ("nan"), or the acceptance of a value that must be rejected ("accepted": NaN/inf,
a wrong type, an unknown option, a wrong rank, a negative value for a parameter in
``CONSTRAINED``). Huge integers (10**30) and tiny floats (1e-300) probe the bounds on sizes and
steps (issue 58); ``max_steps`` is pinned low (tests/_sweep_valid.py) so that a solve shows its
documented bound within the limit. The known departures are listed, each with
its reason, in :data:`KNOWN` -- the one table of exceptions; an entry whose triple now passes is
reported as stale (remove it).

Sampling: none by default -- the whole catalogue runs (one run on the loaded 2-core machine took
15 s of CPU, inside the ~90 s budget; 33 s with issue 58's checks and 368 more triples, against 25 s
before them on the same machine back to back). ``RIEMATTN_SWEEP_STRIDE=k`` runs the triples with
``crc32(triple) % k == 0`` (deterministic; the valid call of every callable always runs), for quick
local runs. The counts (triples run, share clear, documented, known, failing) are written at the
end of the module with ``pytest -s``. ``RIEMATTN_SWEEP_RECORD=file`` appends each failure as a
JSON line (how tests/_sweep_found.py was generated).
"""

from __future__ import annotations

import collections
import fnmatch
import inspect
import json
import os
import pathlib
import sys
import time
import zlib

import numpy as np
import pytest

import _sweep_catalogue as cat
from _sweep_found import FOUND
from _sweep_valid import CONSTRAINED, INSTANCES, PINNED, VALID_AT

RECORD = os.environ.get("RIEMATTN_SWEEP_RECORD")
#: Run one triple in STRIDE (deterministic, by a hash of the triple); 1 (the default) runs them all.
STRIDE = int(os.environ.get("RIEMATTN_SWEEP_STRIDE", "1"))

#: (callable pattern, parameter pattern, kind pattern, verdict, reason): the one table of exceptions.
#: verdict "skip": the callable is not swept; "result": a documented result; otherwise the failure
#: verdict expected today (drop the entry when the sweep reports it stale). A "result" entry also
#: accepts a checker's AssertionError (riemattn.testing: that is the checker's documented verdict).
KNOWN = [
    # -- not swept --------------------------------------------------------------------------------
    ("*.CriticalPoint", "*", "*", "skip", "result record built by critical_points (fields not validated)"),
    ("*.Spectrum", "*", "*", "skip", "result record built by hessians.spectrum"),
    ("riemattn.solvers.core._trajectory.PerTrajectory", "*", "*", "skip", "result record built by integrate"),
    ("riemattn.solvers.core._trajectory.Trajectory", "*", "*", "skip", "result record built by integrate"),
    ("riemattn.solvers.explicit.steppers.StepResult", "*", "*", "skip", "record of one step (stepper protocol)"),
    ("riemattn.solvers.explicit.steppers.Interpolant", "*", "*", "skip", "record of a step's interpolant"),
    ("riemattn.solvers.core.events.Events", "*", "*", "skip", "result record built by integrate"),
    ("riemattn.runs.sweep.SweepResult", "*", "*", "skip", "result record built by sweep"),
    ("riemattn.analysis.meanfield.DensityTrajectory", "*", "*", "skip", "result record of CircleDensity.solve"),
    ("riemattn.runs.sweep_config.SimulatePoint", "*", "*", "skip", "record built by run_sweep_file's config"),
    ("riemattn.llm._loop_model.LoopModel", "*", "*", "skip", "record built by build_model/load_model"),
    ("riemattn.testing._fit.Fit*", "*", "*", "skip", "record built by the slope checks (testing/)"),
    ("riemattn.dynamics.kernels._kernel_pack.KernelPack", "*", "*", "skip", "record built by kernels.pack_field"),
    ("riemattn.solvers.stiff.rosenbrock_tableaux.RosenbrockTableau", "*", "*", "skip", "coefficient record (module constants)"),
    ("riemattn.dynamics.kernels.evaluate", "*", "*", "skip", "numba kernel on packed arrays (hot loop); inputs are packed by pack_field"),
    ("riemattn.dynamics.kernels.project", "*", "*", "skip", "numba kernel on packed arrays (hot loop)"),
    ("riemattn.dynamics.kernels.to_tangent", "*", "*", "skip", "numba kernel on packed arrays (hot loop)"),
    ("riemattn.dynamics.kernels.wnorm", "*", "*", "skip", "numba kernel on packed arrays (hot loop)"),
    ("riemattn.solvers.*.step", "*", "*", "skip", "stepper protocol (docs/steppers.md): called by integrate on checked input, per step"),
    ("riemattn.solvers.*.error_norm", "*", "*", "skip", "stepper protocol, per step"),
    ("riemattn.solvers.*.interpolant", "*", "*", "skip", "stepper protocol, per step"),
    ("riemattn.solvers.stiff.rosenbrock.*.jacobian", "*", "*", "skip", "stepper protocol, per step"),
    ("riemattn.solvers.stochastic.sde.*.gaussian", "*", "*", "skip", "SDE stepper protocol, per step"),
    ("riemattn.solvers.stochastic.sde.*.tangent_noise", "*", "*", "skip", "SDE stepper protocol, per step"),
    ("riemattn.solvers.stochastic.sde.*.walk", "*", "*", "skip", "SDE stepper protocol, per step"),
    ("*.take", "*", "*", "skip", "field batching protocol used by integrate's per-trajectory path"),
    ("riemattn.dynamics.layernorm.LayerNormField.block", "*", "*", "skip", "layer stepper protocol, per step"),
    ("riemattn.solvers.explicit.steppers.register", "*", "*", "skip", "mutates the global STEPPERS registry"),
    ("riemattn.solvers.lie_group.lie.CommutatorFree.classical_tableau", "*", "*", "skip", "abstract base class (no coefficients)"),
    ("riemattn.runs.sweep.SweepResult.open", "*", "*", "skip", "opens the store of a finished sweep (tests/runs/test_sweep.py)"),
    ("riemattn.analysis.hessians.InteractionHessian", "*", "*", "skip", "built by energy_hessian / potential_hessian (swept)"),
    ("riemattn.geometry.metrics.*.curvature_derivative", "*", "*", "skip", "geomstats' autodiff curvature derivative"),
    ("riemattn.geometry.metrics.*.parallel_transport", "*", "*", "skip", "needs direction or end_point (either, not both)"),
    ("riemattn.solvers.geodesics.InducedEllipsoidMetric.parallel_transport", "*", "*", "skip", "needs direction or end_point (either, not both)"),
    ("riemattn.solvers.geodesics.InducedEllipsoidMetric.curvature_derivative", "*", "*", "skip", "raises NotImplementedError on purpose (no closed form; the curvature itself is the Gauss equation's)"),
    ("riemattn.solvers.geodesics.InducedEllipsoidMetric.injectivity_radius", "*", "*", "skip", "raises NotImplementedError on purpose: no closed form (its message points at log_radius)"),
    ("riemattn.geometry.groups.*", "*", "*", "skip", "Lie frames, hot-loop protocol of the Lie steppers"),
    ("riemattn.geometry.lowrank.*", "*", "*", "skip", "low-rank expm kernels of the Lie steppers"),
    ("riemattn.geometry.*.*_to_*", "*", "*", "skip", "geomstats coordinate charts, not riemattn's"),
    ("riemattn.geometry.*.random_von_mises_fisher", "*", "*", "skip", "geomstats sampler"),
    ("riemattn.geometry.*.random_riemannian_normal", "*", "*", "skip", "geomstats sampler"),
    ("riemattn.geometry.metrics.*Metric", "*", "*", "skip", "built by the manifold (space, signature)"),
    ("riemattn.geometry.metrics.*.norm_factor_gradient", "*", "*", "skip",
     "geomstats' autodiff gradient: the NumPy backend raises AutodiffNotImplementedError on every call"),
    ("riemattn.solvers.geodesics.InducedEllipsoidMetric", "*", "*", "skip", "built by Ellipsoid(W, metric='euclidean')"),
    ("riemattn.experiments.reproduce", "*", "*", "skip", "runs every experiment (minutes); its CLI is swept by test_cli_hardening"),
    ("riemattn.runs._cluster.local_cluster", "*", "*", "skip", "starts Dask worker processes"),
    ("riemattn.runs.sweep.sweep", "*", "*", "skip", "runs a grid into a store on disk; bad grids: tests/runs/test_sweep.py"),
    ("riemattn.runs.sweep_config.*", "*", "*", "skip", "file-based entry points; bad files: tests/runs/test_sweep_config.py"),
    ("riemattn.runs.simulate.simulate_*", "*", "*", "skip", "file-based entry points; bad configs: tests/test_simulate*.py"),
    ("riemattn.runs._simulate_config.load_config", "*", "*", "skip", "file-based entry point"),
    ("riemattn.runs.simulate.build_model", "*", "*", "skip", "takes a validated config (validate_config is swept)"),
    ("riemattn.llm.*", "lm", "*", "skip", "needs a model (seconds to build): tests/llm/test_llm.py"),
    ("riemattn.llm.models.clone_architecture", "*", "*", "skip", "needs a model (tests/llm/test_llm.py)"),
    ("riemattn.llm.surgery.*", "*", "*", "skip", "needs a model (tests/llm/test_llm.py)"),
    ("riemattn.llm.models.randomize_weights", "*", "*", "skip", "needs a model (tests/llm/test_llm.py)"),
    ("riemattn.llm.models.weights_checksum", "*", "*", "skip", "needs a model (tests/llm/test_llm.py)"),
    ("riemattn.llm.models.load_*", "*", "*", "skip", "loads weights from disk or the network"),
    ("riemattn.llm.models.build_model", "*", "*", "skip", "builds a model (seconds): tests/llm/test_llm.py"),
    ("riemattn.llm.loop.*", "*", "*", "skip", "runs a model: tests/llm/test_llm.py"),
    ("riemattn.llm.plot.*", "*", "*", "skip", "plots a run's dataset: tests/llm/test_llm.py"),
    ("riemattn.llm.cli.*", "*", "*", "skip", "argparse glue: tests/test_cli*.py"),
]


# -- documented results ---------------------------------------------------------------------------
KNOWN += [("riemattn.dynamics.biases.as_bias", "bias", "-inf", "accepted",
           "a bias of -inf excludes the pair (documented in riemattn.dynamics.biases); a row of -inf is refused")]
KNOWN += [("riemattn.geometry.*.to_tangent", "*", "nan|inf|-inf", "result",
           "docs/index.md 'Errors', Finite: to_tangent lets NaN/inf through on purpose (a user field built "
           "on it turns NaN into status -3 in integrate)")]
KNOWN += [("riemattn.testing.checks.assert_*", "y", "nan|inf|-inf|float32|float16", "result",
           "a checker's AssertionError is its documented verdict: NaN/inf tokens are not on the manifold, and "
           "float32/float16 tokens are ~1e-7/1e-3 off it, beyond the checker's atol (their docstrings)"),
          ("riemattn.testing.slopes.check_order", "expected", "non_integer", "result",
           "expected is the slope theory predicts, a positive real")]
KNOWN += [("riemattn.geometry.*.belongs", "point", "nan|inf|-inf", "result",
           "a predicate: False for NaN/inf points (its docstring)"),
          ("riemattn.geometry.*.is_tangent", "vector|base_point", "nan|inf|-inf", "result",
           "a predicate: False where a vector or point holds NaN/inf (its docstring)")]
KNOWN += [("riemattn.*events.*", "terminal", "non_bool", "result",
           "terminal is a bool or an integer k >= 0, stop at the k-th crossing (Event docstring): 2 is valid")]
KNOWN += [("riemattn.analysis.weighted_clusters.*", "n", "non_integer", "result",
           "n is the total weight sum(w), a positive real (cluster_staircase passes float(w.sum()))")]
KNOWN += [("riemattn.analysis.meanfield.CircleDensity.transport", "*", "*", "skip",
           "takes rfft coefficients (complex), outside the catalogue")]
KNOWN += [("riemattn.dynamics.jacobians.lifted_attention_jacobian", "*", "*", "skip",
           "documented precondition (checked NumPy tokens on the manifold): per step of the Rosenbrock steppers"),
          ("riemattn.solvers.stiff.rosenbrock.lifted_jacobian", "*", "*", "skip",
           "per step of the Rosenbrock steppers, on the stepper's checked state")]
KNOWN += [("riemattn.analysis.theory.phase_boundary", "t", "wrong_rank|float32|float16|tensor", "result",
           "documented NaN (its Returns): where even beta = 0 has not clustered by time t"),
          *[("riemattn.analysis.theory.phase_boundary", p, "float32|tiny|huge", "result",
             "documented NaN (its Returns): where even beta = 0 has not clustered by time t (T(0) moves with n, eps)")
            for p in ("eps", "beta_max", "n")]]
#: The departures found and not fixed here (generated; tests/_sweep_found.py says how). A recording
#: run leaves them out, so that it records every departure there is.
KNOWN += [] if RECORD else FOUND


def _known(name, pname, kind):
    for entry in KNOWN:
        if fnmatch.fnmatchcase(name, entry[0]) and fnmatch.fnmatchcase(pname, entry[1]) \
                and any(fnmatch.fnmatchcase(kind, k) for k in entry[2].split("|")):
            return entry
    return None


CALLABLES = cat.public_callables()
#: Every triple's verdict before the KNOWN table is consulted (the classes of outcome, issue 58).
VERDICTS = collections.Counter()
COUNTS = {"callables": 0, "skipped": 0, "triples": 0, "clear": 0, "result": 0, "known": 0, "known_open": 0, "failing": 0,
          "catalogue": 0}


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    c = COUNTS
    run = max(c["triples"], 1)
    line = (f"API sweep: {c['callables']} callables swept ({c['skipped']} skipped by KNOWN), "
            f"{c['triples']} of {c['catalogue']} (callable, parameter, value) triples run"
            f"{'' if STRIDE == 1 else f' (1 in {STRIDE} sampled)'}: {c['clear']} clear riemattn errors "
            f"({100 * c['clear'] / run:.1f}%), {c['result']} documented results ({100 * c['result'] / run:.1f}%), "
            f"{c['known']} known departures ({c['known_open']} OPEN, {c['known'] - c['known_open']} with a "
            f"documented reason), {c['failing']} failing"
            + (f"; not importable (not swept): {sorted(cat.UNIMPORTABLE)}" if cat.UNIMPORTABLE else "")
            + "; outcomes: " + ", ".join(f"{k} {v}" for k, v in VERDICTS.most_common()))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)


def _fresh_target(name, owner, fn):
    """The callable to call (a bound method of a fresh instance for a method) and its parameters."""
    if owner is None:
        return fn, cat.parameters(fn, None)
    key = f"{owner.__module__}.{owner.__qualname__}"
    if key in INSTANCES:
        instance = INSTANCES[key]()
    else:
        ctor = cat.parameters(owner, None)
        kwargs = {p.name: cat.valid_example(key, p) for p in ctor if p.default is inspect.Parameter.empty}
        instance = owner(**kwargs)
    return getattr(instance, name.rsplit(".", 1)[1]), cat.parameters(fn, owner)


def _call(target, params, values):
    """``(call, passed)``: the call of ``target`` on ``values``, its arrays made read-only copies
    (:func:`_sweep_guard.freeze`), and ``{name: value passed}`` to compare after the call."""
    args, kwargs, passed = [], {}, {}
    for p in params:
        if p.name not in values:
            continue
        passed[p.name] = cat.freeze(values[p.name])
        if p.kind == p.POSITIONAL_ONLY:
            args.append(passed[p.name])
        else:
            kwargs[p.name] = passed[p.name]
    return (lambda: target(*args, **kwargs)), passed


def _pinned(name, pname):
    short = name.rsplit(".", 2)
    return any((key, pname) in VALID_AT for key in (name, ".".join(short[-2:]), short[-1]))


def _sampled(name, pname, kind):
    return zlib.crc32(f"{name}|{pname}|{kind}".encode()) % STRIDE == 0


def _bad_cases(name, params, examples):
    """``[(param name, kind, {param: value}, names a clear error may name)]`` for ``name``."""
    cases = []
    arrays = [p.name for p in params if isinstance(examples[p.name], np.ndarray) and examples[p.name].ndim >= 2]
    for p in params:
        for kind, value in cat.bad_values(examples[p.name], p.name):
            cases.append((p.name, kind, {p.name: value}, (p.name,)))
        if p.name in arrays and len(arrays) > 1:
            batch = {q: np.stack([examples[q]] * (2 if q == p.name else 3)) for q in arrays}
            cases.append((p.name, "batch", batch, tuple(arrays)))
    return cases


@pytest.mark.parametrize("name", list(CALLABLES))
def test_bad_input(name):
    owner, fn = CALLABLES[name]
    if _known(name, "*", "*") is not None and _known(name, "*", "*")[3] == "skip":
        COUNTS["skipped"] += 1
        return
    try:
        target, params = _fresh_target(name, owner, fn)
        examples = {p.name: cat.valid_example(name, p) for p in params}
    except ImportError as exc:  # an optional dependency (torch) missing: the core install
        pytest.skip(f"optional dependency missing: {exc}")
    COUNTS["callables"] += 1
    missing = [p for p, v in examples.items() if v is cat._NO_EXAMPLE]
    assert not missing, (f"{name}: no valid example for parameter(s) {missing}: add them to VALID (or "
                         f"VALID_AT) in tests/_sweep_valid.py, or the callable to KNOWN with a reason")
    required = {p.name: examples[p.name] for p in params if p.default is inspect.Parameter.empty
                or p.name in PINNED or _pinned(name, p.name)}
    call, passed = _call(target, params, required)
    snaps = {k: cat.snapshot(v) for k, v in passed.items()}
    out, exc = cat.run_guarded(call, seconds=60.0)  # first calls import (torch)
    if isinstance(exc, ImportError) or "is not installed" in str(exc):  # an extra missing: the core install
        pytest.skip(f"optional dependency missing: {exc}")
    why = cat.mutated(passed, snaps)
    if why is None and isinstance(exc, ValueError) and "read-only" in str(exc):
        why = f"writes into a read-only argument: {type(exc).__name__}: {exc}"
    assert why is None, f"{name}: the valid call changes its input ({why}); work on a copy"
    assert exc is None, f"{name}: the valid call fails ({type(exc).__name__}: {exc}); fix its example in tests/_sweep_valid.py"
    failures = []
    for pname, kind, bad, names in _bad_cases(name, params, examples):
        COUNTS["catalogue"] += 1
        if not _sampled(name, pname, kind):
            continue
        COUNTS["triples"] += 1
        target, _ = _fresh_target(name, owner, fn)
        call, passed = _call(target, params, {**required, **bad})
        got = cat.outcome(call, names, kind, pname in CONSTRAINED, watched=passed)
        VERDICTS[got.verdict] += 1
        entry = _known(name, pname, kind)
        if entry is not None and entry[3] == "result" and (got.verdict in ("result", "accepted", "nan") or (
                got.verdict == "raw" and got.detail.startswith("builtins.AssertionError"))):  # a checker's verdict
            COUNTS["result"] += 1
        elif got.ok:
            COUNTS[got.verdict] += 1
            if entry is not None and entry[3] != "result":
                failures.append(f"stale KNOWN entry {entry[:3]}: {pname}={kind} now gives {got.verdict}; remove it")
        elif entry is not None and entry[3] == got.verdict:
            COUNTS["known"] += 1
            COUNTS["known_open"] += entry[4].startswith("OPEN")
        else:
            COUNTS["failing"] += 1
            failures.append(f"{pname} = <{kind}>: {got.verdict} ({got.detail})")
            if RECORD:  # RIEMATTN_SWEEP_RECORD=file: the failures as JSON lines (to triage them)
                with open(RECORD, "a") as fh:
                    fh.write(json.dumps([name, pname, kind, got.verdict, got.detail]) + "\n")
    assert not failures, f"{name}:\n  " + "\n  ".join(failures)


def test_known_entries_match_public_callables():
    """Every KNOWN pattern matches some public callable (else it is stale or misspelt)."""
    missing = {".".join(n.split(".")[:2]) for n in cat.UNIMPORTABLE}  # e.g. riemattn.llm without torch
    unused = [e[0] for e in KNOWN if not any(fnmatch.fnmatchcase(n, e[0]) for n in CALLABLES)
              and ".".join(e[0].split(".")[:2]) not in missing]
    assert not unused, f"KNOWN patterns matching no public callable: {unused}"


def test_a_parameter_without_example_is_reported(monkeypatch):
    """A public callable with a parameter name the table does not know fails, saying what to add."""

    def new_public_function(y, zzz_unknown):
        return y

    monkeypatch.setitem(CALLABLES, "riemattn.fake.new_public_function", (None, new_public_function))
    monkeypatch.setattr(sys.modules[__name__], "COUNTS", dict.fromkeys(COUNTS, 0))
    monkeypatch.setattr(sys.modules[__name__], "VERDICTS", collections.Counter())
    monkeypatch.setattr(sys.modules[__name__], "RECORD", None)  # neither counted nor recorded
    with pytest.raises(AssertionError, match=r"no valid example for parameter\(s\) \['zzz_unknown'\]: add them to VALID"):
        test_bad_input("riemattn.fake.new_public_function")


def _plant(monkeypatch, name, fn):
    """Sweep ``fn`` as the public callable ``name`` (its one parameter y valid as the 3 x 3 identity),
    with the module's counters and recording set aside for the test."""
    monkeypatch.setitem(CALLABLES, name, (None, fn))
    monkeypatch.setattr(sys.modules[__name__], "COUNTS", dict.fromkeys(COUNTS, 0))
    monkeypatch.setattr(sys.modules[__name__], "VERDICTS", collections.Counter())
    monkeypatch.setattr(sys.modules[__name__], "RECORD", None)
    monkeypatch.setitem(cat.VALID, "y", lambda: np.eye(3))


def test_a_raw_error_is_reported(monkeypatch):
    """A callable that lets a NumPy error through for a bad value fails, naming parameter, kind, exception."""

    def leaky(y):
        return np.linalg.cholesky(np.asarray(y, dtype=float))  # raw LinAlgError / ValueError

    _plant(monkeypatch, "riemattn.fake.leaky", leaky)
    with pytest.raises(AssertionError) as info:
        test_bad_input("riemattn.fake.leaky")
    assert "y = <negative>: raw (numpy.linalg.LinAlgError: Matrix is not positive definite)" in str(info.value)
    assert "y = <nan>: nan (NaN in the result)" in str(info.value)


def _overwrites(y):
    """Planted defect: writes into its argument in place (NumPy refuses on the sweep's read-only copy)."""
    y[..., 0] = 0.0
    return y


def _unlocks_and_overwrites(y):
    """Planted defect: makes its argument writeable again, then changes it (found by the comparison)."""
    y.setflags(write=True)
    y *= 2.0
    return y


@pytest.mark.parametrize("plant, detail", [
    (_overwrites, "writes into a read-only argument: ValueError: assignment destination is read-only"),
    (_unlocks_and_overwrites, "argument y mutated: changed by up to 1"),
])
def test_a_mutated_input_is_reported(monkeypatch, plant, detail):
    """Issue 58: a callable that changes an array it was given fails the sweep ("mutated"), in the
    valid call already (both ways: a write into the read-only copy, or a change behind its back)."""
    _plant(monkeypatch, "riemattn.fake.mutates", plant)
    with pytest.raises(AssertionError) as info:
        test_bad_input("riemattn.fake.mutates")
    message = str(info.value)
    if plant is _overwrites:  # NumPy stops the write
        assert ("the valid call changes its input (writes into a read-only argument: ValueError: assignment "
                "destination is read-only)") in message
        got = cat.outcome(lambda: plant(cat.freeze(np.eye(3))), ("y",), "nan")
    else:  # the comparison finds it
        assert "the valid call changes its input (argument y mutated: changed by up to 1)" in message
        y = cat.freeze(np.eye(3))
        got = cat.outcome(lambda: plant(y), ("y",), "nan", watched={"y": y})
    assert got.verdict == "mutated" and got.detail.startswith(detail), got


def test_a_hang_is_reported(monkeypatch):
    """Issue 58: a call that runs past the time limit fails the sweep ("hang"), the limit lowered to
    0.2 s here (5 s in the sweep) for a callable that sleeps 30 s on a NaN."""
    import _sweep_guard

    def sleeps_on_nan(y):
        if np.isnan(np.asarray(y, dtype=float)).any():
            time.sleep(30)
        return float(np.sum(y))

    monkeypatch.setattr(_sweep_guard, "TIME_LIMIT", 0.2)
    _plant(monkeypatch, "riemattn.fake.sleeps_on_nan", sleeps_on_nan)
    start = time.perf_counter()
    with pytest.raises(AssertionError) as info:
        test_bad_input("riemattn.fake.sleeps_on_nan")
    assert "y = <nan>: hang (longer than 0.2 s)" in str(info.value)
    assert time.perf_counter() - start < 10  # the sleep was cut short


def test_a_hang_in_compiled_code_ends_the_process():
    """Issue 58: compiled code that never returns to Python (the alarm cannot interrupt it) is ended
    by the faulthandler backstop, with the stacks of its threads: a numba loop that spins forever,
    under a limit of 0.2 s and a backstop of 1 s (60 s in the sweep)."""
    import subprocess

    code = (
        "import sys; sys.path.insert(0, 'tests')\n"
        "import numba, numpy as np, _sweep_guard as g\n"
        "g.BACKSTOP = 1.0\n"
        "@numba.njit(cache=False)\n"
        "def spin(a):\n"
        "    while a[0] == 0.0:\n"
        "        a[1] += 1.0\n"
        "a = np.zeros(2); spin(np.ones(2))  # compiled outside the limit\n"
        "with g.time_limit(0.2):\n"
        "    spin(a)\n"
        "print('returned')\n"
    )
    root = pathlib.Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "returned" not in proc.stdout
    line = code.splitlines().index("    spin(a)") + 1  # the stack dumped names the call that hung
    assert "Timeout (0:00:01.200000)!" in proc.stderr and f"line {line} in <module>" in proc.stderr, proc.stderr
