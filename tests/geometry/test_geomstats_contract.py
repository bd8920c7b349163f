"""geomstats' own contract tests, run against riemattn's Sphere, Ellipsoid and their metrics.

geomstats ships its test cases in the installed package (``geomstats.test_cases.geometry``):
``LevelSetTestCase`` (manifold, projection and submersion properties), ``HypersphereExtrinsicTestCase``
and ``RiemannianMetricTestCase`` (connection, geodesics, parallel transport, distance, curvature
tensors). Its test *data* (which tests run, with how many random points) lives in geomstats'
repository, not in the package; :func:`contract_data` builds it here from each test's signature,
the way geomstats' data classes do: ``n_points`` tests get random batches of 1 and 2-4 points,
``n_reps`` tests vectorization with repeated inputs, every test with an explicit ``expected`` gets
its automatic vectorization test (``<name>_vec``: the batched call must repeat the single call).

Spaces: Sphere(1), Sphere(2), Sphere(4); Ellipsoid(W) for d = 3 with W of condition numbers 1
(a multiple of I), 10 and 100, and for d = 5 with condition number 100.

Test cases collected (geomstats 2.8): TestSphereHypersphereContract 96 (32 per sphere),
TestEllipsoidLevelSetContract 92 (23 per W), TestWMetricRiemannianMetricContract 558 (93 per
space: 2 spheres, 4 ellipsoids); 746 in all. Random data come from geomstats' global RNG, seeded
per test; failed random tests are not retried (geomstats retries them 3 times by default).

Excluded, with the reason (EXCLUDED below):
- tests marked ``validation`` (statistical checks with thousands of samples; runtime);
- the von Mises--Fisher / Riemannian-normal tests of HypersphereExtrinsicTestCase on the Ellipsoid
  are not run (that case is for the sphere: it compares the normalized Euclidean mean of samples
  with mu, true on S^n only; the ellipsoid's push-forward is tested in test_ellipsoid_metric.py);
- tests that need hand-written expected values (``test_exp(tangent_vec, base_point, expected)``
  ...) run as their automatic vectorization tests only -- except ``hamiltonian``, ``geodesic``,
  ``diameter`` and ``normal_basis``, whose arguments geomstats' vectorization helper cannot draw
  (geomstats' own data does not vectorize them either); the closed forms they rest on are
  tested in test_ellipsoid_metric.py and test_manifolds_methods.py.

geomstats' ``parametrizers`` module imports ``nbformat`` and ``nbconvert`` for its notebook tests,
which these tests do not use; light stand-ins are registered when they are not installed.
"""

import inspect
import sys
import types

import numpy as np
import pytest

for _name in ("nbformat", "nbconvert", "nbconvert.preprocessors"):
    if _name not in sys.modules:
        try:
            __import__(_name)
        except ImportError:
            _stub = types.ModuleType(_name)
            _stub.ExecutePreprocessor = None
            sys.modules[_name] = _stub

import geomstats.backend as gs
from geomstats.test.data import TestData
from geomstats.test.parametrizers import DataBasedParametrizer
from geomstats.test.vectorization import KNOWN_ARGS
from geomstats.test_cases.geometry.base import LevelSetTestCase
from geomstats.test_cases.geometry.hypersphere import HypersphereExtrinsicTestCase
from geomstats.test_cases.geometry.riemannian_metric import RiemannianMetricTestCase

import riemattn as ra

EXCLUDED = {
    "random_von_mises_fisher_sample_kappa": "validation test (statistics of many samples): runtime",
    "random_riemannian_normal_frechet_mean": "validation test (Frechet mean of many samples): runtime",
    "random_von_mises_fisher_sample_mean": "validation-size statistics; sphere-only claim (see docstring)",
}
EXTRA = {"random_mu": [True, False], "precision_type": [None, float, "array"], "n_samples": [1, 3]}
SIZES = {"n_points": [1, 3], "n_reps": [3], "n_times": [1, 3]}
#: test_replace_values indexes a batch of points: geomstats runs it with several points only
SIZES_FOR = {"replace_values": {"n_points": [3]}}


