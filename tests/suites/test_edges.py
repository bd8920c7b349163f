"""The edges as a property suite: every registered stepper x manifold x step size x degenerate
configuration, held to the package's invariants (issue 34, docs/contributing.md).

Invariants of ``integrate`` (every stepper the same way):

* it returns (it raises only for a documented refusal -- a stepper that does not apply to a kind
  of field or manifold, found by trying, ``_edges.refusal`` -- or with ``raise_on_failure``);
* no NumPy RuntimeWarning reaches the caller;
* every trajectory either succeeded (status 0, finite, on the manifold to ``ON_MANIFOLD_ATOL``,
  the tolerance ``integrate`` itself accepts initial tokens to) or is reported failed (status
  -1, -2 or -3, ``t_fail``, the kind of failure in ``message``), and ``raise_on_failure=True`` then
  raises ``IntegrationError``;
* the saved times start at t0 and end at t1;
* ``nfev`` counts the user's calls;
* a terminal event leaves the same saved layout with fixed and adaptive steps.

Degenerate configurations come from the strategies (tests/_edge_problems.py): coincident and
antipodal tokens, W = I (ellipsoids shrink to it), P = 0, U = 0, beta = 0, empty batches, horizons
from 1e-9 to 3 with steps from the whole horizon (and beyond it) down to horizon / 12; a span of
length 0 has its own test. Engines: ``_edges.ENGINES``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import example, given, settings

import riemattn as ra
from riemattn.errors import IntegrationError, UnsupportedByEngine
from riemattn.solvers.core._status import MESSAGES
from riemattn.solvers.events import Event
from riemattn.solvers.integrate import ON_MANIFOLD_ATOL
from riemattn.testing import assert_on_manifold

from _edge_problems import issue_rotation_problem, problems
from _edges import ADAPTIVE, ENGINES, budget, refusal, stepper_params

FAILED = (-1, -2, -3)


#: every test of this module runs once per engine
pytestmark = pytest.mark.parametrize("engine", ENGINES)


def _run(stepper, pb, engine, **kwargs):
    """integrate on problem ``pb`` (adaptive steppers start with first_step = dt), recording warnings."""
    adaptive = stepper in ADAPTIVE
    T = pb.t_span[1] - pb.t_span[0]
    step = dict(first_step=min(pb.dt, T)) if adaptive and T > 0 else dict(dt=None if adaptive else pb.dt)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            sol = ra.integrate(pb.field, pb.y0, pb.t_span, stepper=stepper, **step, **kwargs, engine=engine)
        except UnsupportedByEngine:  # a call the compiled engine does not run: as engine="auto" does
            sol = ra.integrate(pb.field, pb.y0, pb.t_span, stepper=stepper, **step, **kwargs, engine="numpy")
    leaked = [f"{w.category.__name__}: {w.message}" for w in caught if issubclass(w.category, RuntimeWarning)]
    assert not leaked, f"NumPy warnings reached the caller: {leaked}"
    return sol


def _refused(stepper, pb, engine):
    """True (after checking the refusal) if ``stepper`` is documented not to apply to this problem."""
    how = refusal(stepper, pb.field_kind, pb.manifold_kind)
    if how is None:
        return False
    if engine == "compiled":  # the refusals are the NumPy engine's (the compiled one refuses first)
        engine = "numpy"
    if pb.y0.size == 0:  # held by test_refusal_does_not_depend_on_the_batch
        return True
    kind, text = how
    with pytest.raises(kind) as info:
        _run(stepper, pb, engine)
    assert str(info.value).startswith(text), (str(info.value), text)
    return True


def check_solution(pb, sol):
    """The invariants of one solution (see the module docstring)."""
    batch = pb.y0.shape[:-2]
    assert sol.t[0] == pb.t_span[0] and sol.t[-1] == pb.t_span[1], sol.t
    assert sol.y.shape == (len(sol.t),) + pb.y0.shape
    pt = sol.per_trajectory
    assert pt.status.shape == batch and pt.success.shape == batch
    assert np.array_equal(pt.success, np.isin(pt.status, (0, 2)))
    assert sol.success == bool(pt.success.all()) and isinstance(sol.message, str) and sol.message
    ok = pt.success
    # succeeded: finite and on the manifold, at every saved time
    assert_on_manifold(pb.manifold, np.moveaxis(sol.y, 0, -3)[ok], atol=ON_MANIFOLD_ATOL)
    # failed: reported, with the kind of failure in the message
    for code in pt.status[~ok].ravel():
        assert code in FAILED and MESSAGES[int(code)] in sol.message, (code, sol.message)
    assert np.all(np.isfinite(pt.t_fail[~ok])) and np.all(np.isnan(pt.t_fail[ok]))


@pytest.mark.parametrize("stepper", stepper_params("test_integrate_edges"))
@settings(max_examples=budget(25))
@given(pb=problems())
@example(pb=issue_rotation_problem(dt=10.0, T=50.0))   # issue 34 item 3: rkmk4 ends 1.9e-3 off, success=True
@example(pb=issue_rotation_problem(dt=20.0, T=100.0))  # rkmk4 raises ValidationError (expm_small_action)
def test_integrate_edges(stepper, engine, pb):
    if _refused(stepper, pb, engine):
        return
    sol = _run(stepper, pb, engine)
    check_solution(pb, sol)
    if not sol.success:
        with pytest.raises(IntegrationError):
            _run(stepper, pb, engine, raise_on_failure=True)


@pytest.mark.parametrize("stepper", stepper_params("test_nfev_counts_the_users_calls"))
@settings(max_examples=budget(10))
@given(pb=problems(field_kinds=("user",), batches=((), (2,)), horizons=(0.7, 3.0)))
@example(pb=issue_rotation_problem(dt=0.5, T=3.0).batched(2))
def test_nfev_counts_the_users_calls(stepper, engine, pb):
    """sol.nfev is the number of calls of the user's function (issue 34 item 2: 248 139 calls for
    nfev = 2 642 with dopri5 on a batch of 100)."""
    if _refused(stepper, pb, engine):
        return
    pb.calls[0] = 0  # (an explicit example's problem is shared by the parametrizations)
    sol = _run(stepper, pb, engine)
    assert sol.nfev == pb.calls[0], (sol.nfev, pb.calls[0])


@pytest.mark.parametrize("stepper", stepper_params("test_refusal_does_not_depend_on_the_batch"))
def test_refusal_does_not_depend_on_the_batch(stepper, engine):
    """A stepper refused for a kind of field (found by trying, ``_edges.refusal``) is refused for an
    empty batch too; one that applies integrates the empty batch."""
    from _edge_problems import FIELD_KINDS, tiny_problem

    for field_kind, manifold_kinds in FIELD_KINDS.items():
        pb = tiny_problem(field_kind, manifold_kinds[0])
        pb.y0 = np.zeros((0,) + pb.y0.shape)
        how = refusal(stepper, field_kind, manifold_kinds[0])
        if how is None:
            sol = _run(stepper, pb, engine)
            assert sol.success and sol.y.shape == (2, 0) + pb.y0.shape[1:]
        else:
            with pytest.raises(how[0]):
                _run(stepper, pb, engine)


def _event_problem(stepper):
    """Two tokens on S^2 attracting each other (P = 0, U = I: every stepper applies, "layer"
    included); a terminal event when their cosine passes 0.5 (it starts at cos 2 = -0.42 and
    tends to 1)."""
    field = ra.AttentionField(np.zeros((3, 3)))
    y0 = np.array([[1.0, 0.0, 0.0], [np.cos(2.0), np.sin(2.0), 0.0]])
    event = Event(lambda t, y: np.sum(y[..., 0, :] * y[..., 1, :], axis=-1) - 0.5, terminal=True, name="close")
    return field, y0, event


@pytest.mark.parametrize("stepper", stepper_params("test_terminal_event_saved_layout"))
def test_terminal_event_saved_layout(stepper, engine):
    """One trajectory stopped by a terminal event (docs/events.md): saved every step
    (saveat=None), the saved times end at the event time with the event's state -- the same
    layout for fixed and adaptive steps; on a saveat grid, rows after the stop are NaN and the
    others finite, for both."""
    field, y0, event = _event_problem(stepper)
    kw = dict(dt=None) if stepper in ADAPTIVE else dict(dt=0.3)
    sol = ra.integrate(field, y0, (0.0, 20.0), stepper=stepper, events=event, saveat=np.linspace(0, 20, 11), **kw)
    t_stop = float(sol.events.t_stop)
    assert sol.per_trajectory.status == 2 and 0 < t_stop < 20
    after = sol.t > t_stop
    assert np.isnan(sol.y[after]).all() and np.isfinite(sol.y[~after]).all()
    sol = ra.integrate(field, y0, (0.0, 20.0), stepper=stepper, events=event, **kw)
    if stepper in ADAPTIVE:  # saveat does not change adaptive steps: the same event, exactly
        assert float(sol.events.t_stop) == t_stop
    # (fixed steps divide each saveat interval into equal steps no longer than dt, so the two runs
    # step on different grids and their event times differ by the method's error)
    t_stop = float(sol.events.t_stop)
    assert sol.per_trajectory.status == 2 and 0 < t_stop < 20
    assert sol.t[-1] == t_stop and np.all(np.diff(sol.t) > 0), sol.t[-3:]
    np.testing.assert_array_equal(sol.y[-1], sol.events.y[0])
    assert np.isfinite(sol.y).all()


@pytest.mark.parametrize("stepper, batch", stepper_params("test_zero_length_span", ((),), ((2,),), ((0,),),
                                                          unmarked=lambda n, batch: batch == (0,)))
def test_zero_length_span(stepper, batch, engine):
    """t_span = (t0, t0): nothing to integrate; the tokens come back unchanged, no warning (an
    empty batch takes another path, without the warning of item 8)."""
    from _edge_problems import tiny_problem

    pb = tiny_problem("attention", "sphere")
    pb.y0 = np.broadcast_to(pb.y0, batch + pb.y0.shape).copy()
    pb.t_span, pb.dt = (1.0, 1.0), 0.1
    sol = _run(stepper, pb, engine)
    check_solution(pb, sol)
    # the identity, up to the rounding of one re-normalization (fixed steppers take a step of 0)
    assert sol.success and np.all(np.abs(sol.y[-1] - pb.y0) <= 2 * np.finfo(float).eps)

