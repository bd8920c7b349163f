"""The catalogue of tests/suites/test_api_sweep.py: what is public, valid examples, bad values, outcomes.

* :func:`public_callables` walks riemattn and every public submodule (``pkgutil``) and takes each
  name of each ``__all__`` that is callable, plus the public methods (defined in riemattn, not
  inherited from geomstats or ``object``) of each public class.
* :func:`valid_example` gives a valid value for a parameter from :data:`VALID` (keyed by the
  parameter's name; :data:`VALID_AT` overrides it for one callable), else the parameter's
  default when that is not None. A parameter with neither has no example: the sweep fails and
  says to add its name to :data:`VALID`.
* :func:`bad_values` derives the bad values of a parameter from the type of its valid example.
* :func:`run_guarded` calls under the time limit of tests/_sweep_guard.py and :func:`outcome`
  classifies the result (a changed argument is ``mutated``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import pkgutil
import time

import numpy as np

import riemattn as ra
from riemattn.errors import RiemattnError

from _sweep_guard import TIME_LIMIT, Hang, freeze, mutated, snapshot, time_limit  # noqa: F401 (re-exported)
from _sweep_valid import FREE_TEXT, VALID, VALID_AT

#: A huge integer (a size, an order, a number of samples or steps) and a tiny positive float (a
#: step, a tolerance): work beyond memory or max_steps must be refused before it starts (issue 58).
HUGE = 10**30
TINY = 1e-300


# ------------------------------------------------------------------------------------------------
# what is public
# ------------------------------------------------------------------------------------------------
#: Public modules that could not be imported (an optional dependency missing, e.g. torch in the
#: core install): not swept, named in the summary.
UNIMPORTABLE = {}


def public_modules():
    """riemattn and every submodule whose dotted path has no part starting with ``_``."""
    mods = {"riemattn": ra}
    for info in pkgutil.walk_packages(ra.__path__, "riemattn.", onerror=lambda name: None):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        try:
            mods[info.name] = importlib.import_module(info.name)
        except (ImportError, RiemattnError) as exc:  # riemattn.llm without torch raises a RiemattnError
            UNIMPORTABLE[info.name] = f"{type(exc).__name__}: {exc}"
    return mods


def _canonical(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def public_callables():
    """``{name: (owner_class or None, callable)}`` for every public function, class and method.

    Functions and classes are named where they are defined (``module.qualname``), once each
    however many ``__all__`` list them; methods as ``module.Class.method``.
    """
    found = {}
    for mod in public_modules().values():
        for attr in getattr(mod, "__all__", ()):
            try:
                obj = getattr(mod, attr)
            except (ImportError, RiemattnError) as exc:  # riemattn.llm's names without torch
                UNIMPORTABLE[f"{mod.__name__}.{attr}"] = f"{type(exc).__name__}: {exc}"
                continue
            if inspect.ismodule(obj) or not callable(obj):
                continue
            found.setdefault(_canonical(obj), (None, obj))
    for name, (_, obj) in list(found.items()):
        if not inspect.isclass(obj) or issubclass(obj, BaseException):
            continue
        for klass in obj.__mro__:
            if not klass.__module__.startswith("riemattn"):
                continue
            for meth, fn in vars(klass).items():
                if meth.startswith("_") or isinstance(fn, (property, type)):
                    continue
                if isinstance(fn, (staticmethod, classmethod)):
                    fn = fn.__func__
                if callable(fn):
                    found.setdefault(f"{name}.{meth}", (obj, fn))
    return dict(sorted(found.items()))


def parameters(fn, owner):
    """The sweepable parameters of ``fn``: no ``self``/``cls``, no ``*args``/``**kwargs``."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if owner is not None and params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [p for p in params if not p.name.startswith("_")]


# ------------------------------------------------------------------------------------------------
# valid examples
# ------------------------------------------------------------------------------------------------
_NO_EXAMPLE = object()


