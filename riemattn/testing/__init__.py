"""Testing your own dynamics: public Hypothesis strategies and property checkers (extra ``testing``).

Install with ``pip install 'riemattn[testing]'`` (Hypothesis >= 6.80); without Hypothesis,
importing this package raises :class:`~riemattn.errors.MissingDependencyError` (an ``ImportError``)
naming that extra. The user guide's page docs/testing.md shows a complete example.

* :mod:`riemattn.testing.strategies` -- manifolds (``spheres``, ``ellipsoids``, ``manifolds``,
  ``spd_matrices``), token configurations (``points``, ``hemisphere_points``,
  ``tangent_vectors``), the edges (``token_configurations``: coincident and antipodal tokens;
  ``step_sizes``: from one step over the whole horizon down) and attention (``head_matrices``,
  ``attention_fields``, ``betas``), all small and shrinking toward small l, d, h;
* :mod:`riemattn.testing.checks` -- ``assert_on_manifold``, ``assert_tangent``,
  ``assert_forward_invariant``: assertions whose messages name time, trajectory, token and the
  violated quantity;
* :mod:`riemattn.testing.slopes` -- ``check_order``, ``check_retraction``,
  ``check_riemannian_gradient``: log-log slopes read off a least-squares fit (:class:`Fit`).

This is the top layer of the package: it may import every room except :mod:`riemattn.cli`, and no
module of riemattn imports it.
"""

try:
    import hypothesis  # noqa: F401
except ImportError as _exc:
    from ..errors import MissingDependencyError

    raise MissingDependencyError(
        f"riemattn.testing needs Hypothesis, which is not installed ({_exc}); install the extra: "
        "pip install 'riemattn[testing]'"
    ) from None

from . import checks, slopes, strategies
from .checks import assert_forward_invariant, assert_on_manifold, assert_tangent
from .slopes import (
    Fit,
    check_order,
    check_retraction,
    check_riemannian_gradient,
    reference_solution,
)
from .strategies import (
    attention_fields,
    betas,
    ellipsoids,
    head_matrices,
    hemisphere_points,
    manifolds,
    points,
    spd_matrices,
    spheres,
    step_sizes,
    tangent_vectors,
    token_configurations,
)

__all__ = [
    "Fit",
    "assert_forward_invariant",
    "assert_on_manifold",
    "assert_tangent",
    "attention_fields",
    "betas",
    "check_order",
    "check_retraction",
    "check_riemannian_gradient",
    "checks",
    "ellipsoids",
    "head_matrices",
    "hemisphere_points",
    "manifolds",
    "points",
    "reference_solution",
    "slopes",
    "spd_matrices",
    "spheres",
    "step_sizes",
    "strategies",
    "tangent_vectors",
    "token_configurations",
]
