"""riemattn: the geometry of attention in transformers.

Tokens live on spheres and ellipsoids (:mod:`riemattn.geometry`), self-attention is a tangent
vector field on them (:mod:`riemattn.dynamics`), stacking layers is integrating that field
(:mod:`riemattn.solvers`, :func:`riemattn.integrate`); :mod:`riemattn.analysis` holds what the
theory says about the result, :mod:`riemattn.runs` simulations and sweeps from files,
:mod:`riemattn.experiments` the papers' figures and :mod:`riemattn.llm` looped real transformers.
The rooms and the direction of their imports: docs/architecture.md.

The module paths of the flat layout before 0.2 (``riemattn.diagnostics``, ``riemattn.lie``,
``riemattn.simulate``, ...) still import and are the same module objects as their new homes
(``MOVED_MODULES``).
"""

__version__ = "0.1.0"

import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys

from . import errors
from ._backend import use_device
from .analysis import diagnostics, gradient_flow, theory
from .dynamics import circle
from .dynamics.attention import AttentionField
from .dynamics.glpr import sa, usa
from .dynamics.layernorm import layernorm
from .dynamics.fields import AlgebraField, Field, LinearField, VectorField
from .errors import IntegrationError, RiemattnError, ValidationError
from .geometry.manifolds import Ellipsoid, Euclidean, Sphere
from .runs.sweep import SweepResult, sweep
from .solvers.explicit import dormand_prince, tableaux
from .solvers.lie_group import lie
from .solvers.stiff import auto, rosenbrock
from .solvers.core.integrate import Trajectory, integrate
from .solvers.autodiff import integrate_checkpointed
from .solvers.layer import TransformerLayer
from .solvers.stochastic.sde import integrate_sde
from .solvers.explicit.steppers import STEPPERS, Stepper
from .solvers.explicit.tableaux import ButcherTableau

#: Old (flat) module path -> its home since 0.2. ``import riemattn.<old>`` gives the same module.
MOVED_MODULES = {
    "manifolds": "geometry.manifolds",
    "groups": "geometry.groups",
    "lowrank": "geometry.lowrank",
    "fields": "dynamics.fields",
    "attention": "dynamics.attention",
    "circle": "dynamics.circle",
    "integrate": "solvers.core.integrate",
    "steppers": "solvers.explicit.steppers",
    "tableaux": "solvers.explicit.tableaux",
    "dormand_prince": "solvers.explicit.dormand_prince",
    "lie": "solvers.lie_group.lie",
    "layer": "solvers.layer",
    "diagnostics": "analysis.diagnostics",
    "hemispheres": "analysis.hemispheres",
    "theory": "analysis.theory",
    "gradient_flow": "analysis.gradient_flow",
    "gradients": "analysis.gradients",
    "simulate": "runs.simulate",
    "sweep": "runs.sweep",
    "sweep_config": "runs.sweep_config",
    # solvers/ cut by family (issue 45): the public module paths before the cut
    "solvers.integrate": "solvers.core.integrate",
    "solvers.events": "solvers.core.events",
    "solvers.steppers": "solvers.explicit.steppers",
    "solvers.tableaux": "solvers.explicit.tableaux",
    "solvers.dormand_prince": "solvers.explicit.dormand_prince",
    "solvers.lie": "solvers.lie_group.lie",
    "solvers.rosenbrock": "solvers.stiff.rosenbrock",
    "solvers.rosenbrock_tableaux": "solvers.stiff.rosenbrock_tableaux",
    "solvers.auto": "solvers.stiff.auto",
    "solvers.sde": "solvers.stochastic.sde",
}


class _MovedModuleFinder(_abc.MetaPathFinder, _abc.Loader):
    """Resolves ``riemattn.<old>`` to the module at its new home (imported on first use).

    The alias is the module object itself, so classes pickled under either path load, and
    ``riemattn.<old>.name is riemattn.<room>.<new>.name``.
    """

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, old = fullname.partition(".")
        if prefix != __name__ or old not in MOVED_MODULES:
            return None
        return _util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        old = spec.name.partition(".")[2]
        module = _importlib.import_module(f"{__name__}.{MOVED_MODULES[old]}")
        spec.loader_state = module.__spec__  # the real spec, restored below
        return module

    def exec_module(self, module):
        # the import system set the alias's spec on the module; put the real one back
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _MovedModuleFinder) for f in _sys.meta_path):
    _sys.meta_path.append(_MovedModuleFinder())

# The moved modules already imported above are registered now, so that importing their old path
# never rebinds a package attribute (``riemattn.integrate`` and ``riemattn.sweep`` are functions).
# As attributes (``ra.manifolds``, ``ra.fields``, ...) they are what the flat layout gave too.
for _old, _new in MOVED_MODULES.items():
    if f"{__name__}.{_new}" in _sys.modules:
        _sys.modules.setdefault(f"{__name__}.{_old}", _sys.modules[f"{__name__}.{_new}"])
        _parent, _, _leaf = f"{__name__}.{_old}".rpartition(".")
        if not hasattr(_sys.modules[_parent], _leaf):
            setattr(_sys.modules[_parent], _leaf, _sys.modules[f"{__name__}.{_new}"])
del _old, _new, _parent, _leaf


def __getattr__(name):
    # ``ra.simulate`` and the other moved modules not imported with the package: loaded on first use
    if name in MOVED_MODULES:
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
    "integrate_sde",
    "sweep",
    "sa",
    "usa",
    "layernorm",
]
