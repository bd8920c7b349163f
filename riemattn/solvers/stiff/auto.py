r"""``"auto"``: explicit Dormand--Prince 5(4) that switches per trajectory to RODAS4P when stiff.

Every trajectory of a batch starts with the projected ``"dopri5"`` and carries its own mode and
counter across steps (``StepResult.state``, kept and compacted with the rows by the adaptive
loop). Detection rule, per trajectory, on every attempted step:

* explicit -> stiff (after Hairer's test in DOPRI5): the last two stages of Dormand--Prince are
  both at ``t + h``, at the lifted points ``X_6`` and ``x_1``; ``rho = h |G(x_1) - G(X_6)| /
  |x_1 - X_6|`` estimates ``h |lambda|`` for the dominant eigenvalue. The real stability
  interval of DOPRI5 ends near 3.3; a step with ``rho > 1.2`` counts as stiff, any other step
  resets the count. (Hairer's code uses 3.25; under riemattn's PI controller stability-limited
  steps settle lower, at ``rho`` = 1.55 on x' = -1000 (x - cos t), measured. Accuracy alone
  keeps ``rho`` below about 0.3 for DOPRI5 at tolerance 1e-6: (h lambda)^5 / 120 ~ tol.) After ``SWITCH_AFTER`` (= 15) stiff steps in a row the trajectory switches to
  ``"rodas4p"``: its steps were held by stability, not accuracy.
* stiff -> explicit: RODAS4P has the lifted Jacobian J at hand; ``h |J|_inf`` bounds ``h`` times
  its spectral radius. A step with ``h |J|_inf < 0.6`` (the explicit method would be stable,
  with margin, at the step size the stiff method is taking) counts as non-stiff, any other resets
  the count; after ``SWITCH_AFTER`` in a row the trajectory goes back to ``"dopri5"``.
* probe: at loose tolerances (about 1e-2) the explicit steps of a stiff problem can sit just
  below the stability limit with ``rho`` between 0.3 and 1.3, so the in-a-row test never fires
  (USA at beta = 16 with 16 causal tokens: dopri5 took about 2.5e5 steps per unit time), while
  accuracy alone at such tolerances also gives ``rho`` near 1. So explicit steps with ``rho > 0.5``
  are counted (not necessarily in a row); after ``PROBE_AFTER`` (= 300) of them the trajectory
  tries ``"rodas4p"``, and comes back by the rule above if it is not stiff. At tolerance 1e-6
  accuracy keeps ``rho`` below 0.3, so a non-stiff problem is never probed there.

Trajectories in different modes are stepped in two groups (the field restricted with
:meth:`~riemattn.dynamics.fields.Field.take`; a field without it steps all rows with both methods
and selects). The step-size controller uses DOPRI5's error order for both. The counters
``nfev`` of a mixed batch add the evaluations of both groups.

References
----------
E. Hairer, S. P. Norsett, G. Wanner, *Solving Ordinary Differential Equations I*, 2nd ed., section
IV.2 (stiffness detection of DOPRI5). L. Petzold, "Automatic selection of methods for solving
stiff and nonstiff systems of ordinary differential equations", SIAM J. Sci. Stat. Comput. 4
(1983) (LSODA's switching).
"""

from __future__ import annotations

import numpy as np

from ..._backend import is_torch, to_numpy
from ._rosenbrock_torch import auto_interpolant, auto_step, torch_path
from ..explicit.dormand_prince import ProjectedDormandPrince
from .rosenbrock import ProjectedRodas4P, _norm_inf, host_interpolant, host_step
from ..explicit.steppers import Interpolant, StepResult, Stepper, _check_field, register

__all__ = ["AutoSwitch", "SWITCH_AFTER", "PROBE_AFTER"]

#: Consecutive steps that must agree before a trajectory changes method.
SWITCH_AFTER = 15
#: Explicit steps with rho > 0.5 (counted, not necessarily in a row) after which a trajectory
#: tries the stiff method anyway (it comes back by the usual rule if it is not stiff).
PROBE_AFTER = 300
_RHO_STIFF, _RHO_BACK, _RHO_ELEVATED = 1.2, 0.6, 0.5


def _rms(x):
    return np.sqrt(np.mean(np.square(x), axis=(-2, -1)))


def _rows(a, idx):
    return a if np.ndim(a) == 0 else np.asarray(a).reshape(-1)[idx]


