r"""Ready-made events for :func:`riemattn.integrate`: consensus, cluster merges, hemispheres, levels.

Each function returns a :class:`riemattn.solvers.events.Event` whose ``g(t, y)`` is a continuous
function of the tokens that changes sign exactly when the described thing happens, so that the
crossing can be located by root finding on the dense output (docs/events.md):

* :func:`consensus` -- the misalignment E(y) = 1 - (1/l) sum_i <u_1, u_i> (ICML eq. 9, u_i = y_i/|y_i|)
  or the consensus distance max_i |y_i - y_1| falls to ``threshold`` (terminal by default).
* :func:`cluster_merge` -- the number of clusters at distance tolerance ``tol`` (tokens linked
  when |y_i - y_j| <= tol, single linkage, as :func:`riemattn.analysis.diagnostics.cluster_count`)
  drops to ``clusters``. Continuous formulation: with ``h_1 >= h_2 >= ... >= h_{l-1}`` the
  single-linkage merge heights (:func:`merge_heights`: the edge lengths of a minimum spanning
  tree of the tokens), the cluster count is ``1 + #{k : h_k > tol}``, and it is at most ``c``
  exactly when ``h_c <= tol``; ``g = h_c - tol`` is continuous in y (merge heights are) and
  crosses 0 downwards at the merge.
* :func:`leave_hemisphere` -- some token leaves the open hemisphere {x : <v, x> > 0}:
  ``g = min_i <v, y_i> / |y_i|``, downwards through 0.
* :func:`leave_common_hemisphere` -- the tokens stop lying in *some* common open hemisphere:
  ``g`` is the margin ``max_{|v|_inf <= 1} min_i <v, u_i>`` (one linear program per trajectory,
  SciPy, on the host), positive exactly when an open hemisphere contains every token, 0 on the
  boundary, negative when 0 is inside the convex hull of the u_i.
* :func:`level` -- any scalar function of the state crossing a level; :func:`energy_level` for
  GLPR's interaction energy E_beta (:func:`riemattn.analysis.gradients.energy`) and
  :func:`lyapunov_level` for V(y) = max_i (1 - <v, y_i>) (ICML eq. 7).

Compiled engine (``integrate(..., engine="compiled")``): consensus, cluster_merge(s),
leave_hemisphere and lyapunov_level carry a declarative ``spec`` that the compiled loops evaluate
themselves; level, energy_level and leave_common_hemisphere (Python functions, a linear program)
run on the NumPy engine.

Backends: consensus, cluster_merge, leave_hemisphere and lyapunov_level compute with the tokens'
array namespace (NumPy or torch, on the device); energy_level and leave_common_hemisphere compute
on the host with NumPy (one copy per call for tensors).

References
----------
Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eqs. (7), (9),
Remark 3.4 (hemispheres). Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical
perspective on Transformers", eq. (3.5) (E_beta), section 6.3 and Problem 1 (metastable
clusters and their merges). J. C. Gower, G. J. S. Ross, "Minimum spanning trees and single
linkage cluster analysis", J. R. Stat. Soc. C 18 (1969).
"""

from __future__ import annotations

import dataclasses
from numbers import Integral

import numpy as np

from .._backend import is_torch, namespace, to_numpy
from .._validation import as_float_array, check_finite, check_int, check_nonnegative, check_real, plain
from ..errors import InputTypeError, ValidationError
from ..solvers.core.events import Event
from .diagnostics import hemisphere_lyapunov
from .gradients import energy

__all__ = [
    "cluster_merge",
    "cluster_merges",
    "consensus",
    "energy_level",
    "leave_common_hemisphere",
    "leave_hemisphere",
    "level",
    "lyapunov_level",
    "merge_heights",
]


def _direction(v):
    """A finite 1-D vector ``v`` (its length is checked against the tokens at the first call)."""
    v = check_finite(as_float_array(v, "v"), "v")
    if v.ndim != 1 or v.size == 0:
        raise ValidationError(f"v must be a non-empty 1-D vector, got shape {v.shape}.")
    return v


def _norms(y):
    xp = namespace(y)
    return xp.sqrt(xp.sum(y * y, axis=-1))


def _misalignment(y):
    xp = namespace(y)
    u = y / _norms(y)[..., None]
    return 1.0 - xp.mean(xp.sum(u[..., :1, :] * u, axis=-1), axis=-1)


