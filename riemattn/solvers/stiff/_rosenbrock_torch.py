r"""The differentiable torch path of the stiff steppers (``"rodas4"``, ``"rodas4p"``, ``"auto"``).

Used by :mod:`riemattn.solvers.rosenbrock` and :mod:`riemattn.solvers.auto` when the tokens are
torch tensors and they or a tensor parameter of the field (P, U, beta, W) require gradients; the
NumPy host step would cut the graph. Every quantity of the step is a torch operation, so autograd
flows through all of it, **including the Jacobian**: the discrete map ``y0 -> y1`` of a Rosenbrock
method depends on the parameters also through ``J = dG/dx`` (its derivative involves second
derivatives of the field), and finite differences of the discrete map see that dependence.

The lifted field ``G(t, x) = |x|_W F(t, pi_W x)`` is differentiated by reverse mode at the
step's start ``y`` with ``create_graph``, so that J stays in the graph
(:func:`lifted_jacobian_torch`: one evaluation of G, the field's own torch code as for the
explicit steppers, then ``l d`` vector-Jacobian products batched over the cotangents). At
``|y|_W = 1`` this is ``J_G = DF (I - y y^T W) + F (W y)^T``, the matrix the NumPy path builds
from the closed-form ``DF``. The linear systems ``(I / (h gamma) - J) U_i = rhs_i`` share one
batched inverse (``torch.linalg.inv_ex``, as the NumPy path's ``numpy.linalg.inv``; its backward
is a few matrix products). The stage formulas, the forward difference in t for time-dependent
fields, the retraction, the embedded error, ``k_next`` and the dense output are those of the
NumPy path. The Jacobian's evaluation of G is not counted in ``nfev`` (nor is the NumPy path's
closed-form Jacobian).

Step sizes and the method choice of ``"auto"`` (its mode and counter, ``StepResult.state``) are
decided on detached values: they are constants of the differentiated map, as the step sizes of
the explicit adaptive steppers (:mod:`riemattn.solvers.core._loops`).

References
----------
E. Hairer, G. Wanner, *Solving Ordinary Differential Equations II*, 2nd ed., Springer 1996,
section IV.7, (7.25) (the stage equations). A. Griewank, A. Walther, *Evaluating Derivatives*,
2nd ed., SIAM 2008 (reverse mode, second derivatives).
"""

from __future__ import annotations

import numpy as np

from ..._backend import _torch, requires_grad
from ...dynamics.attention import AttentionField
from ...dynamics.jacobians import is_autonomous
from ..explicit.steppers import Interpolant, StepResult, per_trajectory, shifted_time

__all__ = ["auto_interpolant", "auto_step", "differentiated", "torch_path", "lifted_jacobian_torch",
           "rosenbrock_interpolant", "rosenbrock_step"]

DT_FACTOR = float(np.sqrt(np.finfo(float).eps))


def differentiated(field, y) -> bool:
    """Whether the tokens or a tensor parameter of the field (P, U, beta, W) require gradients."""
    if requires_grad(y):
        return True
    parts = [getattr(field, "beta", None), getattr(getattr(field, "manifold", None), "_W_param", None)]
    parts += [getattr(getattr(field, name, None), "param", None) for name in ("_P", "_U")]
    return any(requires_grad(p) for p in parts if p is not None)


def torch_path(field, y) -> bool:
    """Whether a step on tensors ``y`` takes this module's torch path: when something requires
    gradients (:func:`differentiated`), or when the field is a user's field (anything but the
    attention field, whose NumPy evaluation on the host is known to be the same map): a user's
    field is written for the tokens' kind and may close over tensors that require grad."""
    return differentiated(field, y) or not isinstance(field, AttentionField)


def _lifted(field, t, x):
    """G(t, x) = |x|_W F(t, pi_W x)."""
    X, r = field.manifold.normalize(x)
    F = field(t, X)
    return F if r is None else F * r


