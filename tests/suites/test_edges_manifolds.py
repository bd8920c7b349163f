"""The manifold primitives at their edges, on every manifold riemattn registers (issue 34).

Every kind of ``riemattn.testing.strategies.MANIFOLD_KINDS`` (Sphere, Ellipsoid, Euclidean) and
every ellipsoid metric of ``ELLIPSOID_METRICS`` ("W", "euclidean"), at x = y, at antipodes, near
them, and with tangent vectors beyond the injectivity radius pi: exp lands on the manifold, log is
tangent at its base point and inverts exp where it is defined, |log| = dist, dist is symmetric and
>= 0, parallel transport is an isometry onto the tangent space at the end point, retractions stay
on the manifold and fix the base point. A manifold class riemattn exports but the strategies do
not draw fails ``test_every_exported_manifold_is_drawn`` (register it in MANIFOLD_KINDS).

Tolerances (tests/_tolerances.py): the W-metric's closed forms are O(d) W-inner products of
vectors of W-length <= 1 + |v|_W, each off by d eps |W|_2 |W^-1|_2 at most, so each identity is
held to ``eps_bound(16 d, cond(W), 1 + |v|_W)``; the flat space's to ``eps_bound(4, 1, scale)``.
The induced metric integrates geodesics: its documented accuracies (docs/manifolds.md).
"""

from __future__ import annotations

import geomstats.geometry.manifold
import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

import riemattn as ra
from riemattn.errors import IntegrationError
from riemattn.geometry.ellipsoid import ELLIPSOID_METRICS
from riemattn.testing import strategies as rs

from _edges import MANIFOLD_KINDS, METRICS, budget
from _tolerances import eps_bound

SMALL = st.integers(2, 4)
#: where y sits relative to x
RELATIONS = ("generic", "same", "antipode", "near antipode")


def test_every_exported_manifold_is_drawn():
    """Discovery: every geomstats manifold class riemattn exports is drawn by manifolds(kinds=MANIFOLD_KINDS),
    and every registered ellipsoid metric by ellipsoids(metrics=METRICS)."""
    exported = {obj for obj in vars(ra).values()
                if isinstance(obj, type) and issubclass(obj, geomstats.geometry.manifold.Manifold)}
    drawn = set()
    for kind in MANIFOLD_KINDS:
        drawn.add(type(find(rs.manifolds(kinds=(kind,)), lambda _: True)))
    assert exported and exported <= drawn, exported - drawn
    for name in METRICS:
        assert isinstance(find(rs.ellipsoids(metrics=(name,)), lambda _: True).metric, ELLIPSOID_METRICS[name])


@st.composite
def pairs(draw, manifold):
    """(x, y, v): y related to x as drawn from RELATIONS, v tangent at x with |v| up to 3 pi."""
    x = draw(rs.points(manifold, tokens=1))[0]
    relation = draw(st.sampled_from(RELATIONS))
    if relation == "same":
        y = x.copy()
    elif relation == "generic" or isinstance(manifold, ra.Euclidean):
        y = draw(rs.points(manifold, tokens=1))[0]
    else:
        y = -x
        if relation == "near antipode":
            y = manifold.projection(y + draw(st.sampled_from([1e-15, 1e-12, 1e-8])) * draw(rs.unit_vectors(len(x))))
    v = draw(rs.tangent_vectors(manifold, x, scale=draw(st.sampled_from([1.0, 1e-12, 3 * np.pi]))))
    return x, y, v


def _cond(M):
    return 1.0 if isinstance(M, ra.Euclidean) else float(np.linalg.cond(M.W))