def _consensus_distance(y):
    xp = namespace(y)
    return xp.max(_norms(y - y[..., :1, :]), axis=-1)


def consensus(threshold: float, *, measure: str = "misalignment", terminal=True, name=None) -> Event:
    """Event: consensus reached, ``measure(y)`` falls to ``threshold`` (direction down).

    Parameters
    ----------
    threshold : float > 0
    measure : {"misalignment", "distance"}
        The misalignment E(y) (ICML eq. 9; in [0, 2]) or max_i |y_i - y_1|.
    terminal : bool or int
        Stop the trajectory there (default).

    Returns
    -------
    Event
        ``g(t, y) = measure(y) - threshold``, y of shape (m, l, d) -> (m,).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (9), section 3.
    """
    threshold = check_real(threshold, "threshold")
    if not threshold > 0:
        raise ValidationError(f"threshold must be > 0 (consensus measures are >= 0), got {threshold}.")
    fns = {"misalignment": _misalignment, "distance": _consensus_distance}
    if measure not in fns:
        raise ValidationError(f"measure must be one of {sorted(fns)}, got {measure!r}.")
    fn = fns[measure]

    def g(t, y):
        return fn(y) - threshold

    return Event(g, direction=-1, terminal=terminal, name=name or f"consensus_{measure}",
                 spec=(measure, threshold))


def merge_heights(y):
    """Single-linkage merge heights of each configuration, in decreasing order, shape (..., l - 1).

    The edge lengths (Euclidean distances) of a minimum spanning tree of the l tokens (Prim's
    algorithm, vectorised over the batch; for finite NumPy tokens with l > 16, SciPy's single
    linkage of each configuration, 40x faster at l = 200). With distance tolerance ``tol`` the single-linkage
    cluster count is ``1 + #{k : h_k > tol}`` (tokens linked when |y_i - y_j| <= tol, as
    :func:`riemattn.analysis.diagnostics.cluster_count`). The heights are continuous functions
    of the tokens. NumPy arrays or tensors (the result has their kind and device).

    References
    ----------
    J. C. Gower, G. J. S. Ross, "Minimum spanning trees and single linkage cluster analysis",
    J. R. Stat. Soc. C 18 (1969).
    """
    xp = namespace(y)
    batch, l = tuple(y.shape[:-2]), y.shape[-2]
    if type(y) is np.ndarray and l > _SMALL_L and np.all(np.isfinite(y)):
        return _merge_heights_scipy(y)
    Y = xp.reshape(y, (-1, l, y.shape[-1]))
    m = Y.shape[0]
    G = Y @ xp.permute_dims(Y, (0, 2, 1))
    sq = xp.sum(Y * Y, axis=-1)
    D = xp.clip(sq[:, :, None] + sq[:, None, :] - 2.0 * G, 0.0, None)  # squared: same tree, sqrt at the end
    rows = xp.arange(m, device=getattr(y, "device", None)) if is_torch(y) else np.arange(m)
    inf = float("inf")
    best = xp.asarray(D[:, 0, :], copy=True)
    used = xp.zeros((m, l), dtype=xp.bool, device=getattr(y, "device", None)) if is_torch(y) else np.zeros((m, l), bool)
    used[:, 0] = True
    out = []
    for _ in range(l - 1):  # Prim: add the closest outside token; the loop count depends on l only
        cand = xp.where(used, inf, best)
        j = xp.argmin(cand, axis=-1)
        out.append(cand[rows, j])
        used[rows, j] = True
        best = xp.minimum(best, D[rows, j, :])
    if not out:
        return xp.zeros(batch + (0,), dtype=y.dtype)
    H = xp.sqrt(xp.stack(out, axis=-1))
    H = -xp.sort(-H, axis=-1)
    return xp.reshape(H, batch + (l - 1,))


#: Above this many tokens, NumPy configurations go one at a time through SciPy's single linkage
#: (measured 40x faster than the batched Prim loop at l = 200, slower below l = 16).
_SMALL_L = 16


def _merge_heights_scipy(y):
    """merge_heights of finite NumPy tokens: SciPy's single linkage of each configuration."""
    from scipy.cluster.hierarchy import linkage
    from scipy.spatial.distance import pdist

    batch, (l, d) = y.shape[:-2], y.shape[-2:]
    Y = y.reshape((-1, l, d))
    H = np.array([linkage(pdist(x), "single")[:, 2] for x in Y]).reshape((-1, l - 1))
    return -np.sort(-H, axis=-1).reshape(batch + (l - 1,))


