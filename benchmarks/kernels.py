"""Cost of one field evaluation and one lifted Jacobian: compiled kernels against the NumPy field.

For each (l, d) and two fields -- GLPR's SA (P = beta I, softmax, U = I) and a general one (h = 2
random P_eta and U_eta, "paper", causal) on the sphere -- one trajectory:

- ``numpy``: ``field(t, y)`` and ``lifted_attention_jacobian(field, t, y)`` (the NumPy engine's
  calls for one trajectory);
- ``kernel``: ``kernels.evaluate(RHS | LIFTED_JAC, ...)`` repeated inside a compiled loop (the way
  the compiled stepping loops call it: no Python in between);
- ``kernel (py)``: the same kernel called from Python (includes numba's argument dispatch, a few us).

Times are the best of ``--repeat`` batches, in microseconds per call; the compile time of the
kernels is reported cold (an empty numba cache directory, a fresh process) and warm (loading the
cache). Run in a quiet machine for the numbers in docs/performance.md; the load average is printed.

Run:  python benchmarks/kernels.py [--quick] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

SIZES = [(6, 3), (16, 3), (32, 16), (64, 64), (200, 2)]
QUICK_SIZES = [(6, 3), (16, 3), (200, 2)]

COMPILE_SNIPPET = """
import time, numpy as np
t0 = time.perf_counter()
from riemattn.dynamics import kernels as kk
import riemattn as ra
t1, c1 = time.perf_counter(), time.process_time()
f = ra.AttentionField(np.eye(3), beta=2.0)
y = np.eye(3)[:2].copy()
p = kk.pack_field(f, y.shape)
kk.evaluate(kk.RHS, 0.0, y, 0, p.ints, p.floats, p.per, np.empty(p.work), np.empty((2, 3)))
kk.project(y, p.ints, p.floats, np.empty((2, 3)))
kk.to_tangent(y, y, p.ints, p.floats, np.empty((2, 3)))
kk.wnorm(y, p.ints, p.floats, np.empty(2))
t2, c2 = time.perf_counter(), time.process_time()
# every form runs the same compiled evaluate (configuration is data): no further compilation
theta = np.array([[0.1], [2.0]])
for g, yy in ((ra.usa(1e300, 3, rescaled=True), y), (ra.layernorm(f, "mix", switch=1.0), y),
              (ra.circle.CircleField(9.0, "usa"), theta)):
    q = kk.pack_field(g, yy.shape)
    for op in (kk.RHS, kk.UPDATE, kk.LIFTED_JAC, kk.TIME_DERIVATIVE, kk.BLOCK):
        out = np.empty((2 * q.d, 2 * q.d)) if op == kk.LIFTED_JAC else yy.copy()
        kk.evaluate(op, 0.0, yy, 0, q.ints, q.floats, q.per, np.empty(q.work), out)
print(t2 - t1, c2 - c1, time.perf_counter() - t2)
"""


def compile_times():
    """(cold, warm) (wall, CPU) seconds to compile / load every kernel, each in a fresh process
    with an empty (then filled) NUMBA_CACHE_DIR; the import time is excluded. Also checks that
    the other forms (rescaled, a layer-norm placement, the circle; every op) compile nothing more."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        out = []
        for _ in range(2):
            res = subprocess.run([sys.executable, "-c", COMPILE_SNIPPET], env=env, check=True,
                                 capture_output=True, text=True)
            wall, cpu, rest = (float(v) for v in res.stdout.split()[-3:])
            if rest > 0.5:
                print(f"warning: the other forms took {rest:.2f} s after evaluate was compiled (a recompilation?)")
            out.append((wall, cpu))
        return tuple(out)


def fields(d, rng):
    import riemattn as ra

    sa = ra.sa(2.0, d)
    general = ra.AttentionField(rng.normal(size=(2, d, d)) / np.sqrt(d), rng.normal(size=(2, d, d)) / np.sqrt(d),
                                mask="causal", normalization="paper")
    return {"sa": sa, "general": general}


def best(fn, repeat, number):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - t) / number)
    return min(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes only, fewer repeats")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}")
    (cold, cold_cpu), (warm, warm_cpu) = compile_times()
    print(f"kernels compile: cold {cold:.2f} s ({cold_cpu:.2f} s CPU), warm (cache) {warm:.3f} s "
          f"({warm_cpu:.3f} s CPU)   load {os.getloadavg()}")

    import numba as nb

    import riemattn as ra  # noqa: F401
    from riemattn.dynamics import kernels as kk
    from riemattn.dynamics.jacobians import lifted_attention_jacobian

    @nb.njit(nogil=True)  # not cached: it embeds evaluate's code (see riemattn.dynamics.kernels._kernel_cache)
    def repeat(n, op, t, y, ints, floats, per, work, out):
        for _ in range(n):
            kk.evaluate(op, t, y, 0, ints, floats, per, work, out)

    t = time.perf_counter()
    y0 = np.eye(3)[:2].copy()
    p0 = kk.pack_field(ra.sa(1.0, 3), y0.shape)
    repeat(1, kk.RHS, 0.0, y0, p0.ints, p0.floats, p0.per, np.empty(p0.work), np.empty((2, 3)))
    print(f"(compiling the benchmark's own loop around evaluate: {time.perf_counter() - t:.1f} s)")
    repeat_n = 2 if args.quick else args.repeat
    rng = np.random.default_rng(0)
    print(f"{'field':8s} {'l':>4s} {'d':>4s} | {'rhs numpy':>10s} {'kernel':>9s} {'(py)':>8s} {'ratio':>6s} | "
          f"{'jac numpy':>10s} {'kernel':>9s} {'ratio':>6s}   (us per call)")
    for l, d in (QUICK_SIZES if args.quick else SIZES):
        y = rng.normal(size=(l, d))
        y /= np.linalg.norm(y, axis=-1, keepdims=True)
        for name, field in fields(d, rng).items():
            p = kk.pack_field(field, y.shape)
            work, out, J = np.empty(p.work), np.empty((l, d)), np.empty((l * d, l * d))
            n_rhs = max(1, int(2e5 / (l * l * d + l * d * d)))
            n_jac = max(1, int(2e5 / (l * d) ** 2))
            t_np = best(lambda: field(0.0, y), repeat_n, max(1, n_rhs // 20))
            t_k = best(lambda: repeat(n_rhs, kk.RHS, 0.0, y, p.ints, p.floats, p.per, work, out), repeat_n, 1) / n_rhs
            t_py = best(lambda: kk.evaluate(kk.RHS, 0.0, y, 0, p.ints, p.floats, p.per, work, out), repeat_n, n_rhs)
            j_np = best(lambda: lifted_attention_jacobian(field, 0.0, y), repeat_n, max(1, n_jac // 20))
            j_k = best(lambda: repeat(n_jac, kk.LIFTED_JAC, 0.0, y, p.ints, p.floats, p.per, work, J), repeat_n, 1) / n_jac
            print(f"{name:8s} {l:4d} {d:4d} | {1e6 * t_np:10.1f} {1e6 * t_k:9.2f} {1e6 * t_py:8.2f} {t_np / t_k:6.0f} | "
                  f"{1e6 * j_np:10.1f} {1e6 * j_k:9.1f} {j_np / j_k:6.1f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
