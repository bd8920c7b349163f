"""The configuration of ``riemattn simulate``: defaults, schema checks and the TOML reader.

Private: the public names (:data:`DEFAULTS`, :func:`validate_config`, :func:`load_config`) are
re-exported by :mod:`riemattn.runs.simulate`, whose docstring describes every key.
"""

from __future__ import annotations

import math
import tomllib

import numpy as np

from ._paths import check_input_file
from .._validation import check_choice, check_spd
from ..errors import InputTypeError, ValidationError
from ..solvers.explicit.steppers import STEPPERS

__all__ = ["DEFAULTS", "RECIPES", "load_config", "validate_config"]

DEFAULTS = {
    "seed": 0,
    "trajectories": 4,
    "tokens": 10,
    "d": 3,
    "manifold": {"kind": "sphere", "W": "random-spd", "W_cond": 4.0},
    "attention": {
        "heads": 1, "P": "uniform", "P_scale": 0.5, "modulation": "none", "U": "identity",
        "U_scale": 0.5, "mask": "full", "normalization": "paper", "beta": 1.0,
    },
    "initial": {"distribution": "cube"},
    "integration": {"stepper": "rk4", "t1": 10.0, "dt": 0.01, "rtol": 1e-6, "atol": 1e-9, "saves": 101},
}

RECIPES = ("uniform", "gaussian", "symmetric", "spd", "identity")


