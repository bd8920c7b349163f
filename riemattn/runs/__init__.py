"""Runs: simulations from configuration files, parameter sweeps, and what they write.

:mod:`riemattn.runs.simulate` (a model from TOML), :mod:`riemattn.runs.sweep` (a grid on Dask
with a resumable Zarr store) and :mod:`riemattn.runs.sweep_config`, the CF attributes and paths
of the files they write, and the figure style (:mod:`riemattn.runs.plotting`) shared with the
reproductions and the looped transformers.

May import: :mod:`riemattn.analysis` and every room below it, and the shared infrastructure.
"""
