"""``Ellipsoid(np.eye(d))`` agrees with ``Sphere(d - 1)`` on every public method of both.

The test enumerates the public attributes of the two manifolds and of their metrics (so a method
added to either class is compared automatically), builds each call's arguments from the
parameter names, and requires equal results -- or the same exception type from both (e.g. the
sphere's charts outside dimensions 1 and 2). A parameter name it does not know fails the test.

Methods where both raise the same error (inherited from geomstats unchanged): ``normal_basis``
(written for matrix manifolds), ``norm_factor_gradient`` (needs an autodiff backend),
``normalization_factor`` for even n (geomstats 2.8 computes a binomial with a negative argument).
"""

import inspect

import geomstats.backend as gs
import numpy as np
import pytest

import riemattn as ra

N = 3


def data(d, seed=0):
    rng = np.random.default_rng(seed)
    S = ra.Sphere(d - 1)
    x = S.projection(rng.normal(size=(N, d)))
    y = S.projection(rng.normal(size=(N, d)))
    u, v, w = (0.5 * S.to_tangent(rng.normal(size=(N, d)), x) for _ in range(3))
    angles = rng.uniform(0.3, 2.5, size=(N, 2))
    return {
        "point": x, "base_point": x, "point_a": x, "initial_point": x, "mean": x[0], "mu": x[0], "x": x,
        "point_b": y, "y": y, "end_point": y, "points": x, "neighbors": y, "point_extrinsic": x,
        "tangent_vec": u, "tangent_vec_a": u, "vector": u, "direction": v, "initial_tangent_vec": v, "v": v,
        "tangent_vec_b": v, "tangent_vec_c": w, "tangent_vec_d": w, "cotangent_vec_a": u, "cotangent_vec_b": v,
        "state": np.stack([x[0], u[0]]), "n_samples": N, "n_vectors": 1, "kappa": 5.0, "precision": None,
        "variances": np.array([0.5, 1.0]), "slots": 2, "basis": None,
        "point_angle": angles[:, :1], "point_spherical": angles, "base_point_spherical": angles,
        "tangent_vec_spherical": 0.1 * angles,
        "point_intrinsic": angles[:, :1] if d == 2 else angles,
    }


#: optional parameters left at their defaults (tolerances, algorithm options)
DEFAULTED = {"atol", "n_jobs", "joblib_kwargs", "method", "name", "bound", "max_iter", "scheme", "alpha",
             "return_geodesics", "n_rungs"}
#: per method: optional parameters that are filled in anyway (VARIANTS: a second call with others)
NOT_FILLED = {"end_point", "initial_tangent_vec", "direction", "base_point_spherical"}
VARIANTS = {"parallel_transport": {"end_point"}, "geodesic": {"end_point"}}
FILL = {"parallel_transport": {"direction"}, "ladder_parallel_transport": {"direction"},
        "geodesic": {"initial_tangent_vec"}, "tangent_extrinsic_to_spherical": {"base_point"},
        "random_tangent_vec": {"base_point"}, "random_unit_tangent_vec": {"base_point"}}
#: compared differently, with the reason
SPECIAL = {
    "equip_with_metric": "mutator: re-equips the space (returns it); compared through `metric` below",
    "equip_with_group_action": "mutator: geomstats configuration, no geometry",
    "equip_with_quotient": "mutator: geomstats configuration (needs a group action), no geometry",
    "default_metric": "the metric class: SphereMetric subclasses EllipsoidMetric (checked below)",
    "metric": "an object: its methods are enumerated by the metric half of this test",
    "embedding_space": "an object: compared by its dimension",
    "lie_frame": "an object: compared by the action of one exponential on the tokens",
    "check_point": "compared on an on-manifold point (returns it) and an off-manifold one (raises)",
}