def _kind(value) -> str:
    """The TOML type of a parsed value, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"


def _text(value) -> str:
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _got(value) -> str:
    return f"got {_text(value)} ({_kind(value)})"


def _integer(value, name: str, minimum: int, note: str = "") -> int:
    expected = f"{name} must be an integer >= {minimum}{note}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputTypeError(f"{expected}, {_got(value)}.")
    if value < minimum:
        raise ValidationError(f"{expected}, got {value}.")
    return value


def _number(value, name: str, minimum: float | None = None, strict: bool = False) -> float:
    if minimum == 0 and strict:
        expected = f"{name} must be a positive finite number"
    else:
        bound = "" if minimum is None else f" {'>' if strict else '>='} {minimum:g}"
        expected = f"{name} must be a finite number{bound}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputTypeError(f"{expected}, {_got(value)}.")
    number = float(value)
    if not math.isfinite(number) or (minimum is not None and (number <= minimum if strict else number < minimum)):
        raise ValidationError(f"{expected}, got {value!r}.")
    return number


def _choice(value, name: str, choices) -> str:
    if not isinstance(value, str):
        raise InputTypeError(f"{name} must be one of {sorted(choices)}, {_got(value)}.")
    return check_choice(value, name, choices)


def _leaves(value):
    if isinstance(value, list):
        for item in value:
            yield from _leaves(item)
    else:
        yield value


def _array(value, name: str, shapes: tuple, words: str) -> np.ndarray:
    """A TOML array of numbers of one of ``shapes``, finite."""
    for leaf in _leaves(value):
        if isinstance(leaf, bool) or not isinstance(leaf, (int, float)):
            raise InputTypeError(f"{name} must contain numbers only; it contains {_text(leaf)} ({_kind(leaf)}).")
    try:
        arr = np.array(value, dtype=float)
    except ValueError:  # ragged
        raise ValidationError(f"{name} must be {words}; its rows have different lengths.") from None
    if arr.shape not in shapes:
        raise ValidationError(f"{name} must be {words}, got an array of shape {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"{name} must contain finite numbers, got nan or inf.")
    return arr


def _matrices(value, name: str, d: int, h: int | None, choices) -> None:
    """A recipe name from ``choices``, a (d, d) matrix, or (when ``h``) a list of h such matrices."""
    if isinstance(value, str):
        _choice(value, name, choices)
        return
    if not isinstance(value, list):
        raise InputTypeError(f"{name} must be one of {sorted(choices)} or a ({d}, {d}) matrix, {_got(value)}.")
    shapes = ((d, d),) if h is None else ((d, d), (h, d, d))
    words = f"a ({d}, {d}) matrix" if h is None else f"a ({d}, {d}) matrix or a list of heads = {h} such matrices"
    arr = _array(value, name, shapes, words)
    if name == "manifold.W":
        check_spd(arr, name, d)


def _merge(defaults: dict, given: dict, where: str) -> dict:
    for key in given:
        if key not in defaults:
            raise ValidationError(f"unknown key {where}{key!r} in the configuration; known: {sorted(defaults)}.")
    out = {}
    for key, default in defaults.items():
        value = given.get(key, default)
        if isinstance(default, dict):
            if not isinstance(value, dict):
                raise InputTypeError(f"{where}{key} must be a table ([{where}{key}]), {_got(value)}.")
            value = _merge(default, value, f"{where}{key}.")
        elif isinstance(value, dict):
            raise InputTypeError(f"{where}{key} must be a value, not a table ([{where}{key}]).")
        out[key] = value
    return out


def validate_config(given: dict) -> dict:
    """The configuration ``given`` (a parsed TOML table) merged with :data:`DEFAULTS` and checked.

    Every key's type and range is checked before any work starts; the first problem raises
    :class:`~riemattn.errors.InputTypeError` (wrong TOML type) or
    :class:`~riemattn.errors.ValidationError` (wrong value), naming the key as written in the file
    (``integration.saves``). Integers are not truncated: ``tokens = 2.7`` and ``tokens = true`` are
    errors. Returns a new dict; ``given`` is not modified.
    """
    if not isinstance(given, dict):
        raise InputTypeError(f"the configuration must be a table (dict), {_got(given)}.")
    cfg = _merge(DEFAULTS, given, "")
    _integer(cfg["seed"], "seed", 0)
    _integer(cfg["trajectories"], "trajectories", 1)
    _integer(cfg["tokens"], "tokens", 1)
    d = _integer(cfg["d"], "d", 2)
    man = cfg["manifold"]
    _choice(man["kind"], "manifold.kind", ("sphere", "ellipsoid"))
    _matrices(man["W"], "manifold.W", d, None, ("random-spd",))
    _number(man["W_cond"], "manifold.W_cond", 1.0)
    att = cfg["attention"]
    h = _integer(att["heads"], "attention.heads", 1)
    _matrices(att["P"], "attention.P", d, h, RECIPES)
    _number(att["P_scale"], "attention.P_scale", 0.0)
    _choice(att["modulation"], "attention.modulation", ("none", "sinusoid"))
    _matrices(att["U"], "attention.U", d, h, RECIPES)
    _number(att["U_scale"], "attention.U_scale", 0.0)
    _choice(att["mask"], "attention.mask", ("full", "causal"))
    _choice(att["normalization"], "attention.normalization", ("paper", "softmax", "mean"))
    _number(att["beta"], "attention.beta")
    _choice(cfg["initial"]["distribution"], "initial.distribution", ("cube", "uniform"))
    integ = cfg["integration"]
    _choice(integ["stepper"], "integration.stepper", tuple(STEPPERS))
    _number(integ["t1"], "integration.t1", 0.0, strict=True)
    _number(integ["dt"], "integration.dt", 0.0, strict=True)
    _number(integ["rtol"], "integration.rtol", 0.0, strict=True)
    _number(integ["atol"], "integration.atol", 0.0, strict=True)
    # saves = 1 would be t = 0 alone (t1 ignored): rejected, not redefined
    _integer(integ["saves"], "integration.saves", 2, " (evenly spaced times from 0 to t1, both saved)")
    return cfg


def load_config(path) -> dict:
    """Read a TOML configuration file and return it checked and merged (:func:`validate_config`)."""
    text = check_input_file(path, "config file")
    try:
        given = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValidationError(f"config file {str(path)!r} is not valid TOML: {exc}") from None
    return validate_config(given)
