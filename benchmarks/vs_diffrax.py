"""riemattn against diffrax (JAX) on the hemisphere problem, at equal measured error.

The problem (ARXIV section 7.2, as in ``benchmarks/work_precision.py``): 10 tokens y_i on the
sphere S^2, two heads, U = I, full attention, horizon T = 10,

    dy_i/dt = F_i = f_i - <y_i, f_i> y_i,   f_i = sum_eta sum_j alpha_ij^eta(t) y_j,
    alpha_ij^eta(t) = exp(y_i^T P_eta(t) y_j) / (sqrt(d) sum_k exp(y_i^T P_eta(t) y_k)),  d = 3,

("paper" normalization, the default of ``riemattn.AttentionField``: rows of alpha^eta sum to
1/sqrt(d); there is no scaling inside the exponential), P_eta(t) = D_eta(t) P'_eta with the
printed P'_1, P'_2 and D_1(t) = 2 diag(cos 10 pi t, sin 10 pi t, cos 6 pi t),
D_2(t) = 2 diag(cos 6 pi t, sin 6 pi t, cos 4 pi t). Initial tokens uniform in [-0.5, 0.5]^3,
projected; B trajectories (B = 100 and B = 1000).

Tools:

* riemattn: ``ra.integrate(AttentionField(hemisphere_P, time_vectorized=True), y0, (0, 10),
  stepper="dopri5" | "dop853", rtol=tol, atol=tol)``, the whole batch in one call, each
  trajectory with its own step size (projected Runge--Kutta: the tokens stay on the sphere).
* diffrax: the same field written in JAX (float64), ``diffrax.diffeqsolve`` with
  ``diffrax.Dopri5()``, ``diffrax.PIDController(rtol=tol, atol=tol)`` (default coefficients),
  ``dt0=None`` (diffrax picks the first step), under ``jax.vmap`` over the batch (so each
  trajectory has its own step size), ``jax.jit``-compiled. The final tokens are renormalised
  onto the sphere (free, and what ``work_precision.py`` does for scipy); the error without it is
  shown too. The script asserts, before timing, that the JAX field equals riemattn's
  ``field(t, y)`` to 1e-12 on random tokens and times.

Method: a common reference y_ref(T) from scipy DOP853 at rtol = atol = 1e-13 on the flattened
batch (computed once, checked against per-trajectory DOP853 solves of 10 trajectories, and saved
to a temporary .npy with y0). Error = max over trajectories, tokens and components of
|y(T) - y_ref(T)|. Every timing runs in a fresh process (``sys.executable vs_diffrax.py --worker
...``), which first runs the solve once untimed (for diffrax this is the jit compilation plus one
run, so compile time is excluded; for riemattn a short warm-up solve over [0, 0.05]) and then
times one solve. Round 1 runs every tool at every tolerance of the grid, interleaving the tools
(riemattn dopri5, diffrax, riemattn dop853, then the next tolerance). For each tool, the two
cheapest runs of round 1 whose error is <= 1e-8 are then timed in rounds 2 and 3 (interleaved
the same way); a tool's time is the best of its 3 timings, and the comparison uses, for each tool,
its cheapest tolerance reaching max error <= 1e-8. The 1-minute load average is printed with
every timing (the development machine has 2 cores and is shared).

Run, in the separate venv that has jax and diffrax (the main venv stays jax-free)::

    python3 -m venv .venv-bench && .venv-bench/bin/pip install -e ".[bench]"
    .venv-bench/bin/python benchmarks/vs_diffrax.py             # B = 100 and 1000, ~10-15 min
    .venv-bench/bin/python benchmarks/vs_diffrax.py --batch 100 --rounds 1   # a quick look

With ``RIEMATTN_BENCH_CPU=N`` in the environment every timed process runs on CPU N only, with
one BLAS thread and one XLA thread (one core for each tool: JAX/XLA would otherwise spread a
vmapped solve over the machine's cores while NumPy's element-wise work runs on one). ``benchmarks/work_precision.py`` runs this script at its end when diffrax is
installed.

Prints the sweep, a table, and ``B=...: riemattn/diffrax time ratio ...`` lines (ratio < 1:
riemattn faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # before jax is imported (no accelerator probing)

import numpy as np  # noqa: E402

T_END = 10.0
TARGET = 1e-8
TOOLS = ("riemattn dopri5", "diffrax Dopri5", "riemattn dop853")  # the interleaving order
DEFAULT_TOLS = (1e-8, 3e-9, 1e-9, 3e-10, 1e-10, 3e-11)


def load():
    return os.getloadavg()[0]


def initial(n_traj, seed):
    """Tokens uniform in the cube [-0.5, 0.5]^3, projected onto S^2: shape (n_traj, 10, 3)."""
    rng = np.random.default_rng(seed)
    y = rng.uniform(-0.5, 0.5, (n_traj, 10, 3))
    return y / np.linalg.norm(y, axis=-1, keepdims=True)


def riemattn_field():
    import riemattn as ra
    from riemattn.experiments._papers import hemisphere_P

    return ra.AttentionField(hemisphere_P, time_vectorized=True)


# --------------------------------------------------------------------------------------------
# The field in JAX
def jax_field():
    """(jax, field) with field(t, y, args) -> F for one trajectory y of shape (10, 3)."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    from riemattn.experiments._papers import P1_FIG23, P2_FIG23

    P1, P2 = jnp.asarray(P1_FIG23), jnp.asarray(P2_FIG23)
    sqrt_d = jnp.sqrt(3.0)
    pi = jnp.pi

    def P(t):
        """P_eta(t) = D_eta(t) P'_eta, shape (2, 3, 3)."""
        d1 = 2.0 * jnp.stack([jnp.cos(10 * pi * t), jnp.sin(10 * pi * t), jnp.cos(6 * pi * t)])
        d2 = 2.0 * jnp.stack([jnp.cos(6 * pi * t), jnp.sin(6 * pi * t), jnp.cos(4 * pi * t)])
        return jnp.stack([d1[:, None] * P1, d2[:, None] * P2])

    def field(t, y, args=None):
        S = jnp.einsum("ia,hab,jb->hij", y, P(t), y)  # S[eta, i, j] = y_i^T P_eta(t) y_j
        E = jnp.exp(S - jnp.max(S, axis=-1, keepdims=True))
        alpha = E / (sqrt_d * jnp.sum(E, axis=-1, keepdims=True))  # "paper" normalization
        f = jnp.einsum("hij,jd->id", alpha, y)  # f_i = sum_eta sum_j alpha_ij^eta y_j
        return f - jnp.sum(y * f, axis=-1, keepdims=True) * y  # tangent part at y_i

    return jax, field