def call(obj, name, args, d, fill=None):
    fill = FILL.get(name, set()) if fill is None else fill
    attr = getattr(obj, name)
    if not callable(attr):
        return attr
    kwargs = {}
    for p in inspect.signature(attr).parameters.values():
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if p.default is not p.empty and p.name not in fill:
            assert p.name in DEFAULTED or p.name in args, f"{name}: optional parameter {p.name!r} unknown"
            if p.name in DEFAULTED or p.name in NOT_FILLED:
                continue
        if p.name not in args:
            raise AssertionError(f"{name}: parameter {p.name!r} has no test data; add it to data()")
        kwargs[p.name] = args[p.name]
    if name == "normal_basis":
        kwargs = {"basis": args["tangent_vec"], "base_point": args["base_point"][0]}
        kwargs["basis"] = kwargs["basis"] - (kwargs["basis"] @ kwargs["base_point"])[:, None] * kwargs["base_point"]
    gs.random.seed(7)
    np.random.seed(7)
    try:
        out = attr(**kwargs)
    except Exception as exc:  # noqa: BLE001 - any error: compared by type with the sphere's
        return type(exc)
    if name == "geodesic":
        return out(np.array([0.0, 0.3, 1.0]))
    return out


def same(a, b, name):
    if isinstance(a, type) or isinstance(b, type):
        assert isinstance(a, type) and isinstance(b, type) and a is b, f"{name}: {a!r} vs {b!r}"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), name
        for k in a:
            same(a[k], b[k], f"{name}[{k}]")
    elif isinstance(a, (tuple, list)) and not np.isscalar(a):
        assert len(a) == len(b), name
        for i, (p, q) in enumerate(zip(a, b)):
            same(p, q, f"{name}[{i}]")
    elif a is None or b is None or isinstance(a, (str, bool)):
        assert a == b, f"{name}: {a!r} vs {b!r}"
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"{name}: shape {a.shape} vs {b.shape}"
        np.testing.assert_allclose(a, b, atol=1e-12, rtol=1e-12, err_msg=name)


def public(obj):
    return {n for n in dir(obj) if not n.startswith("_")}


@pytest.mark.parametrize("d", [2, 3, 4])
def test_identity_ellipsoid_equals_sphere_on_every_public_method(d):
    S, E = ra.Sphere(d - 1), ra.Ellipsoid(np.eye(d))
    args = data(d)
    names = public(S) | public(E)
    assert public(S) == public(E), public(S) ^ public(E)
    compared = 0
    for name in sorted(names - set(SPECIAL)):
        same(call(E, name, args, d), call(S, name, args, d), name)
        compared += 1
    mnames = public(S.metric) | public(E.metric)
    assert public(S.metric) == public(E.metric), public(S.metric) ^ public(E.metric)
    for name in sorted(mnames):
        same(call(E.metric, name, args, d), call(S.metric, name, args, d), f"metric.{name}")
        compared += 1
        if name in VARIANTS:
            same(call(E.metric, name, args, d, VARIANTS[name]), call(S.metric, name, args, d, VARIANTS[name]),
                 f"metric.{name}({VARIANTS[name]})")
    assert compared >= 70
    # the special ones
    assert issubclass(S.default_metric(), type(E.metric)) and isinstance(E.metric, E.default_metric())
    assert S.embedding_space.dim == E.embedding_space.dim == d
    x, u = args["x"][None], args["tangent_vec"][None]
    frames = [M.lie_frame(x, 2) for M in (S, E)]
    moved = [f.point(f.exp(f.generator(f.start, u).K, f.start)) for f in frames]
    np.testing.assert_allclose(moved[0], moved[1], atol=1e-14)
    for M in (S, E):
        np.testing.assert_array_equal(M.check_point(args["x"]), args["x"])
        with pytest.raises(ra.errors.ValidationError, match="point"):
            M.check_point(2 * args["x"], "point")
    for name in ("equip_with_metric", "equip_with_group_action", "equip_with_quotient"):
        assert callable(getattr(S, name)) and callable(getattr(E, name))
