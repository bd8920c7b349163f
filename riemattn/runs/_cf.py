"""CF attributes of the datasets riemattn writes: ``long_name`` and ``units`` on every variable and
coordinate, and the package version and the command that made the dataset.

One function, :func:`annotate`, called where ``data.nc`` is written (the reproduction runner and
``riemattn simulate``). Each writer passes a table ``{name: (long_name, units)}``; names not in it
are looked up in :data:`COMMON` (what every integration's ``Trajectory.to_xarray`` holds). A
variable or coordinate found in neither raises :class:`UndocumentedVariable`, so a new variable
cannot reach ``data.nc`` without a description.

Units follow the CF conventions (UDUNITS strings); ``"1"`` marks a dimensionless quantity. Every
quantity of these models is dimensionless (model time included: there is no physical clock), so
``"1"`` is the rule; labels (string coordinates such as a model's name) are given ``"1"`` too.
"""

from __future__ import annotations

from .. import __version__

__all__ = ["COMMON", "UndocumentedVariable", "annotate", "undocumented"]

#: variables of :meth:`riemattn.solvers.integrate.Trajectory.to_xarray` (and other names shared by writers)
COMMON = {
    "time": ("time (model units)", "1"),
    "y": ("token positions y_i(t)", "1"),
    "nfev_per_trajectory": ("evaluations of the vector field, per trajectory", "1"),
    "n_steps_per_trajectory": ("accepted steps, per trajectory", "1"),
    "n_rejected_per_trajectory": ("rejected steps (adaptive steppers), per trajectory", "1"),
    "status_per_trajectory": ("integration status per trajectory (0: reached t1, 2: stopped by a terminal event)", "1"),
    "event": ("names of the events of integrate(events=...)", "1"),
    "event_count": ("number of event crossings per trajectory", "1"),
    "event_t": ("times of the event crossings, in order (NaN-padded beyond event_count)", "1"),
    "event_which": ("index into `event` of each crossing (-1 beyond event_count)", "1"),
    "event_t_stop": ("time at which a terminal event stopped the trajectory (NaN: none)", "1"),
    "event_y": ("token positions at the event crossings (NaN-padded)", "1"),
}


class UndocumentedVariable(ValueError):
    """A dataset to be written has a variable or coordinate without ``long_name`` and ``units``."""


def undocumented(ds) -> list[str]:
    """Names of the variables and coordinates of ``ds`` lacking ``long_name`` or ``units``."""
    return [
        str(name) for name, var in ds.variables.items()
        if not (isinstance(var.attrs.get("long_name"), str) and var.attrs["long_name"])
        or not (isinstance(var.attrs.get("units"), str) and var.attrs["units"])
    ]


def annotate(ds, table: dict, *, command: str):
    """A copy of ``ds`` with ``long_name`` and ``units`` on every variable and coordinate, and the
    dataset attributes ``riemattn_version``, ``command`` and CF's ``source``.

    Parameters
    ----------
    ds : xarray.Dataset
    table : dict
        ``{name: (long_name, units)}`` for the writer's own variables (entries for names absent
        from ``ds`` are ignored). A variable that already has both attributes keeps them.
    command : str
        The command that makes this dataset, e.g. ``"riemattn reproduce arxiv-fig1 --quick"``.

    Raises
    ------
    UndocumentedVariable
        If a variable or coordinate is in neither ``table`` nor :data:`COMMON` (all such names are
        listed).
    """
    ds = ds.copy()
    for name, var in ds.variables.items():
        if "long_name" in var.attrs and "units" in var.attrs:
            continue
        entry = table.get(name, COMMON.get(name))
        if entry is None:
            continue
        long_name, units = entry
        var.attrs["long_name"] = long_name
        var.attrs["units"] = units
    missing = undocumented(ds)
    if missing:
        raise UndocumentedVariable(
            f"no long_name/units for {missing}: add them to the writer's table of (long_name, units)."
        )
    ds.attrs["riemattn_version"] = __version__
    ds.attrs["command"] = command
    ds.attrs["source"] = f"riemattn {__version__}: {command}"
    return ds
