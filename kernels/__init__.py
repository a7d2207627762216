"""perfbisect's measuring side: the harness run at each revision (harness/), the benchmark
suites and their controls (suites/), case names (cases.py), the result table (report.py)
and the demo kernel repository (demo/). Needs only torch, numpy and, on GPUs, triton."""
