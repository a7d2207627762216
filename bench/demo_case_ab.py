"""Two revisions of the demo history, alternated, each trial measuring the demo's whole CPU case
set in one process in the sandbox slot, as a worker runs it: prints the RMSNorm control's and
ratio's medians per trial. Made to test whether another case's change leaks into the RMSNorm
control inside a trial (bench/RESULTS.md, tenth session: it did not).

    python bench/demo_case_ab.py REPO REV_A REV_B TRIALS_EACH
    python bench/demo_case_ab.py var/demo/minikern 5069d4b1 278ada3d 4
"""
import sys, tempfile, statistics as st
from collections import defaultdict
from pathlib import Path
from perfbisect.kernels import demo
from perfbisect.service.suites.schemas import Benchmark
from perfbisect.service.suites.service import resolve_cases
from perfbisect.gitrepo import Mirror
from perfbisect.workers.runner import harness_spec, run_in_slot
from perfbisect.workers.sandbox import slot

repo, revs, n = Path(sys.argv[1]), sys.argv[2:4], int(sys.argv[4])
grouped = defaultdict(list)
for case in demo.DEMO_CPU_CASES:
    grouped[(case["suite"], case["target"])].append(case["params"])
benchmarks = [Benchmark(suite=s, target=t, shapes=shapes) for (s, t), shapes in grouped.items()]
spec = harness_spec(resolve_cases(benchmarks), "cpu", None)
with tempfile.TemporaryDirectory() as tmp:
    mirror = Mirror(Path(tmp), "xcase", str(repo.resolve()))
    mirror.ensure(fetch=False)
    shas = [mirror.resolve(r) for r in revs]
    for i in range(n):
        for rev, sha in zip(revs, shas):
            with slot() as box:
                result, _ = run_in_slot(box, mirror, sha, build_command=None, env={}, trial_spec=spec, import_root=".")
            for c in result["cases"]:
                if c["suite"] == "rmsnorm":
                    print(rev, "control %.3f ms" % st.median(c["control_ms"]), "ratio %.3f" % st.median(c["ratio"]), flush=True)
