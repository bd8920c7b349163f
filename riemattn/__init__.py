"""riemattn: the geometry of attention in transformers.

Tokens live on spheres and ellipsoids (:mod:`riemattn.manifolds`), self-attention is a tangent
vector field on them (:mod:`riemattn.attention`), stacking layers is integrating that field
(:mod:`riemattn.steppers`, :func:`riemattn.integrate`).
"""

from . import circle, diagnostics, errors, gradient_flow, lie, theory
from .attention import AttentionField, TransformerLayer, sa, usa
from .errors import IntegrationError, RiemattnError, ValidationError
from .fields import Field, VectorField
from .integrate import Trajectory, integrate
from .manifolds import Ellipsoid, Sphere
from .steppers import STEPPERS, ButcherTableau, Stepper

__version__ = "0.1.0"

__all__ = [
    "AttentionField",
    "ButcherTableau",
    "Ellipsoid",
    "Field",
    "IntegrationError",
    "RiemattnError",
    "STEPPERS",
    "Sphere",
    "Stepper",
    "Trajectory",
    "TransformerLayer",
    "ValidationError",
    "VectorField",
    "circle",
    "diagnostics",
    "errors",
    "gradient_flow",
    "lie",
    "theory",
    "integrate",
    "sa",
    "usa",
]
