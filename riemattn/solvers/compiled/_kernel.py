"""The one place the compiled loops import the field kernels from (the contract of
:mod:`riemattn.dynamics.kernels`): the stand-in until the real kernels are merged."""

from ._cache import install

install()  # the engine's cache locators, before any of its compiled functions is defined

from ._standin_kernel import (  # noqa: E402, F401
    LIFTED_JAC,
    RHS,
    TIME_DERIVATIVE,
    UPDATE,
    evaluate,
    pack_field,
    project,
    to_tangent,
    wnorm,
)
