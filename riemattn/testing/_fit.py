"""The least-squares slope of a log-log error plot, with a rounding floor: :class:`Fit`.

An error at or below its floor (the rounding level of the measured quantity, or the accuracy of
the reference it is compared with) carries no information about the slope: it is left out of the
fit. When every error is at the floor the measured quantity is exact to the floor at every step
(an equilibrium, a cost that is constant or linear along the direction, a method exact on the
problem): the slope is +inf ("order >= anything") and the check passes, saying so in ``note``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ValidationError


@dataclass(frozen=True)
class Fit:
    """A least-squares line through ``(log h, log errors)``: ``errors ~ exp(intercept) h^slope``.

    Attributes
    ----------
    h, errors : ndarray, shape (k,)
        Step sizes (or step lengths t) and the measured errors.
    slope, intercept : float
        Of the points above the floor. ``slope = inf`` (and ``intercept = nan``) when no slope can
        be measured because the errors are at the floor (:attr:`exact`).
    expected : float or None
        The slope theory predicts.
    quantity : str
        What was measured (used in messages and plots).
    floor : ndarray, shape (k,), or None
        The rounding level of each error: errors at or below it are left out of the fit.
    at_least : bool
        ``expected`` is a lower bound: the measured quantity is O(h^expected), and a larger slope
        means its leading term vanishes at this point and direction (e.g. a cost whose Hessian is
        zero along the direction, for a gradient check). :meth:`assert_slope` then accepts
        ``slope >= expected - tol``; otherwise ``|slope - expected| <= tol``.
    note : str
        What was left out of the fit and why, or why the check passes without a slope.
    fitted : ndarray of bool, shape (k,), or None
        The points the line was fitted to, when not all those above the floor (``window``).
    """

    h: np.ndarray
    errors: np.ndarray
    slope: float
    intercept: float
    expected: float | None
    quantity: str
    floor: np.ndarray | None = None
    at_least: bool = False
    note: str = ""
    fitted: np.ndarray | None = None

    @property
    def order(self) -> float:
        """The slope (the measured order, for :func:`~riemattn.testing.slopes.check_order`)."""
        return self.slope

    @property
    def used(self) -> np.ndarray:
        """Which points the line was fitted to (errors above the floor), bool of shape (k,)."""
        if self.fitted is not None:
            return self.fitted
        floor = np.zeros_like(self.errors) if self.floor is None else self.floor
        return self.errors > floor

    @property
    def exact(self) -> bool:
        """Whether no slope was measured because the errors are at the floor (the check passes)."""
        return bool(np.isinf(self.slope))

    def _table(self) -> str:
        rows = ", ".join(f"{h:.3g}: {e:.3e}" for h, e in zip(self.h, self.errors))
        floor = "" if self.floor is None else f"; floor {np.min(self.floor):.1e} .. {np.max(self.floor):.1e}"
        return f"h: error = {rows}{floor}"

    def assert_slope(self, expected=None, tol=0.2):
        """Raise ``AssertionError`` (with the table of h and errors) unless the slope is as expected.

        Passes when the errors are at the floor (:attr:`exact`), when ``slope >= expected - tol``
        for an ``at_least`` fit, and when ``|slope - expected| <= tol`` otherwise. Returns ``self``.
        """
        expected = self.expected if expected is None else expected
        if self.exact and expected is not None:
            return self
        ok = expected is not None and (self.slope >= expected - tol if self.at_least
                                       else abs(self.slope - expected) <= tol)
        if not ok:
            want = f">= {expected} - {tol}" if self.at_least else f"{expected} +- {tol}"
            note = f" {self.note}" if self.note else ""
            raise AssertionError(f"{self.quantity}: measured slope {self.slope:.3f}, expected {want} "
                                 f"({self._table()}).{note}")
        return self

    def plot(self, ax=None):
        """The errors, their floor and the fitted line on log-log axes; returns the matplotlib Figure."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(4.5, 3.5), layout="constrained")
        used = self.used
        ax.loglog(self.h[used], self.errors[used], "o", label="measured")
        if not used.all():
            shown = np.maximum(self.errors[~used], np.finfo(float).tiny)  # zeros at the bottom of the axis
            ax.loglog(self.h[~used], shown, "o", mfc="none", color="C0", label="at the floor (not fitted)")
        if self.floor is not None:
            ax.loglog(self.h, self.floor, "k--", lw=0.8, label="floor")
        if np.isfinite(self.slope):
            ax.loglog(self.h, np.exp(self.intercept) * self.h ** self.slope, "-", label=f"slope {self.slope:.2f}")
            if self.expected is not None:
                last = np.flatnonzero(used)[-1]
                ref = self.errors[last] * (self.h / self.h[last]) ** self.expected
                ax.loglog(self.h, ref, "k:", label=f"slope {self.expected:g} (theory)")
        ax.set_xlabel("h (step size or length)")
        ax.set_ylabel("error")
        ax.set_title(self.quantity if not self.exact else f"{self.quantity}: exact to the floor", fontsize=9)
        ax.legend(fontsize=8)
        return ax.figure


