"""`perfbisect demo --track`: the demo repository's history replayed as a stream of pushes to a
tracked branch, on this machine, embedded (SQLite, tasks in-process).

Tracking starts with main at commit 5 (backfill: commits 1, 3, 5), then every push moves main 4
commits on, so every 4th commit is measured. After the demo's last commit the branch goes on with
a few commits that touch no kernel, so the last planted step also gets the three measured heads
an alert waits for. A suspected step is re-measured side by side (3 trials of each of its two
heads) before it alerts: this machine's load comes and goes, and a busy spell over a few heads
looks like a step. Each planted step these heads can reveal must raise one alert whose bisect
names the exact commit; the steps they cannot (the rmsnorm pair: one and two heads before them,
where a level needs three) are listed as not scored, and an alert over one is not a false alert.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from perfbisect.cli.common import CLIError, fail, prepare_database
from perfbisect.cli.runs import DEMO_MIN_EFFECT, demo_device, demo_repo_truth, register_path
from perfbisect.cli.track import alert_lines, run_loop
from perfbisect.kernels import demo
from perfbisect.service.alerts import repository as alert_rows
from perfbisect.service.alerts import views as alert_views
from perfbisect.service.alerts.service import MIN_HEADS
from perfbisect.service.db import session_scope
from perfbisect.service.repos import service as repos
from perfbisect.service.settings import get_settings
from perfbisect.service.tracking import repository as tracked_rows
from perfbisect.service.tracking import service as tracking
from perfbisect.service.tracking.schemas import TrackedBranchCreate

START, BACKFILL_EVERY, PUSH_EVERY, QUIET_COMMITS = 5, 2, 4, 8
EPOCH = 1767225600 + 7 * 3600 * 60  # after the demo's own commit dates


def _git(repo: Path, *args: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", *args], cwd=repo, env={**base, "GIT_CONFIG_NOSYSTEM": "1",
                                                          "GIT_CONFIG_GLOBAL": os.devnull, **env},
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


def replay_repo(source: Path, replay: Path) -> list[str]:
    """A bare clone of the demo repository with QUIET_COMMITS kernel-free commits on top, its
    main set back to START; returns every first-parent sha, oldest first (kept under
    refs/replay/tip so pushes can move main forward)."""
    shutil.rmtree(replay, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(source), str(replay)], check=True, capture_output=True)
    tip = _git(replay, "rev-parse", "HEAD")
    tree = _git(replay, "rev-parse", "HEAD^{tree}")
    for i in range(QUIET_COMMITS):
        date = f"@{EPOCH + 7 * 3600 * i} +0000"
        tip = _git(replay, "commit-tree", tree, "-p", tip, "-m", f"docs: release notes, part {i + 1} (#{950 + i})",
                   GIT_AUTHOR_NAME="Ada Kernel", GIT_AUTHOR_EMAIL="ada@minikern.dev", GIT_AUTHOR_DATE=date,
                   GIT_COMMITTER_NAME="Ada Kernel", GIT_COMMITTER_EMAIL="ada@minikern.dev", GIT_COMMITTER_DATE=date)
    _git(replay, "update-ref", "refs/replay/tip", tip)
    shas = _git(replay, "rev-list", "--first-parent", "--reverse", tip).split()
    _git(replay, "update-ref", "refs/heads/main", shas[START])
    return shas


def push_heads(n_commits: int) -> list[int]:
    return list(range(START + PUSH_EVERY, n_commits, PUSH_EVERY))


def _track(repo_name: str, device: str) -> int:
    cases = demo.DEMO_GPU_CASES if device == "cuda" else demo.DEMO_CPU_CASES
    benchmarks: dict[tuple[str, str], list[dict]] = {}
    for case in cases:
        benchmarks.setdefault((case["suite"], case["target"]), []).append(case["params"])
    with session_scope() as session:
        repo = repos.get(session, repo_name)
        for old in tracked_rows.find(session, repo.id, "main", device):  # a fresh start; measurements stay
            tracking.remove(session, old.id)
        tracked = tracking.create(session, TrackedBranchCreate(
            repository=repo_name, branch="main", device_class=device,
            benchmarks=[{"suite": s, "target": t, "shapes": p} for (s, t), p in benchmarks.items()],
            backfill_every=BACKFILL_EVERY, backfill_depth=START + 1, trials_per_head=3,
            min_magnitude=DEMO_MIN_EFFECT[device], max_bisects=2,
            policy=demo.DEMO_CPU_POLICY if device == "cpu" else demo.DEMO_GPU_POLICY))
        return tracked.id


def _alerts(tracked_id: int) -> list:
    with session_scope() as session:
        return sorted(alert_views.alert_reads(session, alert_rows.listing(session, tracked_id=tracked_id, limit=1000)),
                      key=lambda a: a.id)


def _covers(alert: Any, event: dict, pos: dict[str, int], device: str) -> bool:
    """Whether the alert is over the planted event: its range holds the event's commit and it
    names a case the event changes (an alert on other cases in the same range is not its alert);
    a broken alert (a head that failed to import) is over a planted import break."""
    if not pos[alert.before_sha] < event["index"] <= pos[alert.last_sha]:
        return False
    if getattr(alert, "kind", None) == "broken" or event["kind"] == "import_error":
        return getattr(alert, "kind", None) == "broken" and event["kind"] == "import_error"
    return not {c.case for c in alert.cases}.isdisjoint(event["cases"][device])


def _broken(events: list[dict]) -> list[range]:
    """The commit ranges where every case fails to import (a break until the event that fixes it)."""
    fixes = {e["fixes"]: e["index"] for e in events if e.get("fixes")}
    return [range(e["index"], fixes.get(e["event"], 10 ** 9)) for e in events if e["kind"] == "import_error"]


def untrackable(events: list[dict], heads: list[int], device: str, min_heads: int) -> dict[str, str]:
    """The planted steps that tracking these heads cannot find, with why: a performance step needs
    `min_heads` heads that measured its cases on each side of it, between it and the neighbouring
    steps of the same cases (a level needs that many heads before the detector may see it); a
    wrong-results step needs a head before it and a head that runs it before it is fixed. Heads
    inside an import break measure nothing."""
    broken = _broken(events)
    measured = [h for h in heads if not any(h in r for r in broken)]
    perf = [e for e in events if e["kind"] == "perf"]
    fixed = {e["fixes"]: e["index"] for e in events if e.get("fixes")}
    out = {}
    for event in events:
        if event["kind"] == "wrong_results":
            if not any(h < event["index"] for h in measured) or not any(
                    event["index"] <= h < fixed.get(event["event"], 10 ** 9) for h in measured):
                out[event["event"]] = "no measured head on one side of it before it was fixed"
            continue
        if event["kind"] != "perf":
            continue
        same = [e["index"] for e in perf if e is not event and set(e["cases"][device]) & set(event["cases"][device])]
        start = max((i for i in same if i < event["index"]), default=0)
        end = min((i for i in same if i > event["index"]), default=10 ** 9)
        before = sum(start <= h < event["index"] for h in measured)
        after = sum(event["index"] <= h < end for h in measured)
        if min(before, after) < min_heads:
            out[event["event"]] = (f"{before} measured head(s) of its level before it and {after} after "
                                   f"(a level needs {min_heads})")
    return out


def score(truth: dict, shas: list[str], alerts: list, first_seen: dict[int, int], heads: list[int],
          device: str = "cpu") -> dict:
    """Per planted step that these heads can reveal: alerts covering it, detection delay (measured
    heads from the step to the head whose run raised its alert), exact culprit. `untracked`: the
    steps no tracking of these heads can find (see `untrackable`), not scored; `false_alerts`: the
    alerts that cover no planted step (its commit and one of its cases), trackable or not."""
    pos = {sha: i for i, sha in enumerate(shas)}
    planted = [e for e in truth["events"] if e["kind"] in ("perf", "wrong_results")]
    untracked = untrackable(truth["events"], heads, device, MIN_HEADS)
    rows = []
    for event in (e for e in planted if e["event"] not in untracked):
        covering = [a for a in alerts if _covers(a, event, pos, device)]
        seen = min((first_seen[a.id] for a in covering), default=None)
        rows.append({
            "event": event["event"], "index": event["index"], "alerts": len(covering),
            "delay_heads": None if seen is None else sum(event["index"] <= h <= seen for h in heads),
            "culprit_exact": any(a.culprit_exact and a.culprit_last_sha == event["sha"] for a in covering),
        })
    breaks = [e for e in truth["events"] if e["kind"] == "import_error"]  # a broken alert over one is no false alert
    # nor a noisier or bimodal alert over the planted slow path (issue 46; not scored as a step)
    spread = [e for e in truth["events"] if e["kind"] == "spread"]
    false = [a.id for a in alerts if not any(_covers(a, e, pos, device) for e in planted + breaks)
             and not (getattr(a, "kind", None) in ("noisier", "bimodal") and any(_covers(a, e, pos, device) for e in spread))]
    return {"steps": rows, "untracked": untracked, "false_alerts": false, "heads": len(heads)}


def run_track_demo(path: Path, device: str, workers: int, console: Console) -> tuple[list, dict]:
    """Replay the history; returns the alerts and the score against the planted ground truth."""
    if not get_settings().embedded:
        raise CLIError("demo --track runs embedded: unset REDIS_URL")
    truth = demo_repo_truth(path, console)
    prepare_database()
    get_settings().embedded_workers = workers
    shas = replay_repo(path, path.parent / f"{path.name}-replay.git")
    name = register_path(path.parent / f"{path.name}-replay.git", demo.DEMO_BUILD_COMMAND, name=f"minikern-track-{device}")
    tracked_id = _track(name, device)
    heads = [START - i for i in range(0, START + 1, BACKFILL_EVERY)][::-1]
    console.print(f"tracking main from commit {START} (backfill {', '.join(map(str, heads))}), "
                  f"then a push every {PUSH_EVERY} commits on {device}")
    run_loop(tracked_id)
    first_seen: dict[int, int] = {a.id: START for a in _alerts(tracked_id)}
    for index in push_heads(len(shas)):
        _git(path.parent / f"{path.name}-replay.git", "update-ref", "refs/heads/main", shas[index])
        run_loop(tracked_id, shas[index])
        heads.append(index)
        alerts = _alerts(tracked_id)
        new = [a for a in alerts if a.id not in first_seen]
        first_seen.update({a.id: index for a in new})
        console.print(f"push: main -> {index:>2} {shas[index][:10]}  " +
                      (", ".join(f"alert {a.id} {a.kind} {a.before_sha[:7]}..{a.last_sha[:7]}" for a in new) or "-"))
    alerts = _alerts(tracked_id)
    return alerts, score(truth, shas, alerts, first_seen, heads, device)


def print_score(result: dict) -> None:
    steps = result["steps"]
    print(f"\nplanted steps alerted: {sum(s['alerts'] >= 1 for s in steps)}/{len(steps)}, "
          f"culprits exact: {sum(s['culprit_exact'] for s in steps)}/{len(steps)}, "
          f"false alerts: {len(result['false_alerts'])} in {result['heads']} measured heads")
    for s in steps:
        print(f"  {s['event']:<26} commit {s['index']:>2}: {s['alerts']} alert(s), detected after "
              f"{s['delay_heads'] if s['delay_heads'] is not None else '-'} head(s), culprit "
              f"{'exact' if s['culprit_exact'] else 'NOT exact'}")
    for event, why in result["untracked"].items():
        print(f"  {event:<26} not scored: outside what these heads can track ({why})")


def demo_track(path: Path, device: str, workers: int | None, as_json: bool, console: Console) -> None:
    """The CLI entry: run, print the alerts (or JSON), exit 1 unless every step was named exactly."""
    device = demo_device(device)
    try:
        alerts, result = run_track_demo(path, device, workers or 1, console)  # one trial at a time: see run_demo
    except CLIError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps({"alerts": [a.model_dump(mode="json") for a in alerts], "score": result}, indent=2))
    else:
        print("\n".join(alert_lines(alerts)))
        print_score(result)
    if not all(s["culprit_exact"] and s["alerts"] == 1 for s in result["steps"]) or result["false_alerts"]:
        raise typer.Exit(1)