def lifted_jacobian_torch(field, t, y):
    """J_G at tokens ``y`` (torch), shape (..., l d, l d), by reverse-mode autodiff of the lifted
    field; differentiable (with respect to y and the field's parameters) when grad mode is on.

    One evaluation of G on the whole batch, then ``l d`` vector-Jacobian products batched over
    the cotangents (``torch.autograd.grad(..., is_grads_batched=True, create_graph=True)``): the
    cotangent ``e_k`` on every trajectory gives row ``k`` of each trajectory's Jacobian, the
    trajectories being independent.
    """
    torch = _torch()
    create = torch.is_grad_enabled()
    batch, (l, d) = tuple(y.shape[:-2]), tuple(y.shape[-2:])
    n = l * d
    with torch.enable_grad():  # also under no_grad (the forward pass of reentrant checkpointing)
        x = y if (y.requires_grad and create) else y.detach().requires_grad_(True)
        G = _lifted(field, t, x)
        eye = torch.eye(n, dtype=y.dtype, device=y.device).reshape((n,) + (1,) * len(batch) + (l, d))
        rows, = torch.autograd.grad(G, x, grad_outputs=eye.expand((n,) + batch + (l, d)),
                                    is_grads_batched=True, create_graph=create)
    # rows[k, b] = d G_b[k] / d x_b: row k of trajectory b's Jacobian
    return rows.reshape((n,) + batch + (n,)).movedim(0, -2)


def _combine(coef, Us):
    """sum_j coef_j Us[j] over the first len(coef) stages (None if all coefficients vanish)."""
    out = None
    for c, U in zip(np.asarray(coef, dtype=float).tolist(), Us):
        if c != 0.0:
            out = U * c if out is None else out + U * c
    return out


def _plus(a, b):
    return a if b is None else (b if a is None else a + b)


def rosenbrock_step(stepper, field, t, y, h, k1=None):
    """One step of a :class:`~riemattn.solvers.rosenbrock.ProjectedRosenbrock` on torch tokens,
    every operation in the autograd graph (see the module docstring); the StepResult of the NumPy
    path, its stages ``(U, x1, J)`` as tensors."""
    torch = _torch()
    tab = stepper.tableau
    normalize = field.manifold.normalize
    frozen = None
    if torch.is_tensor(h) and h.ndim and not bool((h != 0).all()):  # rows kept still by the loop
        frozen = h == 0
        h = torch.where(frozen, torch.full_like(h, 1e-6), h)
    elif not torch.is_tensor(h) and np.ndim(h) and not np.all(h):
        frozen = torch.as_tensor(np.asarray(h) == 0, device=y.device)
        h = np.where(np.asarray(h) == 0, 1e-6, h)
    hc = per_trajectory(h, y)
    shape, n = tuple(y.shape), y.shape[-2] * y.shape[-1]
    nfev = 0
    F0 = k1
    if F0 is None:
        F0 = field(t, y)
        nfev += 1
    J = lifted_jacobian_torch(field, t, y)  # not counted in nfev, as the NumPy path's closed form
    hg = hc * tab.gamma  # a float or (..., 1, 1)
    eye = torch.eye(n, dtype=y.dtype, device=y.device)
    M = eye / hg - J
    Minv, _ = torch.linalg.inv_ex(M)  # as the NumPy path; a singular row: inf / NaN, reported by integrate
    Ft = None
    if not is_autonomous(field):  # forward difference in t, step per trajectory
        if torch.is_tensor(t):
            dt = DT_FACTOR * torch.clamp(torch.abs(t), min=1.0)
            t_dt = t + dt
        elif np.ndim(t):
            tt = np.asarray(t, dtype=float)
            dt = DT_FACTOR * np.maximum(1.0, np.abs(tt))
            t_dt = tt + dt
        else:
            dt = DT_FACTOR * max(1.0, abs(float(t)))
            t_dt = float(t) + dt
        Ft = (field(t_dt, y) - F0) / per_trajectory(dt, y)
        nfev += 1
    times = [t] + [shifted_time(t, float(c), h) for c in tab.c[1:]]
    flat = shape[:-2] + (n, 1)
    Us = []
    for i in range(tab.stages):
        if i == 0:
            rhs = F0
        else:
            Xn, r = normalize(_plus(y, _combine(tab.a[i, :i], Us)))
            rhs = field(times[i], Xn)
            nfev += 1
            if r is not None:
                rhs = rhs * r
            extra = _combine(tab.C[i, :i], Us)
            if extra is not None:
                rhs = rhs + extra / hc
        if Ft is not None and tab.d[i] != 0.0:
            rhs = rhs + (hc * float(tab.d[i])) * Ft
        Us.append((Minv @ rhs.reshape(flat)).reshape(shape))
    x1 = _plus(y, _combine(tab.m, Us))
    y_new, r = normalize(x1)
    e = field.manifold.tangent(y_new, _combine(tab.m - tab.m_hat, Us))
    error = e if r is None else e / r
    if frozen is not None:
        keep = frozen.reshape(frozen.shape + (1, 1))
        y_new, error = torch.where(keep, y, y_new), torch.where(keep, torch.zeros_like(error), error)
    k_next = field(shifted_time(t, 1.0, h), y_new)
    nfev += 1
    return StepResult(y_new, error, nfev, k_next, (torch.stack(Us), x1, J))