@register
class AutoSwitch(Stepper):
    """Projected DOPRI5, switching per trajectory to projected RODAS4P when stiff (and back);
    the detection rule is in the module docstring."""

    name = "auto"
    order = 5
    error_order = 4
    adaptive = True
    fsal = True
    dense_order = 3
    stiff = True  # may step with a stiff method

    def __init__(self):
        self.explicit, self.stiff = ProjectedDormandPrince(), ProjectedRodas4P()

    def _explicit(self, field, t, y, h, k1):
        res = self.explicit.step(field, t, y, h, k1)
        K = res.stages[0]
        b6 = self.explicit.tableau.b_ - self.explicit.tableau.A_[5]
        hc = np.asarray(h, dtype=float).reshape(np.shape(h) + (1, 1)) if np.ndim(h) else h
        dx = hc * np.einsum("j,j...->...", b6, K)
        with np.errstate(all="ignore"):
            rho = np.abs(hc[..., 0, 0] if np.ndim(h) else h) * _rms(K[6] - K[5]) / _rms(dx)
            signal = np.where(rho > _RHO_STIFF, 2.0, np.where(rho > _RHO_ELEVATED, 1.0, 0.0))
        return res, np.where(np.isfinite(rho), signal, 0.0)

    def _stiff(self, field, t, y, h, k1):
        res = self.stiff.step(field, t, y, h, k1)
        norm = _norm_inf(res.stages[2])
        return res, np.where(np.abs(np.asarray(h, dtype=float)) * norm < _RHO_BACK, 0.0, 2.0)

    def step(self, field, t, y, h, k1=None, state=None):
        field = _check_field(field)
        if is_torch(y):
            if torch_path(field, y):  # modes decided on detached values, steps in the graph
                return auto_step(self, field, t, y, h, k1, state,
                                 (SWITCH_AFTER, _RHO_STIFF, _RHO_BACK, _RHO_ELEVATED, PROBE_AFTER))
            return host_step(self, field, t, y, h, k1, state=None if state is None else to_numpy(state))
        batch = y.shape[:-2]
        if state is None:  # per trajectory: mode (1 = stiff), steps in a row calling for the other
            state = np.zeros(batch + (3,))  # method, explicit steps with rho > 0.5
        mode, count, elevated = state[..., 0] > 0.5, state[..., 1], state[..., 2]
        if not mode.any():
            res, signal = self._explicit(field, t, y, h, k1)
            groups = None
        elif mode.all():
            res, signal = self._stiff(field, t, y, h, k1)
            groups = None
        else:
            res, signal, groups = self._mixed(field, t, y, h, k1, mode)
        # count steps that call for the other method; switch after SWITCH_AFTER in a row, or probe
        # the stiff method after PROBE_AFTER explicit steps with rho > 0.5
        stiff_now = signal >= 2.0
        other = np.where(mode, ~stiff_now, stiff_now)
        count = np.where(other, count + 1, 0)
        elevated = np.where(~mode & (signal >= 1.0), elevated + 1, elevated)
        switch = (count >= SWITCH_AFTER) | (~mode & (elevated >= PROBE_AFTER))
        new_state = np.stack([np.where(switch, ~mode, mode).astype(float), np.where(switch, 0, count),
                              np.where(switch, 0, elevated)], axis=-1)
        stages = (mode, res.stages, groups)
        return StepResult(res.y, res.error, res.nfev, res.k_next, stages, new_state)

    def _mixed(self, field, t, y, h, k1, mode):
        """Explicit rows and stiff rows stepped separately, results put back in place."""
        flat = mode.reshape(-1)
        n = flat.size
        yf = y.reshape((n,) + y.shape[-2:])
        k1f = None if k1 is None else k1.reshape(yf.shape)
        out = [None, None]
        groups = []
        for stiff, method in ((False, self._explicit), (True, self._stiff)):
            idx = np.flatnonzero(flat == stiff)
            sub = field.take(idx, (n,)) if callable(getattr(field, "take", None)) else None
            if sub is None:  # the field cannot be restricted: both methods on every row
                sub, idx = field, np.arange(n)
                ys, ks, ts, hs = y, k1, t, h
            else:
                ys, ks, ts, hs = yf[idx], None if k1f is None else k1f[idx], _rows(t, idx), _rows(h, idx)
            r, s = method(sub, ts, ys, hs, ks)
            out[stiff] = (idx, r, s.reshape(-1))
            groups.append((idx, sub, ts, ys, hs, r))
        y_new, err, k_next = np.empty_like(yf), np.empty_like(yf), np.empty_like(yf)
        stiff_now = np.empty(n)
        for stiff in (False, True):
            idx, r, s = out[stiff]
            sel = idx[flat[idx] == stiff] if len(idx) == n else idx
            pick = sel if len(idx) == n else slice(None)
            y_new[sel] = r.y.reshape((-1,) + yf.shape[1:])[pick]
            err[sel] = r.error.reshape((-1,) + yf.shape[1:])[pick]
            k_next[sel] = r.k_next.reshape((-1,) + yf.shape[1:])[pick]
            stiff_now[sel] = s[pick]
        nfev = out[0][1].nfev + out[1][1].nfev
        res = StepResult(y_new.reshape(y.shape), err.reshape(y.shape), nfev, k_next.reshape(y.shape))
        return res, stiff_now.reshape(mode.shape), groups

    def interpolant(self, field, t, y, h, res):
        if is_torch(y):
            if is_torch(res.stages[0]):  # a step of the differentiable torch path
                return auto_interpolant(self, field, t, y, h, res)
            return host_interpolant(self, field, t, y, h, res)
        mode, stages, groups = res.stages
        if groups is None:
            method = self.stiff if mode.all() else self.explicit
            return method.interpolant(field, t, y, h, res._replace(stages=stages))
        parts = []
        for stiff, (idx, sub, ts, ys, hs, r) in zip((False, True), groups):
            method = self.stiff if stiff else self.explicit
            parts.append((idx, method.interpolant(sub, ts, ys, hs, r)))
        n = mode.size
        flat = mode.reshape(-1)

        def u(theta):
            out = np.empty((n,) + y.shape[-2:])
            for stiff, (idx, interp) in zip((False, True), parts):
                th = theta if np.ndim(theta) == 0 else np.asarray(theta).reshape(-1)[idx]
                vals = interp(th).reshape((-1,) + y.shape[-2:])
                sel = idx[flat[idx] == stiff] if len(idx) == n else idx
                out[sel] = vals[sel] if len(idx) == n else vals
            return out.reshape(y.shape)

        return Interpolant(u, nfev=sum(p[1].nfev for p in parts))
