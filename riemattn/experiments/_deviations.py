"""Deviations: the changes of a reproduction's model or data under which its paper claims must fail.

A paper claim reproduces something only if it could have come out "not reproduced". Each
reproduction module therefore declares, next to ``claims``, a tuple ``DEVIATIONS`` of
:class:`Deviation` objects: a change to the model (through the configuration: a head's sign, the
mask removed, beta scaled, another normalization, P indefinite, ...) or to the data the claim is
decided on (the time axis reversed, noise added, a reference shifted, ...), and the names of the
paper claims that must report ``"not reproduced"`` under it. The falsification suite
(``tests/suites/test_falsification.py``) walks the registry
(:func:`riemattn.experiments.available`) and checks, for every reproduction:

- every paper claim is named by at least one deviation (a reproduction that declares none fails);
- under each deviation, every claim it names reports ``"not reproduced"``.

Claims of kind ``"identity"`` (algebraic consequences of the update or of the construction) need
no deviation: they are implementation checks and never count for the verdict
(:mod:`riemattn.experiments._verdict`).

A *data* deviation is a function ``ds -> ds`` applied to the test suite's run of the reproduction
(it must not modify its argument: it gets a deep copy); a *model* deviation is a function
``config -> config`` whose result ``run`` simulates again (at the test suite's size, or a smaller
one the function picks). ``unlock`` opens a size gate for the check: ``{attribute: value}`` of the
module set while the deviated claims are decided, for a paper claim that is *not checked at this
size* (e.g. the looped-GPT claims, checked only on GPT-2 XL): the suite then checks that the claim,
decided at the test suite's size, reports "not reproduced" under the deviation.

Claim names may be patterns (``fnmatch``), for reproductions whose claim names carry a model or
a variant (``"*/toward-0"``).
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..errors import InputTypeError, ValidationError

__all__ = ["Deviation", "deviation", "names_claim", "deviated_claims", "claims_at_size", "claims_table", "table_in",
           "read_backwards"]


@dataclass(frozen=True)
class Deviation:
    """A change of a reproduction's model or data that must make the named paper claims fail.

    Attributes
    ----------
    name : str
        Short label (unique within the module), e.g. ``"softmax instead of hardmax"``.
    claims : tuple of str
        The paper claims (names or ``fnmatch`` patterns) that must report "not reproduced".
    description : str
        What is changed and why the claims should then fail.
    data : callable ds -> ds, optional
        A change of the data (the run of the test suite's size, deep-copied).
    config : callable config -> config, optional
        A change of the model through the configuration; ``run`` is called on the result.
    unlock : mapping, optional
        Module attributes set while the deviated claims are decided (a size gate opened).
    """

    name: str
    claims: tuple
    description: str
    data: Callable | None = None
    config: Callable | None = None
    unlock: Mapping = field(default_factory=dict)

    @property
    def acts_on(self) -> str:
        """``"data"`` or ``"model"``."""
        return "data" if self.data is not None else "model"


def deviation(name: str, claims, description: str, *, data: Callable | None = None,
              config: Callable | None = None, unlock: Mapping | None = None) -> Deviation:
    """A validated :class:`Deviation`; exactly one of ``data`` and ``config`` is given.

    ``claims`` is one claim name (or pattern) or a sequence of them.
    """
    if not isinstance(name, str) or not name:
        raise InputTypeError(f"name must be a nonempty string, got {name!r}.")
    if isinstance(claims, str):
        claims = (claims,)
    claims = tuple(claims)
    if not claims or not all(isinstance(c, str) and c for c in claims):
        raise ValidationError(f"claims must be one or more nonempty claim names, got {claims!r}.")
    if not isinstance(description, str) or not description:
        raise InputTypeError(f"description must be a nonempty string, got {description!r}.")
    if (data is None) == (config is None):
        raise ValidationError("give exactly one of data (ds -> ds) and config (config -> config).")
    for arg, value in (("data", data), ("config", config)):
        if value is not None and not callable(value):
            raise InputTypeError(f"{arg} must be callable, got {type(value).__name__}.")
    unlock = dict(unlock or {})
    return Deviation(name, claims, description, data, config, unlock)


def read_backwards(dim: str):
    """A data deviation: the data read backwards along ``dim`` on the same coordinate (time reversed, the
    beta axis permuted, ...): ``ds -> ds.isel({dim: ::-1})`` with ``ds[dim]`` kept."""
    def reverse(ds):
        return ds.isel({dim: slice(None, None, -1)}).assign_coords({dim: ds[dim].values})
    return reverse


def names_claim(dev: Deviation, claim_name: str) -> bool:
    """Whether ``dev`` names ``claim_name`` (exactly or by an ``fnmatch`` pattern)."""
    return any(fnmatch.fnmatchcase(claim_name, pattern) for pattern in dev.claims)


@contextlib.contextmanager
def _unlocked(module, unlock: Mapping):
    old = {k: getattr(module, k) for k in unlock}
    try:
        for k, v in unlock.items():
            setattr(module, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


def deviated_claims(module, dev: Deviation, ds, config: dict) -> dict:
    """The normalized claims of ``module`` on the data of ``dev``: ``dev.data(deep copy of ds)`` or
    ``module.run(dev.config(config))``; decided with ``dev.unlock`` in force."""
    from ._verdict import normalize

    if dev.data is not None:
        data = dev.data(ds.copy(deep=True))
    else:
        data = module.run(dev.config(copy.deepcopy(config)))
    with _unlocked(module, dev.unlock):
        return normalize(module.claims(data))


def claims_at_size(module, ds, unlock: Mapping) -> dict:
    """The normalized claims of ``module`` on ``ds`` with ``unlock`` in force (no deviation)."""
    from ._verdict import normalize

    with _unlocked(module, unlock):
        return normalize(module.claims(ds))


#: the markers around one reproduction's table in docs/figures.md
TABLE_BEGIN = "<!-- claims: {name} -->"
TABLE_END = "<!-- /claims -->"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def claims_table(name: str, claims: dict, deviations) -> str:
    """The markdown table of one reproduction's claims for docs/figures.md, between its markers.

    One row per claim of ``claims`` (normalized, in their order): name, kind, and for a paper claim
    the deviations that must make it fail (for an identity, a stand-in or an observation, its
    description). The falsification suite compares the docs with this text, so the page lists every
    claim, with its kind, of every reproduction as the code decides them (at the test suite's size).
    """
    rows = [TABLE_BEGIN.format(name=name), "", "| claim | kind | deviation that makes it fail, or what it is |",
            "|---|---|---|"]
    for key, c in claims.items():
        if c["kind"] == "paper":
            named = [f"{d.name} ({d.acts_on})" for d in deviations if names_claim(d, key)]
            what = "; ".join(named) or "**none declared**"
        else:
            what = c["description"]
        rows.append(f"| `{_cell(key)}` | {c['kind']} | {_cell(what)} |")
    rows += ["", TABLE_END]
    return "\n".join(rows)


def table_in(text: str, name: str) -> str | None:
    """The table of ``name`` in ``text`` (docs/figures.md), markers included; None if absent."""
    begin = TABLE_BEGIN.format(name=name)
    i = text.find(begin)
    if i < 0:
        return None
    j = text.find(TABLE_END, i)
    return None if j < 0 else text[i:j + len(TABLE_END)]
