"""GPU ensembles: the hemisphere ensemble on one GPU, riemattn's CUDA engine against the alternatives.

The problem (``benchmarks/bench_backends.py``'s part 2): ARXIV section 7.2, 10 tokens on S^2, two
time-varying heads (``riemattn.experiments._papers.hemisphere_P``; the CUDA engine reads the same
heads as ``hemisphere_heads()``, a TimeVaryingHeads), T = 10, B random initial conditions (the
first 16 are the same at every B). Max error of the final tokens of those 16 against SciPy DOP853
at rtol = atol = 1e-13, computed on the CPU.

Contenders, each in a FRESH subprocess (so each pays its own compilation, reported separately as
``compile_s``: the first call minus a second identical call):

- ``riemattn-cuda-f64`` / ``riemattn-cuda-f32``: ``integrate(..., engine="cuda")``, dop853 and
  dopri5 (one process per dtype; each stepper has its own generated kernel, compiled on its first
  call, so each row's ``compile_s`` is its own);
- ``riemattn-torch-cuda``: ``integrate(..., "dop853")`` on a CUDA tensor (the PyTorch path);
- ``diffrax-dopri5``: diffrax ``Dopri5`` under ``jax.vmap`` on the GPU (jax, diffrax installed);
- ``torchdiffeq-dopri5``: ``torchdiffeq.odeint`` on the whole batch (a shared step; CUDA);
- ``riemattn-cuda-f64-loops`` (only with ``--only``): the CUDA engine's generated kernels with their
  loops over tokens kept (``_gen.UNROLL = False``: fewer instructions and spills, local loads and
  stores in loops; docs/performance.md, proxy figures), to decide which form is faster.
- ``riemattn-cuda-f64-lanes`` / ``riemattn-cuda-f64-threads`` (only with ``--only``): the CUDA engine
  with its form forced at every B (``riemattn.solvers.compiled.cuda._warp.FORM``): a lane per token,
  32 // l trajectories per warp, or a thread per trajectory. ``riemattn-cuda-f64`` chooses by B
  (lanes below ``_warp.LANES_BELOW``); these two measure the crossover that constant should be, printed
  after the table (``crossover``). Run: ``python benchmarks/gpu_ensemble.py --only
  riemattn-cuda-f64-lanes,riemattn-cuda-f64-threads --sizes 16,256,1024,3000,8192,65536``.

Equal measured error: in each process, for each method, the loosest tolerance of a ladder whose
error on the 16 reference trajectories is <= the target (1e-9 in float64, 1e-5 in float32) is found
first (runs at B = 16), then every B is timed at that tolerance (best of ``--repeat``) and its
error measured again. Missing packages are printed and their contenders skipped.

``--budget-seconds`` (default 270): each contender gets a share of the time left (weights
``SHARE``; what one leaves unused goes to the next) as its own deadline, enforced by the parent
(the child is killed at that deadline plus ``GRACE`` s, keeping the rows it printed, and the B it
was running is reported as timed out), so one slow B cannot eat the budget of the others; a
contender running two methods gives the first half of its share (after compiling). A B is
skipped when its predicted time exceeds the time left: ``t_last * max(1, B / max(B_last,
SATURATION))`` (GPU time is flat in B until the card fills, then linear); a contender is started
only with 20 s left. ``--smoke``: T =
0.2, B in (2, 4), 4 references, one repeat; without a GPU the CUDA engine runs under numba-cuda's simulator
(the script's logic, on a CPU). ``--out PATH``: the results as JSON. Exit status 1 when a
riemattn CUDA engine f64 contender that ran (``riemattn-cuda-f64`` by default) produced no result or
missed its error target.

``--stiff``: the stiff ensemble instead (``benchmarks/gpu_stiff.py``: USA at beta = 9, 10 tokens on
S^2 near random poles, T = 1): ``riemattn-cuda-rodas4`` against ``compiled-cpu-rodas4`` (the compiled
engine on every core), and ``riemattn-cuda-auto`` against ``compiled-cpu-auto`` (the switch) at equal measured error (target 1e-7), sizes 16, 10^4, 10^5; the check of
issue 56's target (GPU >= 5x the CPU engine at B = 10^4) where both are measured there. With
``--smoke`` it runs under the simulator without a GPU (T = 0.2, B in (1, 2), 2 references).

Run: ``python benchmarks/gpu_ensemble.py --out gpu.json`` (GPU figures: docs/performance.md,
"GPU ensembles"); ``python benchmarks/gpu_ensemble.py --stiff --out stiff.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_stiff  # noqa: E402 -- the stiff ensemble (--stiff), next to this script

#: --stiff: the stiff ensemble (gpu_stiff) instead of the hemisphere one
STIFF = False
N_REF = 16
TARGET = {"float64": 1e-9, "float32": 1e-5}
LADDER = {"float64": (1e-8, 1e-9, 1e-10, 1e-11, 1e-12), "float32": (1e-4, 1e-5, 1e-6, 1e-7)}
CONTENDERS = ("riemattn-cuda-f64", "diffrax-dopri5", "riemattn-cuda-f32", "riemattn-torch-cuda", "torchdiffeq-dopri5")
#: run only when named in --only: the generated kernels with their loops over tokens kept (_gen.UNROLL = False)
#: and the two forms forced at every B (_warp.FORM: a lane per token, a thread per trajectory)
EXTRA = ("riemattn-cuda-f64-loops", "riemattn-cuda-f64-lanes", "riemattn-cuda-f64-threads")
#: relative shares of the time budget (the CUDA engine's f64 process times two methods)
SHARE = {"riemattn-cuda-f64": 2.0, "riemattn-cuda-f32": 1.5, "riemattn-torch-cuda": 1.0, "diffrax-dopri5": 1.0,
         "torchdiffeq-dopri5": 1.0, "riemattn-cuda-f64-lanes": 2.0, "riemattn-cuda-f64-threads": 2.0}
#: trajectories below which a GPU's time hardly grows with B (for the skip prediction)
SATURATION = 10_000
#: seconds a child may run past its deadline before the parent kills it
GRACE = 10.0


def initial(B, seed=0):
    if STIFF:
        return gpu_stiff.initial(B, seed)
    rng = np.random.default_rng(seed)
    y = rng.uniform(-0.5, 0.5, (B, 10, 3))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def references(T, n=N_REF):
    if STIFF:
        return gpu_stiff.references(T, n)
    from scipy.integrate import solve_ivp

    import riemattn as ra
    from riemattn.experiments._papers import hemisphere_P

    field = ra.AttentionField(hemisphere_P)
    y0 = initial(n)
    out = np.empty_like(y0)
    for b in range(n):
        sol = solve_ivp(lambda t, x: field(t, x.reshape(10, 3)).ravel(), (0, T), y0[b].ravel(),
                        method="DOP853", rtol=1e-13, atol=1e-13)
        out[b] = sol.y[:, -1].reshape(10, 3)
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def has(module):
    return importlib.util.find_spec(module) is not None


def environment():
    """(packages present/missing, GPU name) -- never raises."""
    pk = {m: has(m) for m in ("numpy", "scipy", "numba", "torch", "jax", "diffrax", "torchdiffeq")}
    pk["numba_cuda"] = has("numba_cuda")
    gpu = None
    if pk["torch"]:
        try:
            import torch

            pk["torch.cuda"] = bool(torch.cuda.is_available())
            if pk["torch.cuda"]:
                gpu = torch.cuda.get_device_name(0)
        except Exception as exc:  # noqa: BLE001
            pk["torch.cuda"] = f"error: {exc}"
    if gpu is None:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=20)
            gpu = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
        except Exception:  # noqa: BLE001
            gpu = None
    return pk, gpu


# ---------------------------------------------------------------------------------------------- child
def _emit(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def child(args):
    T, ref = args.T, np.load(args.ref)
    name = args.contender
    deadline = args.deadline
    sizes = [int(s) for s in args.sizes.split(",")]
    if name in gpu_stiff.CONTENDERS:  # --stiff: rodas4 and auto on the GPU and on the CPU engine
        engine, stepper = ("cuda" if name.startswith("riemattn-cuda") else "compiled"), gpu_stiff.method(name)
        return _sweep(name, stepper, "float64", gpu_stiff.runner(engine, T, len(ref), stepper), ref, sizes, deadline,
                      args.repeat)
    if name.startswith("riemattn-cuda"):
        dtype = "float32" if "f32" in name else "float64"
        if name.endswith("-loops"):
            from riemattn.solvers.compiled.cuda import _gen

            _gen.UNROLL = False
        if name.endswith(("-lanes", "-threads")):  # the form forced at every B
            from riemattn.solvers.compiled.cuda import _warp

            _warp.FORM = name.rsplit("-", 1)[1]
        for share, method in ((0.5, "dop853"), (1.0, "dopri5")):
            _sweep(name, method, dtype, _cuda_runner(method, dtype, T), ref, sizes, deadline, args.repeat, share)
        if deadline - time.time() < 30:
            return _emit(contender=name, note="tensor input check skipped: budget")
        return _tensor_check(name, dtype, T)
    if name == "riemattn-torch-cuda":
        return _sweep(name, "dop853", "float64", _torch_runner(T), ref, sizes, deadline, args.repeat)
    if name == "diffrax-dopri5":
        return _sweep(name, "dopri5", "float64", _diffrax_runner(T), ref, sizes, deadline, args.repeat)
    if name == "torchdiffeq-dopri5":
        return _sweep(name, "dopri5", "float64", _torchdiffeq_runner(T), ref, sizes, deadline, args.repeat)
    raise SystemExit(f"unknown contender {name!r}")


def predict(last, B):
    """Predicted seconds at B from the last timed (B_last, seconds): flat below SATURATION, then linear."""
    return last[1] * max(1.0, B / max(last[0], SATURATION))


def _sweep(name, method, dtype, run, ref, sizes, deadline, repeat, share=1.0):
    """Compile, choose the tolerance on the 16 references, time every B that fits the budget
    (``share`` of the time left after compiling, up to ``deadline``)."""
    y16 = initial(len(ref))
    ladder, target = (gpu_stiff.LADDER, gpu_stiff.TARGET) if STIFF else (LADDER[dtype], TARGET[dtype])
    t_a = time.perf_counter()
    run(y16, ladder[0])
    first = time.perf_counter() - t_a
    t_b = time.perf_counter()
    run(y16, ladder[0])
    compile_s = max(first - (time.perf_counter() - t_b), 0.0)
    deadline = time.time() + share * max(deadline - time.time(), 0.0)
    tol = None
    for tol_try in ladder:
        _, y, ok = run(y16, tol_try)
        err = float(np.abs(y - ref).max())
        if ok and err <= target:
            tol = tol_try
            break
    if tol is None:
        _emit(contender=name, method=method, dtype=dtype, B=None, error=err, note=f"no tolerance down to "
              f"{ladder[-1]:g} reaches {target:g}", compile_s=compile_s)
        return
    last = None
    for B in sizes:
        left = deadline - time.time()
        if last is not None and predict(last, B) > left - 5:
            _emit(contender=name, method=method, dtype=dtype, B=B, note=f"skipped: predicted "
                  f"{predict(last, B):.1f} s > {left:.0f} s left of its budget less a 5 s margin", compile_s=compile_s)
            break
        print("START " + json.dumps(dict(contender=name, method=method, dtype=dtype, B=B, tol=tol)), flush=True)
        y0 = initial(B)
        try:
            best = np.inf
            for _ in range(repeat):
                sec, y, ok = run(y0, tol)
                best = min(best, sec)
                if deadline - time.time() < 10:
                    break
        except Exception as exc:  # noqa: BLE001 -- out of memory and the like: a row saying so
            _emit(contender=name, method=method, dtype=dtype, B=B, tol=tol, note=f"failed: {type(exc).__name__}: "
                  f"{str(exc)[:300]}", compile_s=compile_s)
            break
        k = min(B, len(ref))
        err = float(np.abs(np.asarray(y[:k], dtype=float) - ref[:k]).max())
        _emit(contender=name, method=method, dtype=dtype, B=B, tol=tol, seconds=best, error=err, success=bool(ok),
              meets_target=bool(ok and err <= target), compile_s=compile_s)
        last = (B, best)


def _tensor_check(name, dtype, T):
    """A CUDA tensor in gives a tensor on its device, equal to the NumPy-input run (same kernel)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return
        import riemattn as ra
        from riemattn.experiments._papers import hemisphere_heads

        field = ra.AttentionField(hemisphere_heads())
        y0 = initial(64)
        tdt = torch.float32 if dtype == "float32" else torch.float64
        a = ra.integrate(field, torch.as_tensor(y0, device="cuda", dtype=tdt), (0.0, T), "dopri5", rtol=1e-6,
                         atol=1e-6, saveat=[T], engine="cuda", project=dtype == "float32")
        b = ra.integrate(field, y0.astype(np.float32 if dtype == "float32" else float), (0.0, T), "dopri5",
                         rtol=1e-6, atol=1e-6, saveat=[T], engine="cuda", project=dtype == "float32")
        diff = float(np.abs(a.y.cpu().numpy() - b.y).max())
        _emit(contender=name, method="dopri5", dtype=dtype, B=64, note=f"tensor input: result on {a.y.device}, "
              f"max |tensor - NumPy input| = {diff:.1e}")
    except ModuleNotFoundError as exc:  # e.g. array_api_compat, which riemattn's torch path imports
        _emit(contender=name, note=f"tensor input check not run: the package {exc.name!r} is missing here "
              f"(riemattn's torch path needs it; pip install {str(exc.name).replace('_', '-')})")
    except Exception as exc:  # noqa: BLE001
        _emit(contender=name, note=f"tensor input failed: {type(exc).__name__}: {str(exc)[:300]}")