def check_fields(n=16, seed=123):
    """Assert that the JAX field equals riemattn's field(t, y) to 1e-12; return the max difference."""
    jax, field = jax_field()
    ours = riemattn_field()
    rng = np.random.default_rng(seed)
    y = initial(n, seed)
    t = rng.uniform(0.0, T_END, n)
    want = ours(t, y)  # one time per trajectory
    got = np.asarray(jax.vmap(field, in_axes=(0, 0))(t, y))
    diff = float(np.max(np.abs(got - want)))
    # one shared time, and tokens off the sphere (the formula, not just its restriction)
    y2 = 2.0 * rng.standard_normal((n, 10, 3))
    want2 = ours(3.7, y2)
    got2 = np.asarray(jax.vmap(field, in_axes=(None, 0))(3.7, y2))
    diff = max(diff, float(np.max(np.abs(got2 - want2)) / max(1.0, float(np.max(np.abs(want2))))))
    assert diff <= 1e-12, f"the JAX field differs from riemattn's by {diff:.3e}"
    return diff


# --------------------------------------------------------------------------------------------
# Workers (one timed solve per process)
def worker(tool, tol, data, batch):
    pin_cpu()
    y0 = np.load(os.path.join(data, f"y0_{batch}.npy"))
    ref = np.load(os.path.join(data, f"ref_{batch}.npy"))
    out = {"tool": tool, "tol": tol, "batch": batch}
    if tool.startswith("riemattn"):
        import riemattn as ra

        stepper = tool.split()[1]
        field = riemattn_field()
        ra.integrate(field, y0, (0.0, 0.05), stepper=stepper, rtol=tol, atol=tol)  # warm-up
        t0 = time.perf_counter()
        sol = ra.integrate(field, y0, (0.0, T_END), stepper=stepper, rtol=tol, atol=tol,
                           saveat=[T_END], max_steps=10**6)
        out["time"] = time.perf_counter() - t0
        assert sol.success, sol.message
        y = sol.y[-1]
        out["steps"] = int(sol.n_steps)
        out["err_raw"] = float(np.max(np.abs(y - ref)))
    else:
        jax, field = jax_field()
        import diffrax

        def solve(y):
            sol = diffrax.diffeqsolve(
                diffrax.ODETerm(field), diffrax.Dopri5(), 0.0, T_END, None, y,
                stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol),
                saveat=diffrax.SaveAt(t1=True), max_steps=10**6,
            )
            return sol.ys[-1], sol.stats["num_steps"], sol.result == diffrax.RESULTS.successful

        run = jax.jit(jax.vmap(solve))
        y0j = jax.numpy.asarray(y0)
        t0 = time.perf_counter()
        jax.block_until_ready(run(y0j))  # compile, and one run
        out["compile_and_first_run"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        yT, steps, ok = jax.block_until_ready(run(y0j))
        out["time"] = time.perf_counter() - t0
        assert bool(np.all(np.asarray(ok))), "diffrax: a trajectory failed"
        y = np.asarray(yT)
        out["steps"] = int(np.max(np.asarray(steps)))
        out["err_raw"] = float(np.max(np.abs(y - ref)))
        y = y / np.linalg.norm(y, axis=-1, keepdims=True)
    out["err"] = float(np.max(np.abs(y - ref)))
    out["load"] = load()
    print("RESULT " + json.dumps(out), flush=True)


def pin_cpu():
    """Run on the one CPU named by RIEMATTN_BENCH_CPU, if set, with one thread for BLAS and for
    XLA (a pool of threads sharing one CPU would only wait for each other). Call it before numpy's
    BLAS or jax start their threads."""
    cpu = os.environ.get("RIEMATTN_BENCH_CPU")
    if cpu:
        os.sched_setaffinity(0, {int(cpu)})
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                                   " intra_op_parallelism_threads=1").strip()
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)


