"""The one place the compiled loops import the field kernels from (see the kernels' contract in
:mod:`riemattn.dynamics.kernels`): the stand-in until the real kernels are merged."""

from ._standin_kernel import (  # noqa: F401
    lifted_jac,
    pack_field,
    project,
    rhs,
    time_derivative,
    to_tangent,
    update,
    wnorm,
)