def _cuda_runner(method, dtype, T):
    import riemattn as ra
    from riemattn.experiments._papers import hemisphere_heads

    field = ra.AttentionField(hemisphere_heads())
    npdt = np.float32 if dtype == "float32" else np.float64

    def run(y0, tol):
        y = y0.astype(npdt)
        t0 = time.perf_counter()
        sol = ra.integrate(field, y, (0.0, T), method, rtol=tol, atol=tol, saveat=[T], engine="cuda",
                           project=dtype == "float32")
        dt = time.perf_counter() - t0
        return dt, np.asarray(sol.y[-1][:N_REF], dtype=float), sol.success
    return run


def _torch_runner(T):
    import torch

    import riemattn as ra
    from riemattn.experiments._papers import hemisphere_P

    field = ra.AttentionField(hemisphere_P, time_vectorized=True)

    def run(y0, tol):
        y = torch.as_tensor(y0, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        sol = ra.integrate(field, y, (0.0, T), "dop853", rtol=tol, atol=tol, saveat=[T])
        torch.cuda.synchronize()
        return time.perf_counter() - t0, sol.y[-1][:N_REF].cpu().numpy(), sol.success
    return run


def _torchdiffeq_runner(T):
    import torch
    from torchdiffeq import odeint

    import riemattn as ra
    from riemattn.experiments._papers import hemisphere_P

    plain = ra.AttentionField(hemisphere_P)._unchecked()  # one shared time per call

    def run(y0, tol):
        y = torch.as_tensor(y0, device="cuda")
        ts = torch.tensor([0.0, T], dtype=torch.float64, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = odeint(lambda t, x: plain(float(t), x), y, ts, method="dopri5", rtol=tol, atol=tol)[-1]
        out = out / out.norm(dim=-1, keepdim=True)
        torch.cuda.synchronize()
        return time.perf_counter() - t0, out[:N_REF].cpu().numpy(), True
    return run


def _diffrax_runner(T):
    import diffrax
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from riemattn.experiments._papers import _HEMI_FREQS, _HEMI_P, _HEMI_SINE

    freqs, Pp, sine = jnp.asarray(_HEMI_FREQS), jnp.asarray(_HEMI_P), jnp.asarray(_HEMI_SINE)

    def vf(t, y, args):
        D = 2.0 * jnp.where(sine, jnp.sin(t * freqs), jnp.cos(t * freqs))
        S = jnp.einsum("id,hde,je->hij", y, D[:, :, None] * Pp, y)
        f = jnp.einsum("hij,jd->id", jax.nn.softmax(S, axis=-1) / jnp.sqrt(3.0), y)
        return f - jnp.sum(f * y, -1, keepdims=True) * y

    cache = {}

    def run(y0, tol):
        if tol not in cache:
            def solve(y):
                return diffrax.diffeqsolve(diffrax.ODETerm(vf), diffrax.Dopri5(), 0.0, T, None, y,
                                           stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                                           max_steps=100_000, saveat=diffrax.SaveAt(t1=True)).ys[-1]
            cache[tol] = jax.jit(jax.vmap(solve))
        y = jnp.asarray(y0)
        cache[tol](y).block_until_ready()  # compile for this shape (excluded, as for every contender)
        t0 = time.perf_counter()
        out = np.asarray(cache[tol](y).block_until_ready())
        dt = time.perf_counter() - t0
        return dt, (out / np.linalg.norm(out, axis=-1, keepdims=True))[:N_REF], True
    return run


# ---------------------------------------------------------------------------------------------- parent
def plan(pk, gpu, smoke):
    """[(contender, runnable, why not)] for this machine."""
    cuda_ok = pk["numba_cuda"] and (gpu is not None or smoke)
    why_cuda = None if cuda_ok else ("numba-cuda missing (pip install 'riemattn[cuda]')" if not pk["numba_cuda"]
                                     else "no GPU (numba-cuda's simulator only with --smoke)")
    torch_gpu = pk.get("torch.cuda") is True
    rows = []
    if STIFF:
        return [(n, cuda_ok, why_cuda) if n.startswith("riemattn-cuda") else (n, True, None)
                for n in gpu_stiff.CONTENDERS]
    for name in CONTENDERS + EXTRA:
        if name.startswith("riemattn-cuda"):
            rows.append((name, cuda_ok, why_cuda))
        elif name == "riemattn-torch-cuda":
            rows.append((name, torch_gpu, None if torch_gpu else "torch with CUDA missing"))
        elif name == "torchdiffeq-dopri5":
            ok = torch_gpu and pk["torchdiffeq"]
            rows.append((name, ok, None if ok else "torchdiffeq or torch with CUDA missing"))
        else:
            ok = pk["jax"] and pk["diffrax"] and gpu is not None
            rows.append((name, ok, None if ok else "jax/diffrax missing or no GPU"))
    return rows


def table(results):
    lines = ["| contender | method | dtype | B | tol | time (s) | compile (s) | max error | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        sec = f"{r['seconds']:.4g}" if "seconds" in r else "–"
        err = f"{r['error']:.2e}" if r.get("error") is not None else "–"
        tol = f"{r['tol']:g}" if r.get("tol") else "–"
        comp = f"{r['compile_s']:.1f}" if r.get("compile_s") is not None else "–"
        lines.append(f"| {r['contender']} | {r.get('method', '–')} | {r.get('dtype', '–')} | {r.get('B', '–')} | "
                     f"{tol} | {sec} | {comp} | {err} | {r.get('note', '')} |")
    return "\n".join(lines)


def crossover(results):
    """Lines comparing the two forced forms (``-lanes`` / ``-threads``) per method and B: the time ratio
    and the smallest B at which a thread per trajectory is at least as fast (the crossover that
    ``_warp.LANES_BELOW`` should be); [] when they were not both run."""
    times = {}
    for r in results:
        if r["contender"] in ("riemattn-cuda-f64-lanes", "riemattn-cuda-f64-threads") and "seconds" in r:
            times.setdefault((r["method"], r["B"]), {})[r["contender"].rsplit("-", 1)[1]] = r["seconds"]
    lines = []
    for method in sorted({m for m, _ in times}):
        pairs = sorted((B, t) for (m, B), t in times.items() if m == method and len(t) == 2)
        if not pairs:
            continue
        ratios = ", ".join(f"B = {B}: {t['threads'] / t['lanes']:.2f}" for B, t in pairs)
        cross = next((B for B, t in pairs if t["threads"] <= t["lanes"]), None)
        lines.append(f"{method}: threads / lanes time {ratios}; " + (
            f"a thread per trajectory at least as fast from B = {cross}" if cross is not None
            else "lanes faster at every B measured"))
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--budget-seconds", type=float, default=270.0)
    p.add_argument("--sizes", default=None, help="default 16,10000,100000,1000000 (--stiff: 16,10000,100000)")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--smoke", action="store_true", help="T = 0.2, B in (2, 4); the simulator without a GPU")
    p.add_argument("--only", default=None, help="comma-separated contenders to run")
    p.add_argument("--stiff", action="store_true", help="the stiff ensemble: rodas4 on USA at beta = 9 (gpu_stiff)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--contender", help=argparse.SUPPRESS)
    p.add_argument("--ref", help=argparse.SUPPRESS)
    p.add_argument("--T", type=float, default=10.0, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    global STIFF
    STIFF = args.stiff
    if args.sizes is None:
        args.sizes = gpu_stiff.SIZES if STIFF else "16,10000,100000,1000000"
    if args.child:
        return child(args)
    start = time.time()
    deadline = start + args.budget_seconds
    # --stiff --smoke: B in (1, 2), 2 references -- numba's simulator runs the Rosenbrock kernel's threads
    # slowly together (rodas4, rtol 1e-5, T = 0.2: B = 2 in 1.7 s, B = 4 in 77 s, measured on 2 cores)
    T, sizes, repeat, n_ref = ((0.2, "1,2" if STIFF else "2,4", 1, 2 if STIFF else 4) if args.smoke
                               else (1.0 if STIFF else 10.0, args.sizes, args.repeat, N_REF))
    pk, gpu = environment()
    print(f"GPU: {gpu or 'none found'}")
    print("packages: " + ", ".join(f"{k} {'yes' if v is True else v if v else 'no'}" for k, v in pk.items()))
    print(f"problem: {'stiff ensemble, USA beta = 9' if STIFF else 'hemisphere ensemble'}, 10 tokens on S^2"
          f"{'' if STIFF else ', 2 time-varying heads'}, T = {T}; sizes {sizes}; "
          f"budget {args.budget_seconds:.0f} s{'; SMOKE' if args.smoke else ''}", flush=True)
    t_ref = time.time()
    ref = references(T, n_ref)
    print(f"references: SciPy DOP853 rtol = atol = 1e-13 on {n_ref} trajectories, {time.time() - t_ref:.1f} s",
          flush=True)
    ref_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gpu_ensemble_ref_{os.getpid()}.npy")
    np.save(ref_path, ref)
    results = []
    only = None if args.only is None else set(args.only.split(","))
    todo = [row for row in plan(pk, gpu, args.smoke)
            if ((row[0] not in EXTRA) if only is None else (row[0] in only))]
    for name, ok, why in todo:
        if not ok:
            print(f"{name}: skipped ({why})", flush=True)
            results.append(dict(contender=name, note=f"skipped: {why}"))
            continue
        left = deadline - time.time()
        weights = [SHARE.get(n, 1.0) for n, o, _ in todo[todo.index((name, ok, why)):] if o]
        mine = min(deadline, time.time() + max(left * SHARE.get(name, 1.0) / sum(weights), 20.0))
        if left < 20:
            print(f"{name}: skipped (budget: {left:.0f} s left)", flush=True)
            results.append(dict(contender=name, note="skipped: budget"))
            continue
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if args.smoke and gpu is None and name.startswith("riemattn-cuda"):
            env["NUMBA_ENABLE_CUDASIM"] = "1"
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--contender", name, "--ref", ref_path,
               "--T", str(T), "--sizes", sizes, "--deadline", str(mine), "--repeat", str(repeat)] + (
            ["--stiff"] if STIFF else [])
        t0 = time.time()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=mine - time.time() + GRACE)
            stdout, rc, err = out.stdout, out.returncode, out.stderr
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            rc, err = "timeout", f"killed at its budget ({mine - t0:.0f} s + {GRACE:.0f} s grace)"
        rows = [json.loads(line[7:]) for line in stdout.splitlines() if line.startswith("RESULT ")]
        started = [json.loads(line[6:]) for line in stdout.splitlines() if line.startswith("START ")]
        if rc == "timeout" and started and not any(
                r.get("B") == started[-1]["B"] and r.get("method") == started[-1]["method"] and "seconds" in r
                for r in rows):
            rows.append(dict(started[-1], note=f"timed out: {err}"))
        for r in rows:
            print(f"  {json.dumps(r)}", flush=True)
        if rc != 0:
            note = f"process ended with {rc}: {err.strip().splitlines()[-1][:300] if err.strip() else ''}"
            print(f"{name}: {note}", flush=True)
            rows.append(dict(contender=name, note=note))
        results.extend(rows)
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)
    os.remove(ref_path)
    print("\n" + table(results))
    cross = None if STIFF else crossover(results)
    if cross:
        sim = " -- simulator times, not a GPU's: the logic only" if args.smoke and gpu is None else ""
        print(f"\ncrossover (riemattn.solvers.compiled.cuda._warp.LANES_BELOW){sim}: " + "; ".join(cross))
    checks = {}
    ran = [n for n, _, _ in todo]  # the CUDA engine's contenders run (riemattn-cuda-f64 by default)
    keys = [n for n in gpu_stiff.CONTENDERS if n.startswith("riemattn-cuda") and n in ran] if STIFF else [
        n for n in ("riemattn-cuda-f64", "riemattn-cuda-f64-lanes", "riemattn-cuda-f64-threads") if n in ran] or [
        "riemattn-cuda-f64"]
    for key in keys:
        cuda_rows = [r for r in results if r["contender"] == key and "seconds" in r]
        checks[f"{key} produced results"] = bool(cuda_rows)
        checks[f"{key} meets its error target at every B"] = bool(cuda_rows) and all(
            r["meets_target"] for r in cuda_rows)
    ratio = gpu_stiff.speedup(results) if STIFF else None
    if ratio is not None:  # issue 56's target, where both engines were measured at B = 10^4
        print(f"\ncompiled-cpu-rodas4 / riemattn-cuda-rodas4 at B = {gpu_stiff.SPEEDUP_B}: {ratio:.2f}x")
        checks[f"rodas4 on the GPU >= {gpu_stiff.SPEEDUP:g}x the CPU engine at B = {gpu_stiff.SPEEDUP_B}"] = bool(
            ratio >= gpu_stiff.SPEEDUP)
    print("\nchecks: " + "; ".join(f"{k}: {'PASS' if v else 'FAIL'}" for k, v in checks.items()))
    print(f"total {time.time() - start:.1f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(dict(gpu=gpu, packages=pk, T=T, smoke=args.smoke, stiff=STIFF, results=results,
                           checks=checks, crossover=cross), fh, indent=1)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