@settings(max_examples=budget(100))
@given(data=st.data())
def test_closed_form_primitives(data):
    M = data.draw(rs.manifolds(dims=SMALL, kinds=MANIFOLD_KINDS, metrics=("W",)))
    x, y, v = data.draw(pairs(M))
    g = M.metric
    flat = isinstance(M, ra.Euclidean)
    nv = float(np.linalg.norm(v)) if flat else float(M.norm(v))
    tol = eps_bound(4, 1.0, 1 + nv + np.abs(x).max() + np.abs(y).max()) if flat else \
        eps_bound(16 * len(x), _cond(M), 1 + nv)
    inner = (lambda a, b: float(a @ b)) if flat else (lambda a, b: float(M.inner(a, b)))

    e = g.exp(v, x)
    if flat:
        np.testing.assert_allclose(e, x + v, rtol=0, atol=tol)
    else:
        assert abs(inner(e, e) - 1) <= tol
    L = g.log(y, x)
    d_xy, d_yx = float(g.dist(x, y)), float(g.dist(y, x))
    assert d_xy >= 0 and d_xy == pytest.approx(d_yx, abs=tol)
    assert np.sqrt(inner(L, L)) == pytest.approx(d_xy, abs=tol)
    np.testing.assert_allclose(g.exp(L, x), y, rtol=0, atol=tol)  # everywhere, the antipode included
    assert float(g.dist(x, x)) <= tol and np.all(np.abs(g.log(x, x)) <= tol)
    u = data.draw(rs.tangent_vectors(M, x))
    T = g.parallel_transport(u, x, direction=v)
    np.testing.assert_allclose(g.parallel_transport(u, x, direction=0 * v), u, rtol=0, atol=tol)
    assert inner(T, T) == pytest.approx(inner(u, u), abs=tol * (1 + inner(u, u)))
    np.testing.assert_allclose(M.retraction(x, 0 * v), x, rtol=0, atol=tol)
    if flat:
        return
    assert abs(inner(x, L)) <= tol * (1 + d_xy)  # tangent at its base point (issue 34 item 5)
    assert d_xy <= np.pi + tol
    assert abs(inner(e, T)) <= tol * (1 + np.sqrt(inner(u, u)))  # tangent at the end point
    if nv < np.pi - 0.1:  # inside the injectivity radius: log inverts exp
        # log's direction is u / |u|_W with |u|_W = sin|v|_W: its error is amplified by |v| / sin|v| (<= 30 here)
        np.testing.assert_allclose(g.log(e, x), v, rtol=0, atol=tol * (1 + (nv / np.sin(nv) if nv > 0 else 1)))
    else:  # beyond it: log(exp(v)) is the minimizing geodesic's velocity, of length dist <= pi
        assert np.sqrt(inner(g.log(e, x), g.log(e, x))) == pytest.approx(float(g.dist(x, e)), abs=tol)
    r = M.retraction(x, v)
    assert abs(inner(r, r) - 1) <= tol


@settings(max_examples=budget(4))
@given(data=st.data())
def test_induced_metric_primitives(data):
    """Ellipsoid(W, metric="euclidean"): numerical geodesics. exp lands on E_W (``belongs``'s
    1e-10), log inverts exp to the documented 1e-9 inside ``log_radius``; beyond it (the antipode)
    log either converges (then exp(log) = y to Newton's 1e-12 and the integration's accuracy) or
    raises the documented IntegrationError. Transport keeps lengths."""
    M = data.draw(rs.ellipsoids(dims=st.integers(2, 3), max_condition=4.0, metrics=("euclidean",)))
    x, y, v = data.draw(pairs(M))
    g = M.metric
    e = g.exp(v, x)
    assert M.belongs(e)
    w = v * (0.9 * g.log_radius / max(float(np.linalg.norm(v)), g.log_radius))  # inside the radius
    np.testing.assert_allclose(g.log(g.exp(w, x), x), w, rtol=0, atol=1e-9)
    try:
        L = g.log(y, x)
    except IntegrationError:
        assert float(np.linalg.norm(y - x)) > g.log_radius  # only beyond the guaranteed domain
    else:
        assert abs(float(L @ (M.W @ x))) <= 1e-9 * (1 + float(np.linalg.norm(L)))  # tangent (normal W x)
        np.testing.assert_allclose(g.exp(L, x), y, rtol=0, atol=1e-10)
        assert float(g.dist(x, y)) == pytest.approx(float(np.linalg.norm(L)), abs=1e-12)
    u = g.to_tangent(data.draw(rs.tangent_vectors(M, x)), x)
    T = g.parallel_transport(u, x, direction=w)
    assert float(np.linalg.norm(T)) == pytest.approx(float(np.linalg.norm(u)), abs=1e-10)