def contract_data(case, exclude=(), geometry_names=()):
    """A geomstats TestData subclass activating every applicable test of ``case``."""
    tests = {}
    for klass in reversed(case.__mro__):
        for name, fn in vars(klass).items():
            if name.startswith("test_") and callable(fn):
                tests[name[5:]] = fn
    methods = {}
    for name, fn in tests.items():
        if name in exclude or name in EXCLUDED:
            continue
        marks = {m.name for m in getattr(fn, "pytestmark", [])}
        if "validation" in marks:
            continue
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        required = [p.name for p in params if p.default is p.empty and p.name != "atol"]
        if "expected" in required:
            # the automatic vectorization test draws the other arguments itself: only geomstats'
            # known argument names (points, tangent vectors) can be drawn
            auto = set(required) - {"expected"} <= set(KNOWN_ARGS)
            if auto and f"{name}_vec" not in tests and name in geometry_names:
                methods[f"{name}_vec"] = [{"n_reps": n} for n in SIZES["n_reps"]]
            continue
        if not required or not set(required) <= set(SIZES) | set(EXTRA):
            continue
        combos = [{}]
        for p in required:
            values = SIZES_FOR.get(name, {}).get(p) or SIZES.get(p) or EXTRA[p]
            combos = [dict(c, **{p: v}) for c in combos for v in values]
        methods[name] = combos

    def make(combos):
        def data_fn(self):
            return self.generate_tests([dict(c) for c in combos])
        return data_fn

    attrs = {f"{name}_test_data": make(combos) for name, combos in methods.items()}
    attrs["tolerances"] = {}
    attrs["trials"] = 1  # geomstats retries failed random tests 3 times by default: not here
    return type(f"{case.__name__}Data", (TestData,), attrs)()


@pytest.fixture(autouse=True)
def _seeded():
    """Reproducible random data: geomstats' tests draw from its global RNG (NumPy's)."""
    gs.random.seed(0)


def random_spd(d, cond, seed):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return (Q * np.geomspace(1.0, cond, d)) @ Q.T


ELLIPSOIDS = [(3, 1.0), (3, 10.0), (3, 100.0), (5, 100.0)]


def _ellipsoid(d, cond):
    W = 2.0 * np.eye(d) if cond == 1.0 else random_spd(d, cond, seed=d)
    return ra.Ellipsoid(W)


@pytest.fixture(scope="class", params=[1, 2, 4], ids=lambda n: f"Sphere({n})")
def spheres(request):
    request.cls.space = ra.Sphere(request.param)


@pytest.fixture(scope="class", params=ELLIPSOIDS, ids=lambda p: f"d={p[0]},cond={p[1]:g}")
def ellipsoids(request):
    request.cls.space = _ellipsoid(*request.param)


@pytest.fixture(scope="class", params=[("sphere", 2), ("sphere", 4)] + [("ellipsoid", p) for p in ELLIPSOIDS],
                ids=lambda p: f"Sphere({p[1]})" if p[0] == "sphere" else f"Ellipsoid(d={p[1][0]},cond={p[1][1]:g})")
def metric_spaces(request):
    kind, p = request.param
    request.cls.space = ra.Sphere(p) if kind == "sphere" else _ellipsoid(*p)


_SPACE_NAMES = set(dir(ra.Ellipsoid)) | set(dir(ra.Sphere))
_METRIC_NAMES = set(dir(ra.geometry.metrics.EllipsoidMetric))


def drop_inactive(cls):
    """Remove the tests DataBasedParametrizer marked ``ignore`` (no data: not applicable here).

    geomstats deselects them with a plugin (geomstats.test.conf) that this suite does not load."""
    for name in list(vars(cls)):
        fn = vars(cls)[name]
        if name.startswith("test_") and any(m.name == "ignore" for m in getattr(fn, "pytestmark", [])):
            fn.__test__ = False  # not collected; still callable by the tests that use it
    return cls


@drop_inactive
@pytest.mark.usefixtures("spheres")
class TestSphereHypersphereContract(HypersphereExtrinsicTestCase, metaclass=DataBasedParametrizer):
    testing_data = contract_data(HypersphereExtrinsicTestCase, geometry_names=_SPACE_NAMES)


@drop_inactive
@pytest.mark.usefixtures("ellipsoids")
class TestEllipsoidLevelSetContract(LevelSetTestCase, metaclass=DataBasedParametrizer):
    testing_data = contract_data(LevelSetTestCase, geometry_names=_SPACE_NAMES)


@drop_inactive
@pytest.mark.usefixtures("metric_spaces")
class TestWMetricRiemannianMetricContract(RiemannianMetricTestCase, metaclass=DataBasedParametrizer):
    testing_data = contract_data(RiemannianMetricTestCase, geometry_names=_METRIC_NAMES)
