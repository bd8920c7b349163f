"""The one place the compiled loops import the field kernels from (:mod:`riemattn.dynamics.kernels`;
importing it installs the engine-wide cache stamp of :mod:`riemattn.dynamics._kernel_cache` before
any compiled loop is defined)."""

from ...dynamics.kernels import (  # noqa: F401
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