def fit_slope(h, errors, expected, quantity, *, floor=None, at_least=False, floor_means="rounding floor",
              window=None):
    """A :class:`Fit` of the errors above ``floor``.

    ``window``: fit only the ``window`` smallest h above the floor (the asymptotic range, where
    the leading term dominates; larger h are left out and named in the note).

    Every error at the floor: an exact fit (slope inf). One error above it: for an ``at_least``
    fit the same (the single error above the floor is within a few times the floor, see the
    note), else a ``ValidationError`` (no slope can be measured: choose other steps). Non-finite
    errors: ``ValidationError`` naming the h.
    """
    h, errors = np.asarray(h, dtype=float), np.asarray(errors, dtype=float)
    bad = ~np.isfinite(errors)
    if bad.any():
        raise ValidationError(f"{quantity}: the error is not finite at h = {h[bad].tolist()} (errors {errors}); "
                              "choose other steps.")
    floor = None if floor is None else np.broadcast_to(np.asarray(floor, dtype=float), errors.shape).copy()
    above = errors > (0.0 if floor is None else floor)
    k = int(above.sum())
    left_out = ", ".join(f"{x:.3g}" for x in h[~above])
    if k == 0 or (k == 1 and at_least):
        what = "every error is" if k == 0 else f"every error but one ({errors[above][0]:.2e} at h = {h[above][0]:.3g}) is"
        note = (f"{what} at or below the {floor_means} ({0.0 if floor is None else floor.max():.1e}): "
                "exact to the floor at every step, no slope to measure (slope = inf, order >= anything): passes.")
        return Fit(h, errors, float("inf"), float("nan"), expected, quantity, floor, at_least, note)
    if k == 1:
        raise ValidationError(f"{quantity}: only one error is above the {floor_means} "
                              f"({errors[above][0]:.2e} at h = {h[above][0]:.3g}; errors {errors}): no slope to "
                              "measure: choose larger steps (fewer of them).")
    note = f"left out of the fit (at or below the {floor_means}): h = {left_out}." if k < h.size else ""
    fitted = None
    if window is not None and k > window:
        keep = np.flatnonzero(above)[np.argsort(h[above], kind="stable")[:window]]
        fitted = np.zeros_like(above)
        fitted[keep] = True
        beyond = ", ".join(f"{x:.3g}" for x in h[above & ~fitted])
        note = (note + " " if note else "") + (f"Left out as beyond the asymptotic range (the fit uses the {window} "
                                               f"smallest h above the floor): h = {beyond}.")
    use = above if fitted is None else fitted
    slope, intercept = np.polyfit(np.log(h[use]), np.log(errors[use]), 1)
    return Fit(h, errors, float(slope), float(intercept), expected, quantity, floor, at_least, note, fitted)