def spawn(tool, tol, data, batch):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", tool, "--tol", repr(tol),
           "--data", data, "--batch", str(batch)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker {tool} tol={tol} B={batch} failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1][len("RESULT "):])


# --------------------------------------------------------------------------------------------
def reference(y0):
    """scipy DOP853 at rtol = atol = 1e-13 on the flattened batch."""
    from scipy.integrate import solve_ivp

    field = riemattn_field()
    sol = solve_ivp(lambda t, x: field(t, x.reshape(y0.shape)).ravel(), (0.0, T_END), y0.ravel(),
                    method="DOP853", rtol=1e-13, atol=1e-13)
    assert sol.success, sol.message
    return sol.y[:, -1].reshape(y0.shape)


def show(r, rnd):
    extra = f"  (no renormalisation {r['err_raw']:.2e}; compile + first run " \
            f"{r['compile_and_first_run']:.2f} s)" if "compile_and_first_run" in r else ""
    print(f"  round {rnd}  {r['tool']:16s} tol {r['tol']:7.1e}  time {r['time']:8.3f} s  "
          f"error {r['err']:.2e}  steps {r['steps']:6d}  load {r['load']:.2f}{extra}", flush=True)


def bench_batch(batch, tols, rounds, data, seed):
    y0 = initial(batch, seed)
    np.save(os.path.join(data, f"y0_{batch}.npy"), y0)
    t0 = time.perf_counter()
    ref = reference(y0)
    t_ref = time.perf_counter() - t0
    np.save(os.path.join(data, f"ref_{batch}.npy"), ref)
    # check the flattened-batch reference against per-trajectory solves of 10 trajectories
    sub = np.concatenate([reference(y0[b:b + 1]) for b in range(min(10, batch))])
    print(f"\nB = {batch}: reference (scipy DOP853, 1e-13, flattened batch) in {t_ref:.1f} s; "
          f"per-trajectory check on {len(sub)} trajectories: max difference "
          f"{np.max(np.abs(sub - ref[:len(sub)])):.1e}; load {load():.2f}", flush=True)

    runs = {}  # (tool, tol) -> list of results
    for tol in tols:  # round 1: every tool at every tolerance, interleaved
        for tool in TOOLS:
            r = spawn(tool, tol, data, batch)
            runs[(tool, tol)] = [r]
            show(r, 1)
    # rounds 2..: the two cheapest round-1 runs of each tool that reach the target
    cand = {}
    for tool in TOOLS:
        ok = sorted((runs[(tool, tol)][0]["time"], tol) for tol in tols
                    if runs[(tool, tol)][0]["err"] <= TARGET)
        cand[tool] = [tol for _, tol in ok[:2]]
    order = [(tool, cand[tool][k]) for k in range(2) for tool in TOOLS if k < len(cand[tool])]
    for rnd in range(2, rounds + 1):
        for tool, tol in order:
            r = spawn(tool, tol, data, batch)
            assert r["err"] == runs[(tool, tol)][0]["err"], "a repeated solve gave another error"
            runs[(tool, tol)].append(r)
            show(r, rnd)

    print(f"\n  B = {batch}: best time of {rounds} fresh processes; '*' = the tool's cheapest run "
          f"with max error <= {TARGET:g}")
    print(f"  {'tool':16s} {'tol':>8s} {'max error':>10s} {'steps':>6s} {'best [s]':>9s}  timings [s]")
    best = {}
    for tool in TOOLS:
        for tol in tols:
            rs = runs[(tool, tol)]
            t = min(r["time"] for r in rs)
            if rs[0]["err"] <= TARGET and tol in cand[tool]:
                if tool not in best or t < best[tool][0]:
                    best[tool] = (t, tol, rs[0]["err"])
        for tol in tols:
            rs = runs[(tool, tol)]
            t = min(r["time"] for r in rs)
            mark = "*" if tool in best and best[tool][1] == tol else " "
            print(f"  {tool:16s} {tol:8.1e} {rs[0]['err']:10.2e} {rs[0]['steps']:6d} {t:9.3f}{mark} "
                  + " ".join(f"{r['time']:.3f}" for r in rs))
    return best


