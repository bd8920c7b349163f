"""
Looped GPT-2 with random weights
================================

A transformer's final normalization output is fed back as its input, pass after pass, and the
misalignment :math:`E` (ICML eq. 9, :ref:`misalignment`) of the tokens is measured after every
layer. Here the tiny GPT-2 configuration (2 layers, width 32) with random weights, with and
without its feed-forward layers, so that the example runs in seconds on a CPU; ``riemattn loop
--model gpt2 --size small`` and ``examples/loop_gpt2.py`` run the real sizes. Needs the ``llm``
extra (PyTorch).
"""

import matplotlib.pyplot as plt

from riemattn.llm import plot_loop, run_loop, summarize

ds = run_loop("gpt2", "tiny", variants=["random", "random-noff"], passes=8, prompts=4, tokens=32,
              seed=0, threads=1)
for variant, s in summarize(ds).items():
    print(f"{variant:12s} E after layer 1: {s['E_first_layer']:.3f}   after the last: {s['E_last']:.3f}")
fig = plot_loop(ds)
plt.show()
