"""riemattn: the geometry of attention in transformers.

Tokens live on spheres and ellipsoids (:mod:`riemattn.manifolds`), self-attention is a tangent
vector field on them (:mod:`riemattn.attention`), stacking layers is integrating that field
(:mod:`riemattn.steppers`, :func:`riemattn.integrate`).
"""

from . import circle, diagnostics, dormand_prince, errors, gradient_flow, lie, tableaux, theory
from ._backend import use_device
from .attention import AttentionField, sa, usa
from .errors import IntegrationError, RiemattnError, ValidationError
from .fields import AlgebraField, Field, LinearField, VectorField
from .integrate import Trajectory, integrate
from .layer import TransformerLayer
from .manifolds import Ellipsoid, Euclidean, Sphere
from .steppers import STEPPERS, Stepper
from .sweep import SweepResult, sweep
from .tableaux import ButcherTableau

__version__ = "0.1.0"

__all__ = [
    "AlgebraField",
    "AttentionField",
    "ButcherTableau",
    "Ellipsoid",
    "Euclidean",
    "Field",
    "IntegrationError",
    "LinearField",
    "RiemattnError",
    "STEPPERS",
    "Sphere",
    "Stepper",
    "SweepResult",
    "Trajectory",
    "TransformerLayer",
    "ValidationError",
    "VectorField",
    "circle",
    "diagnostics",
    "errors",
    "gradient_flow",
    "lie",
    "tableaux",
    "theory",
    "use_device",
    "integrate",
    "sweep",
    "sa",
    "usa",
]