def ratio_lines(batch, best):
    dfx = best.get("diffrax Dopri5")
    ours = {k: v for k, v in best.items() if k.startswith("riemattn")}
    if dfx is None or not ours:
        return [f"B={batch}: riemattn/diffrax time ratio: not measured (a tool did not reach max "
                f"error <= {TARGET:g}; reached: {sorted(best)})"]
    lines = []
    lab = min(ours, key=lambda k: ours[k][0])
    for name in [lab] + [k for k in ours if k != lab]:
        t, tol, err = ours[name]
        r = t / dfx[0]
        word = f"riemattn {1 / r:.2f}x faster" if r <= 1 else f"riemattn {r:.2f}x SLOWER"
        head = f"B={batch}: riemattn/diffrax time ratio" if name == lab else \
            f"  (other stepper) B={batch}: riemattn/diffrax time ratio"
        lines.append(f"{head} {r:.2f} ({word}): {name} {t:.3f} s at tol {tol:.0e} (error {err:.2e}) "
                     f"vs diffrax Dopri5 {dfx[0]:.3f} s at tol {dfx[1]:.0e} (error {dfx[2]:.2e})")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--tols", type=float, nargs="+", default=list(DEFAULT_TOLS))
    ap.add_argument("--rounds", type=int, default=3, help="timings per selected run (best of)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--worker", choices=TOOLS, help=argparse.SUPPRESS)
    ap.add_argument("--tol", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.tol, args.data, args.batch[0])
        return

    import diffrax
    import jax
    import scipy

    import riemattn as ra

    cpu = os.environ.get("RIEMATTN_BENCH_CPU")
    print(f"riemattn {ra.__version__}, jax {jax.__version__}, diffrax {diffrax.__version__}, "
          f"numpy {np.__version__}, scipy {scipy.__version__}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, jax devices {jax.devices()}, "
          + (f"every timed process pinned to CPU {cpu}" if cpu else "processes not pinned"))
    diff = check_fields()
    print(f"JAX field vs riemattn field(t, y): max difference {diff:.1e} (asserted <= 1e-12)")
    data = tempfile.mkdtemp(prefix="vs_diffrax_")
    results = {}
    try:
        for batch in args.batch:
            results[batch] = bench_batch(batch, args.tols, args.rounds, data, args.seed)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    print("\nsummary (equal measured error: each tool's cheapest run with max |y(T) - y_ref(T)| "
          f"<= {TARGET:g})")
    for batch, best in results.items():
        for line in ratio_lines(batch, best):
            print("  " + line)
    print("  load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
