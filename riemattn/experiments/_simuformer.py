"""The update rule and the statistic of the public simuformer code, rewritten in NumPy to compare with.

Source read (not copied): github.com/nikitus20/simuformer, ``simuxform.py`` (class ``SimuXForm``,
methods ``step`` and ``check_stats``) and ``runner.py`` (``do_single_beta``), commit 1959a8a. One
step of size eta from directions ``M`` (unit rows) and radii ``r`` (one per token, initially 1):

- attention ``A = sum_h softmax_j(beta M B_h M^T) M V_h / n_heads`` (rows; values ``V_h^T theta_j``);
- ``postln``: ``M <- N(M + eta A)``;
- ``preln``: ``r <- r + eta r sum_k A_k``, then ``M <- N(M + eta (A - <M, A> M) / (r + 1e-9))``;
- ``periln``: with ``a = A / (|A| + 1e-9)``: ``r <- r + eta r sum_k a_k``, then
  ``M <- N(M + eta a / (r + 1e-9))``;
- ``ngpt``: ``M <- N(M + eta 0.2 A / (|A| + 1e-9))``.

The radius rule ``r' = r sum_k A_k`` (the sum of the components of A, times r) is what the code
computes (``torch.sum(self.r.unsqueeze(-1) * A, dim=-1)``); its comment and the model say
``r' = <theta, A>``. ``radius="model"`` replaces it by ``r' = <theta, A>`` (``<theta, a>`` for
Peri-LN) to show that this rule is where the codes differ. The statistic (``check_stats``) is the
fraction of ordered pairs i != j of a batch with ``<theta_i, theta_j> > 0.999``, recorded at the
first step whose time (accumulated ``t += eta``) reaches each checkpoint of
``linspace(0, T, K)``; the first checkpoint is therefore recorded after one step.
"""

from __future__ import annotations

import numpy as np

NORMS = {"post": "postln", "pre": "preln", "peri": "periln", "ngpt": "ngpt"}


def _unit(v, eps=0.0):
    return v / (np.linalg.norm(v, axis=-1, keepdims=True) + eps)


def attention(M, B, V, beta):
    """A (..., n, d): heads averaged; ``B``, ``V`` of shape (h, d, d), ``beta`` (...,) or a float."""
    beta = np.asarray(beta, dtype=float)[..., None, None]
    A = np.zeros_like(M)
    for Bh, Vh in zip(B, V):
        S = beta * (M @ Bh @ np.swapaxes(M, -1, -2))
        S = np.exp(S - S.max(axis=-1, keepdims=True))
        A += (S / S.sum(axis=-1, keepdims=True)) @ (M @ Vh) / len(B)
    return A


def step(M, r, A, norm, eta, *, alpha=0.2, radius="simuformer"):
    """One ``SimuXForm.step`` update of (M, r) given the attention A; returns the new (M, r)."""
    if norm == "post":
        return _unit(M + eta * A), r
    if norm == "ngpt":
        return _unit(M + eta * alpha * _unit(A, 1e-9)), r
    a = A if norm == "pre" else _unit(A, 1e-9)
    rate = np.sum(a, axis=-1) if radius == "simuformer" else np.sum(M * a, axis=-1)
    r = r + eta * (r if radius == "simuformer" else 1.0) * rate
    move = a - np.sum(M * a, axis=-1, keepdims=True) * M if norm == "pre" else a
    return _unit(M + eta * move / (r[..., None] + 1e-9)), r


def clustered_fraction(M, threshold=0.999):
    """Fraction of pairs with <theta_i, theta_j> > threshold, per leading index of M (..., n, d)."""
    n = M.shape[-2]
    G = M @ np.swapaxes(M, -1, -2)
    iu = np.triu_indices(n, k=1)
    return np.mean(G[..., iu[0], iu[1]] > threshold, axis=-1)


def run(M0, B, V, betas, norm, eta, t1, n_ckpt, *, alpha=0.2, radius="simuformer", threshold=0.999):
    """Fraction of clustered pairs at simuformer's checkpoints, shape (len(betas), n_ckpt, m), and
    the number of steps taken when each checkpoint was recorded, shape (n_ckpt,).

    ``M0`` (m, n, d) unit rows shared by every beta (simuformer draws them per beta; here they are
    common random numbers), ``B``, ``V`` (h, d, d) shared by the batch (simuformer's
    ``--noanneal 1``). Recording follows ``do_single_beta``.
    """
    betas = np.asarray(betas, dtype=float)
    M = np.broadcast_to(M0, (len(betas),) + M0.shape).copy()
    r = np.ones(M.shape[:-1])
    ckpts = np.linspace(0.0, t1, n_ckpt, dtype=np.float32)  # torch.linspace, float32, as in runner.py
    out = np.empty((len(betas), n_ckpt, M0.shape[0]))
    steps = np.zeros(n_ckpt, dtype=int)
    t, k, s = 0.0, 0, 0
    bshape = betas[:, None]
    while True:
        M, r = step(M, r, attention(M, B, V, bshape), norm, eta, alpha=alpha, radius=radius)
        t += eta
        s += 1
        if k < n_ckpt and t >= ckpts[k]:
            frac = clustered_fraction(M, threshold)
            while k < n_ckpt and t >= ckpts[k]:
                out[:, k], steps[k] = frac, s
                k += 1
        if k >= n_ckpt or t >= t1:
            if k < n_ckpt:
                out[:, k:], steps[k:] = clustered_fraction(M, threshold)[:, None], s
            return out, steps
