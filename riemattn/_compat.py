"""The module paths of earlier layouts, kept alive (private; imported once by riemattn/__init__).

Two moves left old module paths behind: the flat layout before 0.2 (``riemattn.diagnostics``,
``riemattn.lie``, ``riemattn.simulate``, ...), and the cut of :mod:`riemattn.solvers` by family
(``riemattn.solvers.integrate`` is now ``riemattn.solvers.core.integrate``, ...). Every old path
in :data:`MOVED_MODULES` still imports, and gives the module at its new home itself, not a copy:
``riemattn.solvers.integrate is riemattn.solvers.core.integrate``, so names, ``isinstance``,
monkeypatching and pickles are the same under either path. New code imports the new paths (the
import contract sees only those). Names that moved between modules and stay importable from
their old module are in :data:`MOVED_NAMES`.
"""

import importlib
import importlib.abc
import importlib.util
import sys

PACKAGE = __name__.rpartition(".")[0]

#: Old module path -> its home (both relative to the package). ``import riemattn.<old>`` gives the
#: same module object as ``import riemattn.<new>``.
MOVED_MODULES = {
    # the flat layout before 0.2
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
    # the attention parts (issue 55): short public paths, as the docs spell them
    "masks": "dynamics.masks",
    "biases": "dynamics.biases",
}

#: Module -> {name: the module that defines it now}: ``from riemattn.<module> import <name>`` still
#: works (``sa`` and ``usa`` lived beside ``AttentionField`` until 0.2).
MOVED_NAMES = {
    "dynamics.attention": {"sa": "dynamics.glpr", "usa": "dynamics.glpr"},
}


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``riemattn.<old>`` to the module at its new home (imported on first use).

    The alias is the module object itself, so classes pickled under either path load, and
    ``riemattn.<old>.name is riemattn.<new>.name``.
    """

    def find_spec(self, fullname, path=None, target=None):
        prefix, _, old = fullname.partition(".")
        if prefix != PACKAGE or old not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        old = spec.name.partition(".")[2]
        module = importlib.import_module(f"{PACKAGE}.{MOVED_MODULES[old]}")
        spec.loader_state = module.__spec__  # the real spec, restored below
        return module

    def exec_module(self, module):
        # the import system set the alias's spec on the module; put the real one back
        module.__spec__ = module.__spec__.loader_state


def _register() -> None:
    """Install the finder; register the moved modules the package has already imported.

    Registering them now means that importing an old path never rebinds a package attribute
    (``riemattn.integrate`` and ``riemattn.sweep`` are functions); as attributes (``ra.manifolds``,
    ``ra.fields``, ``riemattn.solvers.steppers``, ...) they are what the old layouts gave.
    """
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())
    for old, new in MOVED_MODULES.items():
        module = sys.modules.get(f"{PACKAGE}.{new}")
        if module is None:
            continue
        sys.modules.setdefault(f"{PACKAGE}.{old}", module)
        parent, _, leaf = f"{PACKAGE}.{old}".rpartition(".")
        if not hasattr(sys.modules[parent], leaf):
            setattr(sys.modules[parent], leaf, module)
    for where, names in MOVED_NAMES.items():
        module = importlib.import_module(f"{PACKAGE}.{where}")
        for name, home in names.items():
            setattr(module, name, getattr(importlib.import_module(f"{PACKAGE}.{home}"), name))


def __getattr__(name):
    """The package's ``__getattr__``: ``ra.simulate`` and the other flat old modules not imported
    with the package are loaded on first use."""
    if name in MOVED_MODULES and "." not in name:
        return importlib.import_module(f"{PACKAGE}.{name}")
    raise AttributeError(f"module {PACKAGE!r} has no attribute {name!r}")


_register()