def rosenbrock_interpolant(stepper, field, t, y, h, res):
    """The dense output of :func:`rosenbrock_step` (order 3, retracted), in torch."""
    torch = _torch()
    U, x1, _ = res.stages
    H = stepper.tableau.H
    ka, kb = _combine(H[0], U), _combine(H[1], U)
    ka = torch.zeros_like(y) if ka is None else ka
    kb = torch.zeros_like(y) if kb is None else kb
    retract = field.manifold.retract

    def u(theta):
        s = theta if not torch.is_tensor(theta) else theta.to(y.dtype)
        s = per_trajectory(s if torch.is_tensor(s) or np.ndim(s) else float(s), y)
        return retract((1.0 - s) * y + s * (x1 + (1.0 - s) * (ka + s * kb)))

    return Interpolant(u)


# --- "auto" on differentiated tensors ---------------------------------------------------------
def _rms(x):
    return x.square().mean(dim=(-2, -1)).sqrt()


def _abs_h(h, like):
    """|h| (a float, array or tensor) as a detached tensor of ``like``'s dtype and device."""
    torch = _torch()
    if torch.is_tensor(h):
        return h.detach().abs().to(like.dtype)
    return torch.as_tensor(np.abs(np.asarray(h, dtype=float)), dtype=like.dtype, device=like.device)


def _explicit(auto, field, t, y, h, k1, rules):
    """Dormand--Prince step and its stiffness flag (Hairer's rho > rules[1]), on detached values."""
    torch = _torch()
    res = auto.explicit.step(field, t, y, h, k1)
    K = res.stages[0].detach()
    tab = auto.explicit.tableau
    dx = per_trajectory(h, y) * _combine(tab.b_ - tab.A_[5], K)
    rho = _abs_h(h, K) * _rms(K[6] - K[5]) / _rms(dx.detach())
    signal = (rho > rules[1]).to(rho.dtype) + (rho > rules[3]).to(rho.dtype)  # 2 stiff, 1 elevated
    return res, torch.where(torch.isfinite(rho), signal, torch.zeros_like(rho))


def _stiff(auto, field, t, y, h, k1, rules):
    """RODAS4P step (torch path) and its flag: not (h |J|_inf < rules[2])."""
    res = rosenbrock_step(auto.stiff, field, t, y, h, k1)
    norm = res.stages[2].detach().abs().sum(dim=-1).amax(dim=-1)
    return res, 2.0 * (~(_abs_h(h, norm) * norm < rules[2])).to(norm.dtype)


def _rows(a, idx):
    torch = _torch()
    if torch.is_tensor(a):
        return a if a.ndim == 0 else a.reshape(-1)[idx]
    return a if np.ndim(a) == 0 else np.asarray(a).reshape(-1)[idx.cpu().numpy()]


