"""A real library with a compiled extension, bisected with today's builds and with incremental
builds (a kept build tree, ccache, cost-aware probes), one after the other in one run, each in a
home of its own (embedded: SQLite, in-process tasks; an empty build cache, tree and ccache):
wall time, builds, cache hits, build seconds and the culprit, mapped back to the original commit.

The library: msgspec (C, one translation unit, msgspec/_core.c, setuptools). The regression:
msgspec#311, "JSON decoder performance regression" between 0.12.0 and 0.13.0, fixed by #312
(4686714, "a misplaced INCREF" leaked every field value decoded into a Struct); the INCREF came
with 91e6b42 ("Add `msgspec.replace` function"), the maintainers' culprit as `git blame` names it.

    python bench/real_compiled.py /work/.mirror/jcrist+msgspec/repo --keep /tmp/msgspec-bench \\
        [--good 0.12.0 --bad 0.13.0] [--order plain-first|incremental-first] [--kinds plain,incremental]

The history is rebuilt with bench/real_history.py (msgspec/, setup.py, setup.cfg, versioneer.py,
MANIFEST.in at each first-parent commit; docs-only commits stay as empty ones) into KEEP/msgspec
unless it is there. The suite is bench/suites/msgspec_decode.py (kept outside the history).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from real_history import rebuild  # noqa: E402

PERFBISECT = str(Path(sys.executable).with_name("perfbisect"))
PATHS = ["msgspec", "setup.py", "setup.cfg", "versioneer.py", "MANIFEST.in"]
INPUTS = ["msgspec/", "setup.py", "setup.cfg", "versioneer.py"]
POLICY = {"min_samples": 7, "max_samples": 15, "max_time_s": 0.5, "rel_noise": 0.01, "warmup": 2, "threads": 1}
MAINTAINERS_CULPRIT = "91e6b427e1"


def build_command(incremental: bool) -> str:
    temp = "{build_tree}" if incremental else '"$TMPDIR/build-temp"'
    return ("{python} setup.py -q build_py --build-lib {build_dir} "
            f"build_ext --build-lib {{build_dir}} --build-temp {temp}")


FIGURES = """
import json, sys
from perfbisect.cli.compiled_demo import build_figures
print(json.dumps(build_figures(int(sys.argv[1]))))
"""


def run(kind: str, root: Path, repo: Path, min_effect: float) -> dict:
    home = root / kind
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(PERFBISECT_HOME=str(home / "var"), PYTHONUNBUFFERED="1")
    inputs = [arg for path in INPUTS for arg in ("--build-input", path)]
    subprocess.run([PERFBISECT, "repo", "add", str(repo), "--name", "msgspec", "--build",
                    build_command(kind == "incremental"), *inputs, "--import-root", ".perfbisect-build"],
                   cwd=home, env=env, check=True, capture_output=True)
    good = subprocess.run(["git", "-C", str(repo), "rev-list", "--max-parents=0", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.split()[0]
    args = [PERFBISECT, "bisect", "--repo", "msgspec", "--good", good, "--bad", "HEAD",
            "--suite-file", str(HERE / "suites" / "msgspec_decode.py"), "--target", "msgspec.json:Decoder",
            "--shape", "n=2000,repeat=10", "--device-class", "cpu", "--min-effect", str(min_effect),
            "--policy", json.dumps(POLICY), "--json"]
    started = time.monotonic()
    done = subprocess.run(args, cwd=home, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    (home / "bisect.out").write_text(done.stdout + "\n--- stderr\n" + done.stderr)
    try:
        job = json.loads(done.stdout[done.stdout.index("{"):])
    except ValueError:
        raise SystemExit(f"{kind}: no result (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    figures = subprocess.run([sys.executable, "-c", FIGURES, str(job["id"])], cwd=home, env=env, check=True,
                             capture_output=True, text=True).stdout
    return {**json.loads(figures), "wall_s": round(wall, 1), "exit": done.returncode,
            "culprits": [(c["first_sha"], c["last_sha"]) for c in job["culprits"] if c["kind"] == "performance"]}


def original(repo: Path, sha: str) -> str:
    body = subprocess.run(["git", "-C", str(repo), "show", "-s", "--format=%B", sha], check=True,
                          capture_output=True, text=True).stdout
    trailer = [line.split(": ", 1)[1] for line in body.splitlines() if line.startswith("Original-commit: ")]
    subject = body.splitlines()[0] if body else ""
    return f"{trailer[0][:10] if trailer else sha[:10]} ({subject})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="msgspec's git directory (a mirror)")
    parser.add_argument("--keep", type=Path, required=True, help="work directory (kept)")
    parser.add_argument("--good", default="0.12.0")
    parser.add_argument("--bad", default="0.13.0")
    parser.add_argument("--order", choices=("plain-first", "incremental-first"), default="plain-first")
    parser.add_argument("--kinds", default="plain,incremental")
    parser.add_argument("--min-effect", type=float, default=0.10)
    args = parser.parse_args()
    repo = args.keep / "msgspec"
    if not repo.exists():
        rebuild(args.source, args.good, args.bad, repo, PATHS)
    kinds = [k for k in args.kinds.split(",") if k]
    kinds = kinds if args.order == "plain-first" else kinds[::-1]
    results = {}
    for kind in kinds:
        stamp = f"load {os.getloadavg()[0]:.1f}"
        results[kind] = run(kind, args.keep, repo, args.min_effect)
        print(f"{kind}: {json.dumps(results[kind])} ({stamp} at the start, {os.getloadavg()[0]:.1f} at the end)",
              flush=True)
    print(f"{'builds':<12} {'wall s':>7} {'build s':>8} {'trials':>6} {'builds run':>10} {'build-cache hits':>16} "
          f"{'ccache hits/misses':>18}  culprits (original commit)")
    for kind, r in results.items():
        names = [original(repo, a) if a == b else f"{original(repo, a)}..{original(repo, b)}" for a, b in r["culprits"]]
        print(f"{kind:<12} {r['wall_s']:>7.0f} {r['build_s']:>8.0f} {r['trials']:>6} {r['builds']:>10} "
              f"{r['build_cache_hits']:>16} {r['ccache_hits']:>8}/{r['ccache_misses']:<9}  {names} (exit {r['exit']})")
    if len(results) == 2:
        ratio = results["incremental"]["wall_s"] / max(1e-9, results["plain"]["wall_s"])
        print(f"incremental / plain wall time: {ratio:.2f}; same culprits: "
              f"{results['incremental']['culprits'] == results['plain']['culprits']}; maintainers' culprit "
              f"{MAINTAINERS_CULPRIT}; load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
