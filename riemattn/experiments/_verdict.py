"""Claims and verdicts of the reproductions: three statuses per claim, three verdicts per figure.

A reproduction's ``claims(ds)`` returns ``{name: claim}``. Every claim ends up with

- ``status``: :data:`REPRODUCED` (the data show what the paper claims), :data:`NOT_REPRODUCED`
  (the claim was checked on the data and does not hold), or :data:`NOT_CHECKED` ("not checked at this
  size": the run's size or setup cannot test it, e.g. an asymptotic claim about GPT-2 XL under
  ``--quick``, or trained weights that are not on this machine; ``reason`` says which);
- ``kind``: ``"paper"`` (a statement of the paper, decided by data from a configuration that does
  not force it; it decides the verdict, and the reproduction declares a *deviation* of the model
  or the data under which it reports "not reproduced": :mod:`riemattn.experiments._deviations`),
  ``"identity"`` (an algebraic consequence of the update or of the construction: an
  implementation check, reported with a status, never counted for the verdict), ``"stand-in"`` (a
  weaker claim checked in place of a paper claim that cannot be checked at this size;
  ``stands_in_for`` names that claim; reported, never counted for it) or ``"observation"`` (a
  number reported with no claim attached);
- ``value`` and ``description``.

Modules may still return the older form ``{"passed": bool | None, ...}``: ``True``/``False`` is a
paper claim reproduced / not reproduced, ``None`` an observation (:func:`normalize`).

Verdict of a figure (:func:`verdict`), from its paper claims only:

- ``PASS``: there is at least one paper claim and every one is reproduced;
- ``FAIL``: the run raised an error, or paper claims were checked and none of them was
  reproduced (everything that could be checked disagrees with the paper);
- ``PARTIAL``: anything else: some paper claims reproduced and others not reproduced or not
  checked at this size, or none checkable at this size. The CLI line names the claims.

``riemattn reproduce`` exits with status 1 when a figure's verdict is FAIL and 0 otherwise
(PARTIAL is a result, not an error).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "REPRODUCED", "NOT_REPRODUCED", "NOT_CHECKED", "STATUSES", "KINDS", "VERDICTS", "claim", "normalize",
    "verdict", "summarize_verdict",
]

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NOT_CHECKED = "not checked at this size"
STATUSES = (REPRODUCED, NOT_REPRODUCED, NOT_CHECKED)
KINDS = ("paper", "identity", "stand-in", "observation")
VERDICTS = ("PASS", "PARTIAL", "FAIL")


def claim(status, value, description: str, *, kind: str = "paper", reason: str | None = None,
          stands_in_for: str | None = None, observed=None) -> dict:
    """One claim in the normalized form.

    Parameters
    ----------
    status : bool or str
        ``True`` / ``False`` (checked: reproduced / not reproduced) or one of :data:`STATUSES`.
        Ignored (set to None) for ``kind="observation"``.
    value : JSON-serializable
        The numbers the status was decided on.
    description : str
        What is claimed and how it is checked.
    kind : {"paper", "identity", "stand-in", "observation"}
        See the module docstring; only ``"paper"`` claims count for the verdict.
    reason : str, optional
        Why a claim is not checked at this size (required then).
    stands_in_for : str, optional
        For a stand-in, the name of the paper claim it stands in for (required then).
    observed : optional
        For an observation: what was observed (free form).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    if kind == "observation":
        status = None
    elif isinstance(status, (bool, np.bool_)):
        status = REPRODUCED if bool(status) else NOT_REPRODUCED
    elif status not in STATUSES:
        raise ValueError(f"status must be a bool or one of {STATUSES}, got {status!r}.")
    if status == NOT_CHECKED and not reason:
        raise ValueError("a claim not checked at this size needs a reason.")
    if kind == "stand-in" and not stands_in_for:
        raise ValueError("a stand-in claim must name the paper claim it stands in for (stands_in_for).")
    out = {"status": status, "kind": kind, "value": value, "description": description,
           "passed": None if status in (None, NOT_CHECKED) else status == REPRODUCED}
    if reason:
        out["reason"] = reason
    if stands_in_for:
        out["stands_in_for"] = stands_in_for
    if observed is not None:
        out["observed"] = observed
    return out


def normalize(claims: dict) -> dict:
    """Every claim of ``claims`` with ``status``, ``kind`` and ``passed`` (legacy ``passed`` understood).

    ``passed`` is kept for old readers: True (reproduced), False (not reproduced), None (not checked
    or an observation).
    """
    out = {}
    for name, c in claims.items():
        c = dict(c)
        if "status" not in c or "kind" not in c:
            passed = c.get("passed")
            kind = c.get("kind", "observation" if passed is None and "status" not in c else "paper")
            status = c.get("status", passed)
            c = {**c, **claim(status, c.get("value"), c.get("description", ""), kind=kind,
                              reason=c.get("reason"), stands_in_for=c.get("stands_in_for"))}
        out[name] = c
    return out


def verdict(claims: dict, error: str | None = None) -> tuple[str, dict]:
    """``(verdict, detail)`` of a figure from its (normalized) claims.

    ``detail`` lists the paper claims by status: ``{"reproduced": [...], "not reproduced": [...],
    "not checked at this size": [...]}``. See the module docstring for the rule.
    """
    detail = {s: [] for s in STATUSES}
    for name, c in normalize(claims).items():
        if c["kind"] == "paper":
            detail[c["status"]].append(name)
    if error is not None:
        return "FAIL", detail
    n_paper = sum(len(v) for v in detail.values())
    if n_paper and len(detail[REPRODUCED]) == n_paper:
        return "PASS", detail
    if detail[NOT_REPRODUCED] and not detail[REPRODUCED]:
        return "FAIL", detail
    return "PARTIAL", detail


def summarize_verdict(v: str, detail: dict, limit: int = 4) -> str:
    """One short phrase for the CLI: ``"2/3 paper claims reproduced; not reproduced: a"`` etc.

    Only paper claims are counted (``detail`` from :func:`verdict`): identities, stand-ins and
    observations never appear in it.
    """
    n = sum(len(x) for x in detail.values())
    if n == 0:
        return "no paper claim"
    parts = [f"{len(detail[REPRODUCED])}/{n} paper claims reproduced"]
    for status in (NOT_REPRODUCED, NOT_CHECKED):
        names = detail[status]
        if names:
            shown = ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
            parts.append(f"{status}: {shown}")
    return "; ".join(parts)