def cluster_merge(tol: float, clusters: int, *, terminal=False, name=None) -> Event:
    """Event: the single-linkage cluster count at distance ``tol`` drops to ``clusters``.

    ``g(t, y) = h_c(y) - tol``, ``h_c`` the c-th largest merge height (:func:`merge_heights`),
    direction down: it crosses 0 when the count goes from more than ``c`` to at most ``c``. One
    event per count gives the merge staircase (several merges at once give equal times).

    Parameters
    ----------
    tol : float > 0
        Distance tolerance (GLPR's <x_i, x_j> >= 1 - eps on the sphere is tol = sqrt(2 eps)).
    clusters : int >= 1
    terminal : bool or int

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 6.3, Problem 1.
    """
    tol = check_real(tol, "tol")
    if not tol > 0:
        raise ValidationError(f"tol must be > 0, got {tol}.")
    if isinstance(clusters, bool) or not isinstance(clusters, Integral) or clusters < 1:
        raise ValidationError(f"clusters must be an integer >= 1, got {clusters!r}.")
    c = int(clusters)

    def g(t, y):
        l = y.shape[-2]
        if c >= l:
            raise ValidationError(f"cluster_merge(clusters={c}) needs more than {c} tokens, got l = {l}.")
        return merge_heights(y)[..., c - 1] - tol

    return Event(g, direction=-1, terminal=terminal, name=name or f"merge_to_{c}", spec=("merge", tol, c))


def cluster_merges(tol: float, counts, *, terminal_at=None) -> list:
    """Events :func:`cluster_merge` for several cluster counts, sharing one merge-height computation.

    Returns ``[cluster_merge(tol, c) for c in counts]`` whose ``g`` compute :func:`merge_heights`
    once per state (the step ends are shared by all events; cached by the identity of ``y``).
    ``terminal_at``: the count (one of ``counts``) whose event stops the trajectory (e.g. 1).

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    section 6.3, Problem 1 (the merge staircase).
    """
    tol = check_real(tol, "tol")
    if not tol > 0:
        raise ValidationError(f"tol must be > 0, got {tol}.")
    if isinstance(counts, (str, bytes)) or not hasattr(counts, "__iter__"):
        raise InputTypeError(f"counts must be a sequence of integers >= 1, got {plain(counts)}.")
    counts = [check_int(c, "counts", 1, " (each count)") for c in counts]
    if terminal_at is not None:
        terminal_at = check_int(terminal_at, "terminal_at", 1)
    if not counts or any(c < 1 for c in counts) or len(set(counts)) != len(counts):
        raise ValidationError(f"counts must be distinct integers >= 1, got {counts}.")
    cache = [None, None]  # (y, heights): the last state seen (kept alive so that `is` is safe)

    def heights(y):
        if cache[0] is not y:
            cache[0], cache[1] = y, merge_heights(y)
        return cache[1]

    def make(c):
        def g(t, y):
            if c >= y.shape[-2]:
                raise ValidationError(f"cluster_merge(clusters={c}) needs more than {c} tokens, got l = {y.shape[-2]}.")
            return heights(y)[..., c - 1] - tol
        return Event(g, direction=-1, terminal=bool(terminal_at == c), name=f"merge_to_{c}",
                     spec=("merge", tol, c))

    return [make(c) for c in counts]


def leave_hemisphere(v, *, terminal=False, name=None) -> Event:
    """Event: a token leaves the open hemisphere {x : <v, x> > 0} (``g = min_i <v, y_i>/|y_i|``, down).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Theorem 4.2
    (tokens in a common hemisphere).
    """
    v = _direction(v)
    consts = {}

    def g(t, y):
        xp = namespace(y)
        key = (str(getattr(y, "device", "cpu")), str(y.dtype))
        vv = consts.get(key)
        if vv is None:
            if y.shape[-1] != v.shape[0]:
                raise ValidationError(f"v must have shape ({y.shape[-1]},) to match the tokens, got {v.shape}.")
            vv = consts[key] = v if type(y) is np.ndarray else xp.asarray(v, dtype=y.dtype, device=y.device)
        return xp.min((y @ vv) / _norms(y), axis=-1)

    return Event(g, direction=-1, terminal=terminal, name=name or "leave_hemisphere",
                 spec=("leave_hemisphere", *map(float, v)))


