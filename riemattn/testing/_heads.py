"""Bounded time-varying head matrices P_eta(t), U_eta(t) (drawn by ``strategies.head_matrices``).

:class:`TimeVaryingHeads` lives in :mod:`riemattn.dynamics.schedules` (the compiled engine reads
it as data); it is importable from here and from :mod:`riemattn.testing.strategies` as before.
"""

from __future__ import annotations

from ..dynamics.schedules import TimeVaryingHeads, _sym  # noqa: F401 - re-exported
