"""riemattn: the geometry of attention in transformers.

Tokens live on spheres and ellipsoids (:mod:`riemattn.geometry`), self-attention is a tangent
vector field on them (:mod:`riemattn.dynamics`), stacking layers is integrating that field
(:mod:`riemattn.solvers`, :func:`riemattn.integrate`); :mod:`riemattn.analysis` holds what the
theory says about the result, :mod:`riemattn.runs` simulations and sweeps from files,
:mod:`riemattn.experiments` the papers' figures and :mod:`riemattn.llm` looped real transformers;
:mod:`riemattn.testing` is the property-test kit. The rooms and the direction of their imports:
docs/architecture.md.

Below, the names ``import riemattn as ra`` gives, room by room. Module paths of earlier layouts
(``riemattn.diagnostics``, ``riemattn.solvers.integrate``, ...) still import, as the same module
objects as their new homes (``MOVED_MODULES``, ``riemattn._compat``).
"""

__version__ = "0.1.0"

# shared infrastructure: errors, the array backend
from . import errors
from ._backend import use_device
from .errors import IntegrationError, RiemattnError, ValidationError

# geometry: the token manifolds
from .geometry.manifolds import Ellipsoid, Euclidean, Sphere

# dynamics: fields on them
from .dynamics import biases, circle, masks
from .dynamics.attention import AttentionField
from .dynamics.fields import AlgebraField, Field, LinearField, VectorField
from .dynamics.glpr import sa, usa
from .dynamics.populations import Populations
from .dynamics.layernorm import layernorm

# solvers: integrate and the stepper families (importing a family registers its steppers)
from .solvers.core.integrate import Trajectory, integrate
from .solvers.explicit import dormand_prince, tableaux  # noqa: F401 (registers its steppers)
from .solvers.explicit.steppers import STEPPERS, Stepper
from .solvers.explicit.tableaux import ButcherTableau
from .solvers.lie_group import lie
from .solvers.stiff import auto, rosenbrock  # noqa: F401 (registers its steppers)
from .solvers.stochastic.sde import integrate_sde
from .solvers.autodiff import integrate_checkpointed
from .solvers.compiled import warmup
from .solvers.layer import TransformerLayer

# analysis: what the theory says about a trajectory
from .analysis import diagnostics, gradient_flow, theory

# runs: sweeps on Dask
from .runs.sweep import SweepResult, sweep

# the module paths of earlier layouts (last: it registers the modules imported above)
from ._compat import MOVED_MODULES, __getattr__  # noqa: E402,F401

__all__ = [
    "AlgebraField",
    "AttentionField",
    "ButcherTableau",
    "Ellipsoid",
    "Euclidean",
    "Field",
    "IntegrationError",
    "LinearField",
    "Populations",
    "RiemattnError",
    "STEPPERS",
    "Sphere",
    "Stepper",
    "SweepResult",
    "Trajectory",
    "TransformerLayer",
    "ValidationError",
    "VectorField",
    "biases",
    "circle",
    "diagnostics",
    "errors",
    "gradient_flow",
    "lie",
    "masks",
    "tableaux",
    "theory",
    "use_device",
    "integrate",
    "integrate_sde",
    "integrate_checkpointed",
    "warmup",
    "sweep",
    "sa",
    "usa",
    "layernorm",
]
