"""Cost of observing a looped transformer: one pass of ``riemattn loop`` against the bare forward pass.

ICML section 5.2 (ARXIV section 7.5) loops a model and measures the misalignment E (ICML eq. 9)
after every block. ``riemattn.llm.loop_model`` does this with forward hooks and
:class:`riemattn.llm.loop.DeviceObserver`, which computes E with torch on the model's device in
float64 and keeps it there (one copy to the host per run). This script measures, on the same
model, inputs and device, in one run:

* **bare**: the model's own forward pass, no hooks, no observation;
* **loop**: one pass of ``loop_model`` with E observed after every block (what ``riemattn loop``
  and ``run_loop`` do per pass; the pass time ``loop_model`` reports, synchronised on CUDA).

for the first pass (token ids in) and a looped pass (the previous pass's final-norm output in as
``inputs_embeds``, positions switched off). Each is timed ``--reps`` times, interleaved (bare,
loop, bare, loop, ...), and the best time of each is compared. The last line is
``loop/forward ratio: X.XX`` (looped pass; the issue's goal: <= 1.25).

Model: GPT-2 (``--size``, default small) built from its published configuration with seeded random
weights N(0, 0.02^2) (no download), ``--prompts`` random prompts of ``--tokens`` token ids.

Run: ``python benchmarks/bench_loop.py`` (CPU, GPT-2 small, 10 prompts x 200 tokens, ~2 min on 2
cores); on a GPU: ``python benchmarks/bench_loop.py --device cuda --size xl --prompts 100``.
Needs the ``llm`` extra (torch, transformers).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import transformers

    import riemattn
    from riemattn.llm import build_model, loop_model, random_prompts
    from riemattn.llm.loop import DeviceObserver, _synchronize
    from riemattn.llm.models import positions_removed

    device = torch.device(args.device)
    lm = build_model("gpt2", args.size, seed=args.seed, dtype=args.dtype, device=device)
    ids_np = random_prompts(args.prompts, args.tokens, lm.vocab_size, args.seed)
    ids = torch.as_tensor(ids_np, device=device)
    L = lm.n_layer
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{os.cpu_count()} CPUs"
    print(f"riemattn {riemattn.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"python {sys.version.split()[0]}, device {device} ({name}), torch threads {torch.get_num_threads()}")
    print(f"model gpt2-{args.size} ({L} blocks, d = {lm.d_model}), {args.dtype}, {args.prompts} prompts x "
          f"{args.tokens} tokens, random weights (seed {args.seed})")

    @torch.inference_mode()
    def bare(looped):
        start = time.perf_counter()
        if looped is None:
            lm.model(input_ids=ids, use_cache=False)
        else:
            with positions_removed(lm):
                lm.model(inputs_embeds=looped, use_cache=False)
        _synchronize(device)
        return time.perf_counter() - start

    def loop(passes):
        obs = DeviceObserver(args.prompts, passes * L + 1, device)
        out = loop_model(lm, ids_np, passes, observe=obs)
        E = obs.host()[0]
        assert torch.isfinite(torch.as_tensor(E)).all(), "E not observed at every layer"
        return out

    first = loop(2)  # warm-up; the looped input of pass 2
    looped = loop_model(lm, ids_np, 1)["looped"]
    times = {"bare, first pass": [], "loop, first pass": [], "bare, looped pass": [], "loop, looped pass": []}
    for _ in range(args.reps):
        times["bare, first pass"].append(bare(None))
        times["bare, looped pass"].append(bare(looped))
        sec = loop(2)["seconds"]
        times["loop, first pass"].append(float(sec[0]))
        times["loop, looped pass"].append(float(sec[1]))
        print("  " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items()), flush=True)
    best = {k: min(v) for k, v in times.items()}
    del first
    print(f"best of {args.reps}: " + ", ".join(f"{k} {v:.3f} s" for k, v in best.items()))
    print(f"first pass: loop/forward {best['loop, first pass'] / best['bare, first pass']:.2f}")
    print(f"load average: {os.getloadavg()[0]:.2f}")
    print(f"loop/forward ratio: {best['loop, looped pass'] / best['bare, looped pass']:.2f}")


if __name__ == "__main__":
    main()
