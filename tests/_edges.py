"""The registry of the edge property suite (tests/test_edges*.py): what is covered, discovered.

* ``STEPPERS``: every stepper registered in ``riemattn.STEPPERS``, read at collection -- a new
  registered stepper is covered without editing the tests;
* ``MANIFOLD_KINDS`` / ``METRICS``: every manifold kind of ``riemattn.testing.strategies`` and
  every ellipsoid metric of ``ELLIPSOID_METRICS`` (tests/test_edges_manifolds.py checks that every
  manifold class riemattn exports is drawn);
* ``ENGINES``: the integration engines of ``integrate(..., engine=...)``: every edge test runs on
  each;
* ``KNOWN``: the strict xfails, each a bug that another branch fixes (reason names the issue item);
  a fix turns its mark into an XPASS failure, and the mark is removed then;
* ``budget(n)``: examples per property, scaled by the Hypothesis profile (n in ``ci``, 5n in
  ``thorough``, n/10 in ``dev``).
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import settings

import riemattn as ra
from riemattn.geometry.ellipsoid import ELLIPSOID_METRICS
from riemattn.testing import strategies as rs

STEPPERS = sorted(ra.STEPPERS)
ADAPTIVE = frozenset(n for n in STEPPERS if ra.STEPPERS[n].adaptive)
MANIFOLD_KINDS = rs.MANIFOLD_KINDS
METRICS = tuple(ELLIPSOID_METRICS)
#: the integration engines (``integrate(..., engine=...)``); on "compiled", a call the compiled
#: engine does not support (UnsupportedByEngine) is skipped: the "numpy" run covers it
ENGINES = ["numpy", "compiled"]

_ITEM2 = ("issue 34 item 2: with per-trajectory adaptive steps a VectorField's function is called once per "
          "distinct time while sol.nfev counts batch evaluations; fixed on branch edges-solvers")
_ITEM3 = ("issue 34 item 3: rkmk4 at steps as long as the horizon leaves the sphere with success=True or raises "
          "ValidationError from expm_small_action; fixed on branch edges-solvers")
_RKMK45 = ("found by this suite, the cause of issue 34 item 3 in the adaptive RKMK45: started with first_step = 10 "
           "on item 3's rotation field it overflows in the matrix products of a rejected step's generator and "
           "lets NumPy RuntimeWarnings through (the solve then succeeds); solvers, branch edges-solvers")
_EMPTY = ("found by this suite: integrate returns an empty batch's result before checking that the stepper "
          "applies to the field ('layer' with a VectorField: refused for a batch (2, l, d), accepted for "
          "(0, l, d)); solvers/integrate.py, not fixed on this branch")
_ITEM6 = ("issue 34 item 6: with fixed steps a terminal event's saved times end after the stop with a NaN row "
          "instead of at the event time and state; fixed on branch edges-solvers")
_ITEM8 = ("issue 34 item 8: integrate over a t_span of length 0 with an adaptive stepper lets a NumPy "
          "RuntimeWarning through (the initial step size estimate divides by h0 = 0); solvers, another branch")

#: test name -> {stepper: reason}: the parametrizations that fail today, marked xfail(strict=True)
KNOWN = {
    "test_integrate_edges": {"rkmk4": _ITEM3, "rkmk45": _RKMK45},
    "test_nfev_counts_the_users_calls": {n: _ITEM2 for n in sorted(ADAPTIVE)},
    "test_refusal_does_not_depend_on_the_batch": {"layer": _EMPTY},
    "test_terminal_event_saved_layout": {n: _ITEM6 for n in STEPPERS if n not in ADAPTIVE},
    "test_zero_length_span": {n: _ITEM8 for n in sorted(ADAPTIVE)},
}


def stepper_params(test: str, *others, unmarked=lambda *args: False):
    """``pytest.param`` of every registered stepper (times each tuple of ``others``), with the strict
    xfail of ``KNOWN[test]`` where listed and ``unmarked(stepper, *other)`` is false."""
    known = KNOWN.get(test, {})
    params = []
    for n in STEPPERS:
        for other in others or [()]:
            mark = n in known and not unmarked(n, *other)
            marks = [pytest.mark.xfail(strict=True, reason=known[n])] if mark else []
            params.append(pytest.param(n, *other, marks=marks))
    return params


def budget(n: int) -> int:
    """``n`` examples in the ci profile (200 by default), scaled with the profile's max_examples."""
    return max(2, round(n * settings.default.max_examples / 200))


@functools.lru_cache(maxsize=None)
def refusal(stepper: str, field_kind: str, manifold_kind: str):
    """How ``integrate`` refuses ``stepper`` on this kind of field and manifold, found by trying once
    on a tiny problem: None if it integrates, else (error type, the message's first clause).

    Discovery, not a list: a combination is either integrated (and then held to every invariant)
    or refused with a documented error (and then refused the same way for every example).
    """
    from _edge_problems import tiny_problem

    pb = tiny_problem(field_kind, manifold_kind)
    try:
        ra.integrate(pb.field, pb.y0, pb.t_span, stepper=stepper, dt=pb.dt)
    except (ra.errors.InputTypeError, ra.ValidationError) as exc:
        return type(exc), str(exc).split("(")[0].split(":")[0]
    return None