def auto_step(auto, field, t, y, h, k1, state, rules):
    """:meth:`riemattn.solvers.auto.AutoSwitch.step` on differentiated tensors: the modes and
    counters (``state``) are decided on detached values, the steps are the differentiable explicit
    step or :func:`rosenbrock_step`; ``rules = (SWITCH_AFTER, rho_stiff, rho_back, rho_elevated,
    PROBE_AFTER)``."""
    torch = _torch()
    batch = tuple(y.shape[:-2])
    f64 = {"dtype": torch.float64, "device": y.device}
    if state is None:
        state = torch.zeros(batch + (3,), **f64)
    else:
        state = torch.as_tensor(state).detach().to(**f64).reshape(batch + (3,))
    mode, count, elevated = state[..., 0] > 0.5, state[..., 1], state[..., 2]
    groups = None
    if not bool(mode.any()):
        res, signal = _explicit(auto, field, t, y, h, k1, rules)
    elif bool(mode.all()):
        res, signal = _stiff(auto, field, t, y, h, k1, rules)
    else:
        res, signal, groups = _mixed(auto, field, t, y, h, k1, mode, rules)
    signal = signal.expand(batch)
    stiff_now = signal >= 2.0
    other = torch.where(mode, ~stiff_now, stiff_now)
    zero = torch.zeros_like(count)
    count = torch.where(other, count + 1, zero)
    elevated = torch.where(~mode & (signal >= 1.0), elevated + 1, elevated)
    switch = (count >= rules[0]) | (~mode & (elevated >= rules[4]))
    new_state = torch.stack([torch.where(switch, ~mode, mode).to(torch.float64),
                             torch.where(switch, zero, count), torch.where(switch, zero, elevated)], dim=-1)
    return StepResult(res.y, res.error, res.nfev, res.k_next, (mode, res.stages, groups), new_state)


def _mixed(auto, field, t, y, h, k1, mode, rules):
    """Explicit rows and stiff rows stepped separately (fields restricted with ``take``), the
    results put back in place by an inverse permutation (differentiable)."""
    torch = _torch()
    flat = mode.reshape(-1)
    n, tail = flat.numel(), tuple(y.shape[-2:])
    yf = y.reshape((n,) + tail)
    k1f = None if k1 is None else k1.reshape((n,) + tail)
    take = getattr(field, "take", None)
    groups = []
    for stiff, method in ((False, _explicit), (True, _stiff)):
        idx = torch.nonzero(flat == stiff).reshape(-1)
        sub = take(idx, (n,)) if callable(take) else None
        if sub is None:  # the field cannot be restricted: both methods on every row, then select
            groups = None
            break
        ts, ys, hs = _rows(t, idx), yf[idx], _rows(h, idx)
        r, s = method(auto, sub, ts, ys, hs, None if k1f is None else k1f[idx], rules)
        groups.append((idx, sub, ts, ys, hs, r, s))
    if groups is None:
        (re, se), (rs, ss) = (m(auto, field, t, y, h, k1, rules) for m in (_explicit, _stiff))
        keep = mode[..., None, None]
        res = StepResult(torch.where(keep, rs.y, re.y), torch.where(keep, rs.error, re.error),
                         re.nfev + rs.nfev, torch.where(keep, rs.k_next, re.k_next))
        groups = [(None, field, t, y, h, re, se), (None, field, t, y, h, rs, ss)]
        return res, torch.where(mode, ss.expand(mode.shape), se.expand(mode.shape)), groups
    inv = torch.argsort(torch.cat([g[0] for g in groups]))

    def put(parts):  # rows of the two groups back in the batch's order
        return torch.cat([p.reshape((-1,) + tail) for p in parts])[inv].reshape(y.shape)

    res = StepResult(put([g[5].y for g in groups]), put([g[5].error for g in groups]),
                     sum(g[5].nfev for g in groups), put([g[5].k_next for g in groups]))
    stiff_now = torch.cat([g[6].reshape(-1) for g in groups])[inv].reshape(mode.shape)
    return res, stiff_now, groups


def auto_interpolant(auto, field, t, y, h, res):
    """The dense output of :func:`auto_step`: that of the method each trajectory stepped with."""
    torch = _torch()
    mode, stages, groups = res.stages
    if groups is None:
        method = auto.stiff if bool(mode.all()) else auto.explicit
        return method.interpolant(field, t, y, h, res._replace(stages=stages))
    tail = tuple(y.shape[-2:])
    parts = [(g[0], (auto.stiff if k else auto.explicit).interpolant(g[1], g[2], g[3], g[4], g[5]))
             for k, g in enumerate(groups)]
    if parts[0][0] is None:  # both methods on every row: select by mode
        keep = mode[..., None, None]
        return Interpolant(lambda theta: torch.where(keep, parts[1][1](theta), parts[0][1](theta)),
                           nfev=sum(p[1].nfev for p in parts))
    inv = torch.argsort(torch.cat([p[0] for p in parts]))

    def u(theta):
        vals = [interp(_rows(theta, idx)).reshape((-1,) + tail) for idx, interp in parts]
        return torch.cat(vals)[inv].reshape(y.shape)

    return Interpolant(u, nfev=sum(p[1].nfev for p in parts))
