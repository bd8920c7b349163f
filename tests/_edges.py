"""The registry of the edge property suite (tests/suites/test_edges*.py): what is covered, discovered.

* ``STEPPERS``: every stepper registered in ``riemattn.STEPPERS``, read at collection -- a new
  registered stepper is covered without editing the tests;
* ``MANIFOLD_KINDS`` / ``METRICS``: every manifold kind of ``riemattn.testing.strategies`` and
  every ellipsoid metric of ``ELLIPSOID_METRICS`` (tests/suites/test_edges_manifolds.py checks that every
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

#: test name -> {stepper: reason}: the parametrizations that fail today, marked xfail(strict=True)
#: (issue 34 items 2, 3, 6 and 8, the adaptive RKMK45's overflow and the empty batch's skipped
#: refusal were fixed: their marks are gone; a new known bug goes here with its reason)
KNOWN: dict[str, dict[str, str]] = {}


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
