r"""Events of :func:`riemattn.integrate`: when a function of the state crosses zero, per trajectory.

An event is a function ``g(t, y)`` of the time and the tokens whose zero crossings are wanted
(consensus reached, two clusters merging, a token leaving a hemisphere: see
:mod:`riemattn.analysis.events` for ready-made ones). Pass :class:`Event` objects, or plain
callables with SciPy's optional attributes ``g.terminal`` and ``g.direction``, as
``integrate(..., events=...)``.

Semantics (the same for fixed and adaptive steppers, projected and Lie, NumPy and torch):

* ``g`` is evaluated on *accepted* steps only, at the step's end (one call per accepted step,
  vectorised over the trajectories being stepped) and, with ``samples = k > 0``, at ``k``
  equally spaced interior points of the step on the stepper's dense output
  (:meth:`riemattn.solvers.steppers.Stepper.interpolant`: native for ``dopri5``/``dop853``, a
  fresh step of size theta h for the others; both on the manifold).
* A crossing is a sign change between consecutive sample points ``a < b`` of a step: *up* when
  ``g(a) < 0 <= g(b)``, *down* when ``g(a) > 0 >= g(b)``. ``direction`` +1 keeps up crossings,
  -1 down crossings, 0 both. A zero at a sample point is counted once (in the step or interval
  that ends on it). A tangential touch (``g`` reaches 0 without changing sign) is found only when
  a sample point lands on the zero exactly; an even number of crossings between two sample
  points cancel and are not found (with ``samples = k`` each sub-interval is h / (k + 1) long).
* Each crossing is located by a safeguarded Illinois (regula falsi) iteration on
  ``theta -> g(t + theta h, u(theta))``, ``u`` the dense output, until the bracket is at most
  ``event_tol`` long in t. The reported time is the bracket's end *after* the crossing, so the
  reported state has crossed (``g`` has its new sign or is 0); it is within ``event_tol`` of the
  dense output's zero (the dense output itself carries the stepper's error).
* ``terminal = k`` (``True`` means 1) stops a trajectory at its k-th crossing of that event: its
  time and state are those of the event, its status is ``TERMINAL`` (2), it costs no further
  work in the adaptive loop (compaction), and crossings after it in the same step are dropped.

Cost: one ``g`` call per accepted step and event (plus ``samples`` dense-output evaluations and
``g`` calls); a step with a crossing adds the root finding (typically 5-15 dense-output
evaluations on the rows being stepped, each one stepper step for steppers without a native dense
output) and, for tensors, a few synchronisations with the device.

References
----------
E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed.,
section II.6 (dense output, event location). M. Dowell, P. Jarratt, "A modified regula falsi
method for computing the root of an equation", BIT 11 (1971) (the Illinois method).
L. F. Shampine, S. Thompson, "Event location for ordinary differential equations", Comput. Math.
Appl. 39 (2000).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from ..._backend import is_torch, to_numpy
from ..._validation import plain
from ...errors import InputTypeError, ValidationError

__all__ = ["Event", "Events", "as_events"]  # TERMINAL (= 2), the status code, is not listed: an int
# shares its identity with other constants (the API pages key names by object)

#: status code of a trajectory stopped by a terminal event
TERMINAL = 2

_DIRECTIONS = {"up": 1, "down": -1, "both": 0, 1: 1, -1: -1, 0: 0}
#: The most interior samples per step an Event may ask for (each is a dense-output evaluation and a g call).
MAX_SAMPLES = 10_000

@dataclass(frozen=True)
class Event:
    """A zero crossing of ``g(t, y)`` to detect during :func:`riemattn.integrate`.

    Parameters
    ----------
    g : callable
        ``g(t, y)``: ``y`` tokens of shape (m, l, d) (m trajectories, flattened; a sub-batch of
        the solve), ``t`` a float or an array (m,) of their times; returns an array (m,) (NumPy
        or a tensor like ``y``). It must treat the trajectories independently.
    direction : {0, 1, -1, "both", "up", "down"}
        Which crossings count: up (from negative to non-negative), down, or both. Exactly one of
        these (``2.5`` or ``True`` raise ValidationError).
    terminal : bool or int
        ``k >= 1`` (``True``: 1): stop the trajectory at its k-th crossing; ``False``: never.
    name : str, optional
        Label in the results (default: ``g.__name__`` or ``"event<i>"``).
    samples : int, 0 <= samples <= 10_000
        Interior sample points per accepted step (0: the step's ends only). Two crossings more
        than h / (samples + 1) apart inside one step are both found. Each costs a dense-output
        evaluation and a ``g`` call per step: the bound keeps that below ~10^4 times a step's work.
    spec : tuple, optional
        A declarative form of ``g`` the compiled engine evaluates itself (``(name, *numbers)``;
        set by the built-in events of :mod:`riemattn.analysis.events`, see
        ``integrate(..., engine=...)``); None for a user function, which runs on the NumPy engine.
        It must describe the same function as ``g``.

    References
    ----------
    SciPy ``solve_ivp(events=...)`` (attributes ``terminal``, ``direction``), single trajectory.
    """

    g: Callable
    direction: int | str = 0
    terminal: bool | int = False
    name: str | None = None
    samples: int = 0
    spec: tuple | None = None

    def __post_init__(self):
        if not callable(self.g):
            raise InputTypeError(f"an event's g must be callable as g(t, y), got {type(self.g).__name__}.")
        d = self.direction
        # exactly 1, -1 or 0 (2.5 is not read as 1); a bool is neither a direction nor a number here
        key = d if isinstance(d, str) else (int(d) if isinstance(d, Real) and not isinstance(d, (bool, np.bool_))
                                            and d in (1, -1, 0) else None)
        if key not in _DIRECTIONS:
            raise ValidationError(f"direction must be one of 'up', 'down', 'both', 1, -1, 0, got {plain(d)}.")
        object.__setattr__(self, "direction", _DIRECTIONS[key])
        t = self.terminal
        if isinstance(t, bool) or t is None:
            k = int(bool(t))
        elif (isinstance(t, Integral) or (isinstance(t, Real) and float(t).is_integer())) and t >= 0:
            k = int(t)
        else:
            raise ValidationError(f"terminal must be a bool or an integer >= 0 (stop at that crossing), got {plain(t)}.")
        object.__setattr__(self, "terminal", k)
        if self.name is not None and not isinstance(self.name, str):
            raise InputTypeError(f"an event's name must be a str or None, got {plain(self.name)}.")
        s = self.samples
        if isinstance(s, bool) or not isinstance(s, Integral) or not 0 <= s <= MAX_SAMPLES:
            raise ValidationError(f"samples must be an integer in [0, {MAX_SAMPLES}], got {plain(s)}.")
        object.__setattr__(self, "samples", int(s))
        if self.spec is not None and (not isinstance(self.spec, tuple) or not self.spec
                                      or not isinstance(self.spec[0], str)):
            raise ValidationError(f"spec must be None or a tuple (name, *numbers), got {self.spec!r}.")


def _on_host(event):
    """An event whose g sees NumPy arrays (for ``riemattn.use_device``: NumPy in, computed on device)."""
    g = event.g

    def host_g(t, y):
        return g(to_numpy(t) if is_torch(t) else t, to_numpy(y))

    host_g.__name__ = getattr(g, "__name__", "g")
    return type(event)(host_g, event.direction, event.terminal, event.name, event.samples)


def as_events(events) -> tuple:
    """``events`` (None, an :class:`Event`, a callable or a list of them) as a tuple of Events
    with unique names; plain callables keep SciPy's ``terminal`` / ``direction`` attributes."""
    if events is None:
        return ()
    items = [events] if (isinstance(events, Event) or callable(events)) else events
    try:
        items = list(items)
    except TypeError:
        raise InputTypeError(f"events must be an Event, a callable g(t, y) or a list of them, got "
                             f"{type(events).__name__}.") from None
    out = []
    for i, e in enumerate(items):
        if not isinstance(e, Event):
            if not callable(e):
                raise InputTypeError(f"events[{i}] must be an Event or a callable g(t, y), got {type(e).__name__}.")
            d = getattr(e, "direction", 0)  # SciPy's attribute: its sign counts (solve_ivp's convention)
            if isinstance(d, Real) and not isinstance(d, (bool, np.bool_)) and math.isfinite(d):
                d = int(np.sign(d))
            e = Event(e, d, getattr(e, "terminal", False), None)
        if e.name is None:
            name = getattr(e.g, "__name__", "")
            e = Event(e.g, e.direction, e.terminal, name if name and name != "<lambda>" else f"event{i}", e.samples,
                      e.spec)
        out.append(e)
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise ValidationError(f"event names must be unique, got {names}.")
    return tuple(out)


@dataclass
class Events:
    """The crossings found by :func:`riemattn.integrate`, per trajectory (padded arrays).

    Attributes
    ----------
    names : tuple of str
        The events, in the order given; ``which`` indexes it.
    count : ndarray of int, shape batch
        Number of crossings recorded per trajectory (all events together).
    t : ndarray, shape batch + (m,)
        Their times in increasing order, ``m = count.max()``; NaN beyond ``count``.
    which : ndarray of int, shape batch + (m,)
        Index into ``names`` of the event of each crossing; -1 beyond ``count``.
    y : ndarray, shape batch + (m, l, d), or None
        Tokens at the crossings (NaN beyond ``count``); None when ``save_fn`` was given.
    observables : dict
        With ``save_fn``: its values at the crossings, name -> batch + (m, ...).
    t_stop : ndarray of float, shape batch
        Time at which a terminal event stopped the trajectory (NaN where none did).
    """

    names: tuple
    count: np.ndarray
    t: np.ndarray
    which: np.ndarray
    y: object
    observables: dict
    t_stop: np.ndarray

    def of(self, name) -> np.ndarray:
        """Times of the crossings of one event: batch + (m,), NaN-padded (m: its largest count)."""
        if name not in self.names:
            raise ValidationError(f"no event named {name!r}; events: {list(self.names)}.")
        k = self.names.index(name)
        mask = self.which == k
        n = mask.sum(axis=-1)
        m = int(n.max(initial=0))
        out = np.full(self.count.shape + (m,), np.nan)
        idx = np.cumsum(mask, axis=-1) - 1
        b = np.nonzero(mask)
        out[b[:-1] + (idx[b],)] = self.t[b]
        return out

