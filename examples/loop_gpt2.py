"""Loop a randomly initialised GPT-2 small and watch its tokens' misalignment E (ICML eq. 9).

Needs the extra: pip install 'riemattn[llm]'. About a minute on 2 CPU cores.
Same as: riemattn loop --model gpt2 --size small --variant random,random-noff --passes 3 --prompts 4 --tokens 64
"""

import matplotlib

matplotlib.use("Agg")

from riemattn.llm import plot_loop, run_loop, summarize  # noqa: E402

ds = run_loop("gpt2", "small", variants=["random", "random-noff"], passes=3, prompts=4, tokens=64, seed=0,
              progress=True)
for variant, s in summarize(ds).items():
    print(f"{variant:12s} E after layer 1: {s['E_first_layer']:.3f}   after the last layer: {s['E_last']:.3f}   "
          f"{s['seconds_per_pass']:.1f} s/pass")
ds.to_netcdf("loop_gpt2.nc", engine="scipy")  # dims (variant, prompt, layer)
plot_loop(ds).savefig("loop_gpt2.png", dpi=120)
