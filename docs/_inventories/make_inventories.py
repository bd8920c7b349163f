"""Write the small intersphinx inventories shipped in docs/_inventories/.

The docs build runs offline (see ``intersphinx_mapping`` in docs/conf.py), so instead of the
projects' full ``objects.inv`` it reads these: the external objects riemattn's docs refer to,
each with the address of its page on the project's site. Run after editing ``OBJECTS``::

    .venv/bin/python docs/_inventories/make_inventories.py

An external reference that is not listed fails the nitpicky build: add it here.
"""

from __future__ import annotations

import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# project -> [(name, "domain:role", uri relative to the site in docs/conf.py)]
OBJECTS: dict[str, list[tuple[str, str, str]]] = {
    "python": [
        ("ValueError", "py:exception", "library/exceptions.html#ValueError"),
        ("TypeError", "py:exception", "library/exceptions.html#TypeError"),
        ("RuntimeError", "py:exception", "library/exceptions.html#RuntimeError"),
        ("KeyboardInterrupt", "py:exception", "library/exceptions.html#KeyboardInterrupt"),
        ("Exception", "py:exception", "library/exceptions.html#Exception"),
        ("object", "py:class", "library/functions.html#object"),
        ("dict", "py:class", "library/stdtypes.html#dict"),
        ("tuple", "py:class", "library/stdtypes.html#tuple"),
        ("list", "py:class", "library/stdtypes.html#list"),
        ("functools.partial", "py:function", "library/functools.html#functools.partial"),
    ],
    "numpy": [
        ("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#numpy.ndarray"),
        ("numpy.random.Generator", "py:class",
         "reference/random/generator.html#numpy.random.Generator"),
        ("numpy.random.default_rng", "py:function",
         "reference/random/generator.html#numpy.random.default_rng"),
        ("numpy.linalg.eigh", "py:function", "reference/generated/numpy.linalg.eigh.html"),
    ],
    "scipy": [
        ("scipy.linalg.expm", "py:function",
         "reference/generated/scipy.linalg.expm.html#scipy.linalg.expm"),
        ("scipy.integrate.solve_ivp", "py:function",
         "reference/generated/scipy.integrate.solve_ivp.html#scipy.integrate.solve_ivp"),
        ("scipy.optimize.linprog", "py:function",
         "reference/generated/scipy.optimize.linprog.html#scipy.optimize.linprog"),
        ("scipy.optimize.nnls", "py:function",
         "reference/generated/scipy.optimize.nnls.html#scipy.optimize.nnls"),
        ("scipy.integrate.quad", "py:function",
         "reference/generated/scipy.integrate.quad.html#scipy.integrate.quad"),
        ("scipy.optimize.brentq", "py:function",
         "reference/generated/scipy.optimize.brentq.html#scipy.optimize.brentq"),
    ],
    "geomstats": [
        ("geomstats.geometry.hypersphere.Hypersphere", "py:class",
         "api/geometry.html#geomstats.geometry.hypersphere.Hypersphere"),
        ("geomstats.geometry.base.LevelSet", "py:class",
         "api/geometry.html#geomstats.geometry.base.LevelSet"),
        ("geomstats.geometry.euclidean.Euclidean", "py:class",
         "api/geometry.html#geomstats.geometry.euclidean.Euclidean"),
        ("geomstats.geometry.riemannian_metric.RiemannianMetric", "py:class",
         "api/geometry.html#geomstats.geometry.riemannian_metric.RiemannianMetric"),
    ],
    "xarray": [
        ("xarray.Dataset", "py:class", "generated/xarray.Dataset.html#xarray.Dataset"),
        ("xarray.DataArray", "py:class", "generated/xarray.DataArray.html#xarray.DataArray"),
        ("xarray.open_zarr", "py:function", "generated/xarray.open_zarr.html#xarray.open_zarr"),
    ],
    "torch": [
        ("torch.Tensor", "py:class", "tensors.html#torch.Tensor"),
        ("torch.nn.Module", "py:class", "generated/torch.nn.Module.html#torch.nn.Module"),
        ("torch.device", "py:class", "tensor_attributes.html#torch.device"),
    ],
    "matplotlib": [
        ("matplotlib.figure.Figure", "py:class",
         "api/_as_gen/matplotlib.figure.Figure.html#matplotlib.figure.Figure"),
        ("matplotlib.axes.Axes", "py:class", "api/_as_gen/matplotlib.axes.Axes.html#matplotlib.axes.Axes"),
    ],
    "transformers": [
        ("transformers.GPT2Model", "py:class", "model_doc/gpt2#transformers.GPT2Model"),
        ("transformers.GPTNeoModel", "py:class", "model_doc/gpt_neo#transformers.GPTNeoModel"),
        ("transformers.BertModel", "py:class", "model_doc/bert#transformers.BertModel"),
    ],
    "dask": [
        ("distributed.Client", "py:class", "api.html#distributed.Client"),
        ("distributed.LocalCluster", "py:class", "api.html#distributed.LocalCluster"),
    ],
}


def write(project: str, objects: list[tuple[str, str, str]]) -> Path:
    header = ("# Sphinx inventory version 2\n"
              f"# Project: {project}\n"
              "# Version: \n"
              "# The remainder of this file is compressed using zlib.\n").encode()
    body = "".join(f"{name} {role} 1 {uri} -\n" for name, role, uri in sorted(objects)).encode()
    path = HERE / f"{project}.inv"
    path.write_bytes(header + zlib.compress(body, 9))
    return path


if __name__ == "__main__":
    for project, objects in OBJECTS.items():
        print(write(project, objects))