def _lp_margin(U):
    """max s subject to <v, u_i> >= s, -1 <= v <= 1 (scipy linprog), for one configuration."""
    from scipy.optimize import linprog

    l, d = U.shape
    c = np.zeros(d + 1)
    c[-1] = -1.0  # maximize s
    A = np.hstack([-U, np.ones((l, 1))])  # s - <v, u_i> <= 0
    res = linprog(c, A_ub=A, b_ub=np.zeros(l), bounds=[(-1.0, 1.0)] * d + [(None, None)], method="highs")
    if not res.success:  # pragma: no cover - always feasible and bounded
        raise ValidationError(f"hemisphere margin LP failed: {res.message}")
    return -res.fun


def leave_common_hemisphere(*, terminal=False, name=None) -> Event:
    """Event: the tokens stop lying in a common open hemisphere (margin down through 0).

    ``g`` = ``max_{|v|_inf <= 1} min_i <v, y_i/|y_i|>``, one linear program per trajectory and call
    (SciPy HiGHS, host): > 0 iff some open hemisphere contains every token. Costly: use for
    small batches, or as a check (under the hemisphere theorem it never fires).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, Remark 3.4,
    Theorem 4.2.
    """
    def g(t, y):
        Y = to_numpy(y) if is_torch(y) else np.asarray(y)
        U = Y / np.linalg.norm(Y, axis=-1, keepdims=True)
        flat = U.reshape((-1,) + U.shape[-2:])
        return np.array([_lp_margin(u) for u in flat]).reshape(U.shape[:-2])

    return Event(g, direction=-1, terminal=terminal, name=name or "leave_common_hemisphere")


def level(fn, value: float, *, direction=0, terminal=False, name=None) -> Event:
    """Event: ``fn(y)`` (shape (m, l, d) -> (m,)) crosses ``value``; ``g = fn(y) - value``."""
    if not callable(fn):
        raise InputTypeError(f"fn must be callable as fn(y), got {type(fn).__name__}.")
    value = check_real(value, "value")

    def g(t, y):
        return fn(y) - value

    return Event(g, direction=direction, terminal=terminal,
                 name=name or f"{getattr(fn, '__name__', 'level')}_level")


def energy_level(beta: float, value: float, *, direction=1, terminal=False, name=None,
                 rescaled: bool = False, log: bool = False) -> Event:
    """Event: GLPR's energy E_beta(y) = 1/(2 beta l^2) sum_{i,j} e^{beta <y_i, y_j>} crosses ``value``.

    Default direction up: E_beta is non-decreasing along (SA) and (USA) (they are its gradient
    ascent in suitable metrics). Computed on the host (:func:`riemattn.analysis.gradients.energy`).
    ``rescaled=True`` compares e^{-beta} E_beta with ``value`` and ``log=True`` log E_beta (or
    log e^{-beta} E_beta): finite at every beta (the same options as ``energy``).

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    eq. (3.5), section 3.4.
    """
    beta = check_nonnegative(beta, "beta")
    energy(np.eye(2)[None], beta, rescaled=rescaled, log=log)  # the options checked now, not at the first step

    def e(y):
        return energy(to_numpy(y) if is_torch(y) else y, beta, rescaled=rescaled, log=log)

    return level(e, value, direction=direction, terminal=terminal, name=name or "energy_level")


def lyapunov_level(v, value: float, *, direction=-1, terminal=False, name=None) -> Event:
    """Event: the hemisphere Lyapunov function V(y) = max_i (1 - <v, y_i>) crosses ``value``
    (default direction down: V is non-increasing under the hemisphere theorem's assumptions).

    References
    ----------
    Rodriguez Abella, Silvestre, Tabuada, "Consensus is all you get", ICML 2025, eq. (7).
    """
    v = _direction(v)

    def V(y):
        return hemisphere_lyapunov(y, v)

    ev_value = check_real(value, "value")
    ev = level(V, value, direction=direction, terminal=terminal, name=name or "lyapunov_level")
    return dataclasses.replace(ev, spec=("lyapunov_level", float(ev_value), *map(float, v)))