def valid_example(name: str, param):
    """A fresh valid value for ``param`` of callable ``name``, or ``_NO_EXAMPLE``."""
    short = name.rsplit(".", 2)
    keys = [name, ".".join(short[-2:]), short[-1]]
    for key in keys:
        if (key, param.name) in VALID_AT:
            return VALID_AT[key, param.name]()
    if param.name in VALID:
        return VALID[param.name]()
    if param.default is not inspect.Parameter.empty and param.default is not None:
        return param.default
    return _NO_EXAMPLE


# ------------------------------------------------------------------------------------------------
# bad values
# ------------------------------------------------------------------------------------------------
def _torch(value):
    try:
        import torch
    except ImportError:  # the core install: no tensor values
        return None
    return torch.as_tensor(np.asarray(value, dtype=np.float64))


def _poke(arr, fill):
    out = np.array(arr, dtype=np.float64, copy=True)
    out.flat[(out.size - 1) // 2] = fill
    return out


def bad_values(value, pname: str):
    """``[(kind, value)]`` derived from the valid example ``value`` of the parameter ``pname``.

    kinds: wrong_type, nan, inf, -inf, negative, 1e300, empty, wrong_rank (a trailing axis),
    flattened, float32, float16, tensor, non_integer, unknown_option, huge (an integer 10**30: a
    size, an order, a count of steps; issue 58) and tiny (a float 1e-300: a step, a tolerance);
    ``batch`` (a leading axis of 2 here and of 3 on the other array parameters) is added by the
    sweep itself.
    """
    return [(kind, bad) for kind, bad in _bad_values(value, pname) if not (kind == "tensor" and bad is None)]


def _bad_values(value, pname):
    if isinstance(value, bool):
        return [("wrong_type", "yes"), ("non_bool", 2)]
    if isinstance(value, (int, np.integer)):
        return [("wrong_type", "abc"), ("nan", float("nan")), ("inf", float("inf")),
                ("non_integer", 2.5), ("negative", -1 - int(value)), ("1e300", 1e300), ("huge", HUGE)]
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return [("wrong_type", "abc"), ("nan", float("nan")), ("inf", float("inf")), ("-inf", -float("inf")),
                ("negative", -abs(v) - 1.0), ("1e300", 1e300), ("tiny", TINY), ("wrong_rank", np.full(2, v)),
                ("float32", np.float32(v)), ("tensor", _torch(v))]
    if isinstance(value, str):
        return [("wrong_type", 3.0)] + ([] if pname in FREE_TEXT else [("unknown_option", "no-such-option")])
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
        out = [("wrong_type", "abc"), ("nan", _poke(value, np.nan)), ("inf", _poke(value, np.inf)),
               ("-inf", _poke(value, -np.inf)), ("negative", -value), ("1e300", value * 1e300 + 1e300 * (value == 0)),
               ("wrong_rank", value[..., None]), ("float32", value.astype(np.float32)),
               ("float16", value.astype(np.float16)), ("tensor", _torch(value))]
        if value.ndim:
            out += [("empty", value[:0])]
        if value.ndim > 1:
            out += [("flattened", value.reshape(-1))]
        return out
    if isinstance(value, tuple) and value and all(isinstance(v, (int, float)) for v in value):
        # the last entry made bad (a 1-tuple becomes (nan,): (value[0], nan)[:1] was the valid value)
        return [("wrong_type", "abc"), ("nan", value[:-1] + (float("nan"),)),
                ("inf", value[:-1] + (float("inf"),)), ("negative", tuple(-abs(v) - 1 for v in value)),
                ("empty", ()), ("wrong_rank", value + value), ("tensor", _torch(value))] + (
            [("huge", value[:-1] + (HUGE,))] if isinstance(value[-1], int) else [("tiny", value[:-1] + (TINY,))])
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [("wrong_type", "abc"), ("huge", value[:-1] + [HUGE])]
    if callable(value) and not inspect.isclass(value):
        return [("wrong_type", "abc")]
    return [("wrong_type", "abc")]


#: Kinds whose acceptance (a result rather than an error) is itself a failure.
#: (A trailing axis or a flattened array may be a valid layout of another d, and an array where a
#: scalar is meant may be a documented per-trajectory value: those only must not fail raw or NaN.)
MUST_REJECT = {"wrong_type", "nan", "inf", "-inf", "non_integer", "non_bool", "unknown_option", "batch"}


# ------------------------------------------------------------------------------------------------
# running and classifying
# ------------------------------------------------------------------------------------------------
def _finish(out):
    """Lazy results are made to do their work: a context manager is entered, a strategy drawn."""
    if isinstance(out, contextlib.AbstractContextManager) and hasattr(out, "gen"):
        with out:
            return None
    if type(out).__module__.startswith("hypothesis"):
        return out.example()
    return out


def run_guarded(call, seconds=None):
    """``(result, exception)`` of ``call()`` under the time limit, warnings silenced."""
    import warnings

    try:
        with time_limit(seconds), np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _finish(call()), None
    except Hang as exc:
        return None, exc
    except Exception as exc:  # noqa: BLE001 -- classified by the caller
        return None, exc


def has_nan(out, depth=0) -> bool:
    """Whether the result holds a NaN anywhere (arrays, tensors, numbers, containers, dataclasses)."""
    if depth > 4 or out is None or isinstance(out, (str, bytes, type)):
        return False
    if isinstance(out, float):
        return out != out
    if type(out).__module__.startswith("torch") and hasattr(out, "is_floating_point"):
        return bool(out.is_floating_point() and out.isnan().any())
    if isinstance(out, (np.ndarray, np.generic)):
        return out.dtype.kind in "fc" and bool(np.isnan(out).any())
    if isinstance(out, (tuple, list)):
        return any(has_nan(o, depth + 1) for o in out)
    if isinstance(out, dict):
        return any(has_nan(o, depth + 1) for o in out.values())
    if isinstance(out, ra.Trajectory):
        return has_nan(out.t) or has_nan(out.y)
    if dataclasses.is_dataclass(out):
        return any(has_nan(getattr(out, f.name), depth + 1) for f in dataclasses.fields(out)
                   if f.name not in ("t_fail",))
    return False


@dataclasses.dataclass
class Outcome:
    """What one (callable, parameter, kind) call gave: ``verdict`` and a one-line ``detail``."""

    verdict: str  # clear | result | unclear | raw | hang | mutated | nan | accepted
    detail: str = ""
    seconds: float = 0.0

    @property
    def ok(self):
        return self.verdict in ("clear", "result")


def outcome(call, names, kind, constrained=False, watched=None):
    """Classify ``call()``: ``names`` are the parameter names a clear error may name; ``watched``
    ({name: value passed}, arrays read-only by :func:`freeze`) must hold the same data after it."""
    watched = watched or {}
    snaps = {name: snapshot(value) for name, value in watched.items()}
    start = time.perf_counter()
    out, exc = run_guarded(call)
    took = time.perf_counter() - start
    if isinstance(exc, Hang):
        return Outcome("hang", str(exc), took)
    why = mutated(watched, snaps)
    if why is not None:
        return Outcome("mutated", why, took)
    if isinstance(exc, ValueError) and "read-only" in str(exc) and not isinstance(exc, RiemattnError):
        return Outcome("mutated", f"writes into a read-only argument: {type(exc).__name__}: {exc}", took)
    if isinstance(exc, RiemattnError):
        msg = str(exc)
        if any(n in msg for n in names):
            return Outcome("clear", f"{type(exc).__name__}", took)
        return Outcome("unclear", f"{type(exc).__name__}: {msg[:160]}", took)
    if exc is not None:
        return Outcome("raw", f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:160]}", took)
    if has_nan(out):
        return Outcome("nan", "NaN in the result", took)
    if kind in MUST_REJECT or (kind == "negative" and constrained):
        return Outcome("accepted", f"accepted {kind}", took)
    return Outcome("result", "", took)
