"""Proxy figures of the CUDA engine's kernels without a GPU: registers, stack, spills, SASS of the step loop.

For each kernel the engine generates (the generic kernels, those specialised to the hemisphere
ensemble's shape -- 10 tokens on S^2, 2 heads -- with the state in global columns, those
generated per method and field configuration, ``riemattn.solvers.compiled.cuda._gen``, the lanes
form for small batches, a lane per token, ``riemattn.solvers.compiled.cuda._warp``: ``gen-lanes-*``,
and the rodas4 kernel, ``riemattn.solvers.compiled.cuda._ros``, on USA at beta = 9 with the same 10
tokens on S^2: ``gen-rodas4-f64``, and the auto kernel on the same: ``gen-auto-f64``), compiled to
PTX for sm_90 (H100) by numba-cuda
without a device (``riemattn.solvers.compiled.cuda._ptx.kernels_ptx``), assembled by ``ptxas -v``
(registers, stack frame, spill bytes) and disassembled by ``nvdisasm``: the SASS instructions of
the kernel and of its step loop (the largest loop of its control-flow graph,
``riemattn.solvers.compiled.cuda._sass``), and the step loop's local (LDL/STL) and global
(LDG/STG) memory instructions and its generic ones (LD/ST: numba-cuda's strided array views, whose
address space the compiler does not know: global columns in the generic kernels) and shared ones
(LDS/STS: the lanes form's tiles and sums), with the global stores outside it (final statistics).

These are static figures, not times: fewer instructions and no local or global traffic in the
loop are what a kernel needs to run at the card's speed (issue 56), but only a GPU measures that
(``benchmarks/gpu_ensemble.py``). Tools: ptxas from ``nvidia-cuda-nvcc-cu12`` (numba-cuda's cu12
extra), nvdisasm from ``nvidia-cuda-nvdisasm`` (the bench extra); or set ``RIEMATTN_PTXAS`` /
``RIEMATTN_NVDISASM``. Without nvdisasm the SASS columns are left empty.

``--accesses``: the dynamic counterpart, global loads and stores per step attempt counted under
numba-cuda's simulator (every index into a kernel argument) for the generated and the older kernels.

Run: ``python benchmarks/gpu_ptx.py [--kernels NAME ...] [--out FIG.json] [--accesses]`` (figures:
docs/performance.md, "GPU ensembles: proxy figures").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPE = (10, 3, 2)  # the hemisphere ensemble: l, d, heads


def _hemisphere_ints():
    """The packed hemisphere field's configuration (the generated kernels are specialised to it)."""
    import riemattn as ra
    from riemattn.experiments._papers import hemisphere_heads
    from riemattn.solvers.compiled._kernel import pack_field

    return pack_field(ra.AttentionField(hemisphere_heads()), (16,) + SHAPE[:2]).ints


def _usa_ints():
    """The packed configuration of USA at beta = 9 on the same shape (the stiff ensembles' field)."""
    import riemattn as ra
    from riemattn.solvers.compiled._kernel import pack_field

    return pack_field(ra.usa(9.0, SHAPE[1]), (16,) + SHAPE[:2]).ints


def cases():
    """name -> (description, function returning the kernel's PTX) for every kernel the engine generates."""
    from riemattn.solvers.compiled.cuda import _ptx

    out = {
        "generic-adaptive-f64": ("generic kernel, adaptive (dopri5, dop853), float64",
                                 lambda: _ptx.kernels_ptx(which=("adaptive",))["adaptive"]),
        "generic-fixed-f64": ("generic kernel, fixed step (rk4), float64",
                              lambda: _ptx.kernels_ptx(which=("fixed",))["fixed"]),
    }
    for dt, tag in ((np.float64, "f64"), (np.float32, "f32")):
        out[f"shape-adaptive-{tag}"] = (f"specialised to {SHAPE}, adaptive (dopri5, dop853), {tag}",
                                        lambda dt=dt: _ptx.kernels_ptx(dtype=dt, which=("adaptive",),
                                                                       shape=SHAPE)["adaptive"])
        out[f"shape-fixed-{tag}"] = (f"specialised to {SHAPE}, fixed step (rk4), {tag}",
                                     lambda dt=dt: _ptx.kernels_ptx(dtype=dt, which=("fixed",),
                                                                    shape=SHAPE)["fixed"])
    ints = _hemisphere_ints()
    for method, kind, dt, tag in (("dopri5", "adaptive", np.float64, "f64"), ("dop853", "adaptive", np.float64, "f64"),
                                  ("rk4", "fixed", np.float64, "f64"), ("dopri5", "adaptive", np.float32, "f32")):
        out[f"gen-{method}-{tag}"] = (f"generated for {method} and the hemisphere field ({kind}), {tag}",
                                      lambda m=method, k=kind, dt=dt: _ptx.generated_ptx(m, ints, dtype=dt,
                                                                                         which=(k,))[k])
    usa = _usa_ints()  # USA at beta = 9 (the stiff ensembles): the difference form, autonomous
    out["gen-rodas4-f64"] = (f"generated for rodas4 and USA beta = 9 on {SHAPE[:2]} (adaptive, difference form), f64",
                             lambda: _ptx.generated_ptx("rodas4", usa, which=("adaptive",), diff=True)["adaptive"])
    out["gen-auto-f64"] = (f"generated for auto (dopri5 / rodas4p switch) and USA beta = 9 on {SHAPE[:2]}, f64",
                           lambda: _ptx.generated_ptx("auto", usa, which=("adaptive",), diff=True)["adaptive"])
    out["gen-dopri5-f64-loops"] = ("generated for dopri5, the number of tokens at run time (_gen.UNROLL = False)",
                                   lambda: _ptx.generated_ptx("dopri5", ints, which=("adaptive",),
                                                              unroll=False)["adaptive"])
    for method, kind, dt, tag in (("dopri5", "adaptive", np.float64, "f64"), ("dop853", "adaptive", np.float64, "f64"),
                                  ("rk4", "fixed", np.float64, "f64"), ("dopri5", "adaptive", np.float32, "f32")):
        out[f"gen-lanes-{method}-{tag}"] = (f"lanes form (a lane per token, _warp) for {method} and the hemisphere "
                                            f"field ({kind}), {tag}",
                                            lambda m=method, k=kind, dt=dt: _ptx.generated_ptx(
                                                m, ints, dtype=dt, which=(k,), lanes=True)[k])
    return out


