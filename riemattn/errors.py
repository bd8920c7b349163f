"""The package's error types.

Every documented entry point raises one of these for bad input, with a message that names
the argument, what was expected and what was received. They subclass the built-in
``ValueError`` / ``TypeError`` so ``except ValueError`` keeps working.
"""

from __future__ import annotations

__all__ = ["RiemattnError", "ValidationError", "InputTypeError", "IntegrationError", "MissingDependencyError",
           "UnsupportedByEngine", "SinkhornConvergenceWarning"]


class RiemattnError(Exception):
    """Base class of every error riemattn raises on purpose."""


class ValidationError(RiemattnError, ValueError):
    """An argument has the right type but a wrong value (shape, range, not on the manifold...)."""


class InputTypeError(RiemattnError, TypeError):
    """An argument has the wrong type (e.g. a string where an array or callable is expected)."""


class IntegrationError(RiemattnError, RuntimeError):
    """An integration did not reach its final time (raised only when asked for)."""


class MissingDependencyError(RiemattnError, ImportError):
    """An optional dependency is not installed; the message names the extra that installs it.

    An ``ImportError``, so ``pytest.importorskip`` and ``except ImportError`` treat it as one."""


class UnsupportedByEngine(ValidationError):
    """``integrate(..., engine="compiled")`` was asked for a call the compiled engine cannot run.

    The message names what is unsupported (a Python field, a callable weight, a ``save_fn``, a user
    event, ...). Only ``engine="auto"`` falls back to the NumPy engine silently."""


class SinkhornConvergenceWarning(RuntimeWarning):
    """Sinkhorn attention's column sums stayed above ``sinkhorn_tol``
    (``AttentionField(normalization="sinkhorn", on_nonconvergence="warn")``, the default).

    ``on_nonconvergence="raise"`` raises :class:`IntegrationError` instead; ``"ignore"`` passes."""

