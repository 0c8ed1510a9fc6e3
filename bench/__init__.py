"""cubinforge.bench: the device benchmark and correctness harness (issue #4).

One command on the lent H200 checks every built variant against an fp32 reference, times
ours against cuDNN, torch's flash backend and FA4 on the FA3 grid, measures cold start, and
writes results.{csv,md,json}, two plots and env.txt. See docs/benchmarking.md.

Run it as ``python -m cubinforge.bench`` where the package is installed, or as
``python3 -m bench`` from the root of a plain checkout (no pip install needed).
Modules import torch only inside the functions that need a GPU, so the CPU test-suite can
exercise the tables, the FLOP counts, the grid and the README generator.
"""