def measure(name, make_ptx, cc=(9, 0)):
    """One kernel's figures (dict)."""
    from riemattn.solvers.compiled.cuda import _ptx

    t0 = time.perf_counter()
    ptx = make_ptx()
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, name + ".cubin")
        row = dict(name=name, ptx_s=round(t1 - t0, 1))
        row.update(_ptx.assemble(ptx, cc, cubin))
        row["ptxas_s"] = round(time.perf_counter() - t1, 1)
        if _ptx.tool("nvdisasm") is not None:
            row.update(_ptx.step_loop(_ptx.sass(cubin)))
    return row


def table(rows):
    """The rows as a markdown table."""
    head = ("| kernel | regs | stack B | spill st/ld B | SASS | step loop | LDL | STL | LDG | STG | LD/ST generic "
            "| LDS/STS | STG outside | ptxas s |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        g = lambda k: str(r.get(k, ""))  # noqa: E731
        lines.append(f"| {r['name']} | {g('registers')} | {g('stack')} | {g('spill_stores')}/{g('spill_loads')} | "
                     f"{g('instructions')} | {g('loop')} | {g('LDL')} | {g('STL')} | {g('LDG')} | {g('STG')} | "
                     f"{g('LD')}/{g('ST')} | {g('LDS')}/{g('STS')} | {g('STG_outside')} | {g('ptxas_s')} |")
    return "\n".join(lines)


ACCESSES = r"""
import json, numpy as np, riemattn as ra
from numba.cuda.simulator.cudadrv import devicearray as da
from riemattn.experiments._papers import hemisphere_heads
from riemattn.solvers.compiled.cuda import _gen

count = {"load": 0, "store": 0}
get, put = da.FakeWithinKernelCUDAArray.__getitem__, da.FakeWithinKernelCUDAArray.__setitem__

def load(self, idx):
    out = get(self, idx)
    if not isinstance(out, da.FakeWithinKernelCUDAArray):
        count["load"] += 1
    return out

def store(self, idx, val):
    count["store"] += 1
    put(self, idx, val)

da.FakeWithinKernelCUDAArray.__getitem__, da.FakeWithinKernelCUDAArray.__setitem__ = load, store
rng = np.random.default_rng(0)
y0 = rng.uniform(-0.5, 0.5, (2, 10, 3))
y0 /= np.linalg.norm(y0, axis=-1, keepdims=True)
for label, limit in (("generated", _gen.MAX_LOCAL), ("older (shape)", 0)):
    _gen.MAX_LOCAL = limit
    for method in ("dopri5", "dop853"):
        count.update(load=0, store=0)
        sol = ra.integrate(ra.AttentionField(hemisphere_heads()), y0, (0.0, 1.0), method, rtol=1e-8, atol=1e-8,
                           saveat=[1.0], engine="cuda")
        tries = int(np.sum(sol.per_trajectory.n_steps + sol.per_trajectory.n_rejected))
        print(json.dumps(dict(kernel=label, method=method, attempts=tries, loads=round(count["load"] / tries, 1),
                              stores=round(count["store"] / tries, 1))), flush=True)
"""


def accesses():
    """Global loads and stores per step attempt, counted under numba-cuda's simulator (every index into
    a kernel argument: the state's columns, the field's data, the save times and slots, the statistics;
    local and constant arrays are not kernel arguments), for the generated and the older kernels."""
    import subprocess

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", ACCESSES], env=env, capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", nargs="*", help="names to measure (default: all); --list shows them")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", help="write the rows as JSON")
    ap.add_argument("--accesses", action="store_true",
                    help="only the global loads/stores per step attempt under the simulator (B = 2, T = 1)")
    args = ap.parse_args(argv)
    from riemattn.solvers.compiled.cuda import _ptx

    if args.accesses:
        for row in accesses():
            print(json.dumps(row))
        return 0
    all_cases = cases()
    if args.list:
        for k, (desc, _) in all_cases.items():
            print(f"{k}: {desc}")
        return 0
    if _ptx.tool("ptxas") is None:
        print("ptxas not found: pip install nvidia-cuda-nvcc-cu12 (or set RIEMATTN_PTXAS)")
        return 1
    if _ptx.tool("nvdisasm") is None:
        print("nvdisasm not found (pip install nvidia-cuda-nvdisasm, or set RIEMATTN_NVDISASM): SASS columns empty")
    rows = []
    for name in args.kernels or list(all_cases):
        desc, make = all_cases[name]
        rows.append(measure(name, make))
        print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
