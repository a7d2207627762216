"""The descent into a bump on a real pure-Python library (issue 44, "A real case on the CPU"):
Pygments' C/C++ lexer regression that its maintainers bisected to one commit and reverted.

The case (pygments/pygments#788, imported from Bitbucket issue 1081): "CppLexer pathological
slowness", a line of several `/* */` comments before code makes the C-family lexers' `ws1`
regex backtrack exponentially. The reporter's bisect named changeset e19e3591780a, Georg
Brandl's "#944: allow multiple comments in ws1 regex" (git 70545de94d in the GitHub history),
which turned `(?:/[*].*?[*]/\\s*)?` into `(...)*`; "reverting [it] fixes it", and the revert
landed as 017b2fd22d ("#1081: Revert e19e3591780a... to fix a case of pathological slowness").

This script, run from the repository root with the project's interpreter:

1. rebuilds a linear history of the library from a snapshot (`fetch github:pygments/pygments`,
   a bare git directory): an ancestry chain through the culprit, BEFORE commits of its
   first-parent line before it and AFTER commits after it (at each merge, the parent that holds
   the culprit: the Mercurial conversion's first parents wander into contributors' forks), each
   commit holding only `pygments/` as it was then, with its author, dates, message and an
   `Original-commit:` trailer. The 2014 code is Python 2 (the project itself installed it on
   Python 3 through 2to3, `use_2to3`, until its single-source port 8 days after the culprit), so
   every commit's files go through lib2to3, cached by blob, and one regex in `pygments/util.py`
   whose global flags trail the pattern (an error since Python 3.11) gets them at its start;
   nothing else changes, and the same transform applies to every commit;
2. writes a small HOST repository (`hostapp`) that vendors that library as a git submodule at
   `third_party/pygments` and has five commits: the start (pinned at the chain's first commit),
   two harmless host changes, the bump of the submodule to the chain's last commit, and a
   harmless one after it; its benchmark suite `bench/lex_suite.py` lexes C source whose lines
   start with K `/* */` comments, through the vendored library, against a pure-Python control;
3. registers both (the submodule is found without a declaration), bisects the host, and checks
   that perfbisect descended into the bump and named, inside the library, the rebuilt commit
   whose `Original-commit:` is the maintainers' culprit.

    python bench/real_descent.py /work/.mirror/pygments+pygments/repo OUTDIR [--run]

Without --run it only builds the two repositories (the library's at OUTDIR/pygments, the host's
at OUTDIR/host) and prints the commands. OUTDIR must not exist. The bisect runs embedded
(SQLite under OUTDIR/home, in-process workers) unless PERFBISECT_HOME is set.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

CULPRIT = "70545de94df2d6297b5f5c0338c6dbf441ad1144"  # hg e19e3591780a, "#944: allow multiple comments in ws1 regex"
REVERT = "017b2fd22d7b5a4bd38ec724a09b95e8f9bab550"  # "#1081: Revert e19e3591780a... pathological slowness"
ISSUE = "https://github.com/pygments/pygments/issues/788"
SUBMODULE = "third_party/pygments"
IDENTITY = {"GIT_AUTHOR_NAME": "host", "GIT_AUTHOR_EMAIL": "host@example.invalid",
            "GIT_COMMITTER_NAME": "host", "GIT_COMMITTER_EMAIL": "host@example.invalid"}


def git(repo: Path | str, *args: str, env: dict | None = None, input: bytes | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          env=env, input=input).stdout.decode()


# -- 1. the library's linear history -------------------------------------------------------------

def chain_through(source: Path, culprit: str, before: int, after: int, newest: str) -> list[str]:
    """An ancestry chain of commits, oldest first: `before` commits of the culprit's first-parent
    line, the culprit, then `after` commits towards `newest` (walking back from it, at each merge
    the parent that holds the culprit). Each commit is a parent of the next."""
    culprit = git(source, "rev-parse", "--verify", f"{culprit}^{{commit}}").strip()
    older = git(source, "rev-list", "--first-parent", f"--max-count={before + 1}", culprit).split()
    newer, at = [], git(source, "rev-parse", "--verify", f"{newest}^{{commit}}").strip()
    holds = set(git(source, "rev-list", "--ancestry-path", f"{culprit}..{at}").split())
    if at != culprit and at not in holds:
        raise SystemExit(f"{newest} does not descend from {culprit}")
    while at != culprit:
        newer.append(at)
        parents = git(source, "show", "-s", "--format=%P", at).split()
        at = next(p for p in parents if p == culprit or p in holds)
    newer.reverse()
    return list(reversed(older)) + newer[:after]


_TRAILING_FLAGS = re.compile(r"r'([^'\n]+?)\(\?([aiLmsux]+)\)'")


def py3(text: str, cache: dict[str, str], blob: str, refactor: Callable[[str, str], str], name: str) -> str:
    """`text` through lib2to3 (cached by blob), then global inline flags moved to the start."""
    if blob not in cache:
        try:
            out = refactor(text, name)
        except Exception:  # a file lib2to3 cannot parse stays as it is (it would not import either)
            out = text
        cache[blob] = _TRAILING_FLAGS.sub(lambda m: f"r'(?{m.group(2)}){m.group(1)}'", out)
    return cache[blob]


def lib2to3_refactor() -> Callable[[str, str], str]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from lib2to3.refactor import RefactoringTool, get_fixers_from_package
    tool = RefactoringTool(get_fixers_from_package("lib2to3.fixes"))
    return lambda text, name: str(tool.refactor_string(text if text.endswith("\n") else text + "\n", name))


def rebuild_library(source: Path, chain: list[str], out: Path, keep: str = "pygments",
                    transform: Callable | None = None) -> list[tuple[str, str, str]]:
    """One commit of `out` per commit of `chain`, holding only `keep` as it was then (through
    `transform(text, cache, blob, name)` for .py files). Returns (new sha, original sha, subject)."""
    if out.exists():
        raise SystemExit(f"{out} exists; remove it first")
    out.mkdir(parents=True)
    git(out, "init", "-q", "-b", "main")
    cache: dict[str, str] = {}
    rows = []
    for sha in chain:
        shutil.rmtree(out / keep, ignore_errors=True)
        blobs = dict(line.split("\t", 1)[::-1] for line in
                     (x.split(" ", 2)[2] for x in git(source, "ls-tree", "-r", sha, "--", keep).splitlines()))
        archive = subprocess.run(["git", "-C", str(source), "archive", "--format=tar", sha, "--", keep],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(out, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
        if transform is not None:
            for name, blob in blobs.items():
                if name.endswith(".py"):
                    path = out / name
                    path.write_text(transform(path.read_text(encoding="utf-8", errors="surrogateescape"),
                                              cache, blob, name), encoding="utf-8", errors="surrogateescape")
        fmt = "%an%x00%ae%x00%aI%x00%cn%x00%ce%x00%cI%x00%B"
        an, ae, ad, cn, ce, cd, message = git(source, "show", "-s", f"--format={fmt}", sha).split("\0", 6)
        env = {**os.environ, "GIT_AUTHOR_NAME": an, "GIT_AUTHOR_EMAIL": ae, "GIT_AUTHOR_DATE": ad,
               "GIT_COMMITTER_NAME": cn, "GIT_COMMITTER_EMAIL": ce, "GIT_COMMITTER_DATE": cd}
        message = message.rstrip("\n") + f"\n\nOriginal-commit: {sha}\n"
        git(out, "add", "-A")
        git(out, "commit", "-q", "--allow-empty", "--no-verify", "-F", "-", env=env, input=message.encode())
        rows.append((git(out, "rev-parse", "HEAD").strip(), sha, message.split("\n", 1)[0]))
    return rows


# -- 2. the host repository ----------------------------------------------------------------------

HOST_INIT = '''"""hostapp: a small application that vendors Pygments as a git submodule (third_party/pygments)."""
import sys
from pathlib import Path

VENDORED = Path(__file__).resolve().parent.parent / "third_party" / "pygments"
if str(VENDORED) not in sys.path:
    sys.path.insert(0, str(VENDORED))
'''

HOST_HIGHLIGHT = '''"""C source through the vendored Pygments' C++ lexer."""
from pathlib import Path

from hostapp import VENDORED


def _lexer():
    import pygments
    from pygments.lexers import get_lexer_by_name

    if not Path(pygments.__file__).resolve().is_relative_to(VENDORED):
        raise ImportError(f"pygments comes from {pygments.__file__}, not from the vendored {VENDORED}")
    return get_lexer_by_name("cpp")


def c_text(source):
    """The text of the tokens the lexer reads from `source`, in order (which is `source`)."""
    return "".join(value for _, value in _lexer().get_tokens(source))
'''

HOST_HIGHLIGHT_V2 = HOST_HIGHLIGHT + '''

def c_token_count(source):
    """How many tokens the lexer reads from `source`."""
    return sum(1 for _ in _lexer().get_tokens(source))
'''

SUITE = '''"""hostapp's benchmark: C source whose lines start with K /* */ comments (params: lines,
comments), lexed through the vendored Pygments; the control is a pure-Python pass over the same
text, so the ratio cancels the machine's drift."""
import re

METRIC = "lines/s"
TOLERANCE = 0.0
_WORD = re.compile(r"\\w+|[^\\w\\s]")


def validate(params):
    return {"lines": int(params.get("lines", 4)), "comments": int(params.get("comments", 10))}


def make_inputs(params, device, generator):
    line = "/* note */ " * params["comments"] + "int x{} = {};\\n"
    body = "".join(line.format(i, i) for i in range(params["lines"]))
    return (body + "int main(void) { return 0; }\\n",)


def work(params):
    return params["lines"] + 1


def reference(inputs, params):
    return inputs[0]


def compare(output, reference, params):
    return 0.0 if output == reference else 1.0


def control(inputs, params):
    n = 0
    for _ in range(40):
        n += len(_WORD.findall(inputs[0]))
    return n
'''


def build_host(out: Path, library: Path, old: str, new: str, epoch: int = 1_700_000_000) -> list[tuple[str, str]]:
    """The host repository at `out`: five commits, the fourth bumping the submodule at SUBMODULE
    (URL: `library`'s absolute path) from `old` to `new`. Returns (sha, subject), oldest first."""
    if out.exists():
        raise SystemExit(f"{out} exists; remove it first")
    out.mkdir(parents=True)
    git(out, "init", "-q", "-b", "main")
    gitmodules = f'[submodule "{SUBMODULE}"]\n\tpath = {SUBMODULE}\n\turl = {library.resolve()}\n'
    steps: list[tuple[str, dict[str, str], str | None]] = [
        ("hostapp: highlight C through vendored Pygments", {
            ".gitmodules": gitmodules, "hostapp/__init__.py": HOST_INIT, "hostapp/highlight.py": HOST_HIGHLIGHT,
            "bench/lex_suite.py": SUITE, "README.md": "# hostapp\n\nHighlights C source with Pygments.\n"}, old),
        ("docs: how the vendored Pygments is updated", {
            "README.md": "# hostapp\n\nHighlights C source with Pygments, vendored at third_party/pygments "
                         "(a git submodule: bump it with `git -C third_party/pygments checkout REV`).\n"}, None),
        ("highlight: count the tokens too", {"hostapp/highlight.py": HOST_HIGHLIGHT_V2}, None),
        ("bump vendored pygments", {}, new),
        ("ci: note the Python versions", {"CHANGES.md": "# Changes\n\n- runs on Python 3.11\n"}, None),
    ]
    rows = []
    for i, (subject, files, pin) in enumerate(steps):
        for name, text in files.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
            git(out, "add", name)
        if pin is not None:
            git(out, "update-index", "--add", "--cacheinfo", f"160000,{pin},{SUBMODULE}")
        if subject.startswith("bump"):
            subject = f"bump vendored pygments {old[:10]}..{new[:10]}"
        date = f"@{epoch + 3600 * i} +0000"
        env = {**os.environ, **IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        git(out, "commit", "-q", "--no-verify", "-m", subject, env=env)
        rows.append((git(out, "rev-parse", "HEAD").strip(), subject))
    return rows


# -- 3. register, bisect, check ------------------------------------------------------------------

def perfbisect(*args: str, env: dict, log: list[str], check: bool = True, echo: bool = True) -> tuple[int, str]:
    """Run the CLI, its output echoed as it comes (and kept in `log`); (exit code, output)."""
    cmd = [sys.executable, "-m", "perfbisect.cli.main", *args]
    log.append("$ perfbisect " + " ".join(args))
    if echo:
        print(log[-1], flush=True)
    lines = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append(line)
            if echo:
                print(line, end="", flush=True)
    log.append("".join(lines))
    if check and proc.returncode not in (0, 4):
        raise SystemExit(f"perfbisect {args[0]} exited {proc.returncode}")
    return proc.returncode, "".join(lines)


def original_of(library: Path, sha: str) -> str | None:
    body = git(library, "show", "-s", "--format=%B", sha)
    found = re.search(r"^Original-commit: ([0-9a-f]{40})$", body, re.M)
    return found.group(1) if found else None


def run(out: Path, library: Path, host: Path, good: str, bad: str, shape: str, min_effect: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path.cwd()) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.setdefault("PERFBISECT_HOME", str(out / "home"))
    log: list[str] = []
    perfbisect("repo", "add", str(library.resolve()), "--name", "pygments", env=env, log=log)
    perfbisect("repo", "add", str(host.resolve()), "--name", "hostapp", env=env, log=log)
    started = time.monotonic()
    perfbisect("bisect", "--repo", "hostapp", "--good", good, "--bad", bad,
               "--suite-file", str(host / "bench" / "lex_suite.py"), "--target", "hostapp.highlight:c_text",
               "--shape", shape, "--device-class", "cpu", "--min-effect", min_effect, "--wide",
               env=env, log=log)
    wall = time.monotonic() - started
    jobs = {}
    for job_id in (1, 2, 3):
        shown = subprocess.run([sys.executable, "-m", "perfbisect.cli.main", "show", str(job_id), "--json"],
                               env=env, capture_output=True, text=True)  # its exit code is the job's
        try:
            jobs[job_id] = json.loads(shown.stdout)
        except json.JSONDecodeError:
            continue
    parent = jobs.get(1, {})
    named = []
    for descent in parent.get("descents") or []:
        child = jobs.get(descent.get("job_id"), {})
        for culprit in child.get("culprits") or []:
            if culprit.get("kind") == "performance":
                named.append((culprit["first_sha"], culprit["last_sha"]))
    originals = [(original_of(library, first), original_of(library, last)) for first, last in named]
    found = any(first == last == CULPRIT for first, last in originals)
    false = [o for o in originals if o != (CULPRIT, CULPRIT)]
    print(f"bisect wall {wall:.0f} s; host culprits: "
          f"{[c['last_sha'][:10] for c in parent.get('culprits') or []]}; descents: "
          f"{[(d.get('dependency'), d.get('job_id')) for d in parent.get('descents') or []]}")
    print(f"maintainers' culprit {CULPRIT[:10]} ({ISSUE}) named inside the bump: {int(found)}/1; "
          f"other library culprits: {len(false)}")
    (out / "run.log").write_text("\n".join(log))
    (out / "jobs.json").write_text(json.dumps(jobs, indent=1, default=str))
    return {"found": found, "false": false, "wall_s": wall}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="git directory of pygments/pygments (bare is fine)")
    parser.add_argument("out", type=Path, help="new directory for both repositories and the run")
    parser.add_argument("--before", type=int, default=12, help="library commits before the culprit")
    parser.add_argument("--after", type=int, default=20, help="library commits after the culprit")
    parser.add_argument("--newest", default=REVERT + "^", help="walk back from here to the culprit")
    parser.add_argument("--shape", default="lines=4,comments=12")
    parser.add_argument("--min-effect", default="0.1")
    parser.add_argument("--run", action="store_true", help="register both and bisect the host")
    args = parser.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"{args.out} exists; remove it first")
    chain = chain_through(args.source, CULPRIT, args.before, args.after, args.newest)
    refactor = lib2to3_refactor()
    started = time.monotonic()
    rows = rebuild_library(args.source, chain, args.out / "pygments",
                           transform=lambda text, cache, blob, name: py3(text, cache, blob, refactor, name))
    for new, old, subject in rows:
        print(f"{new[:10]} {old[:10]} {subject}{'   <- the maintainers culprit' if old == CULPRIT else ''}")
    print(f"library: {len(rows)} commits in {args.out / 'pygments'} ({time.monotonic() - started:.0f} s)")
    host_rows = build_host(args.out / "host", args.out / "pygments", rows[0][0], rows[-1][0])
    for sha, subject in host_rows:
        print(f"host {sha[:10]} {subject}")
    if args.run:
        result = run(args.out, args.out / "pygments", args.out / "host", host_rows[0][0], host_rows[-1][0],
                     args.shape, args.min_effect)
        sys.exit(0 if result["found"] and not result["false"] else 1)


if __name__ == "__main__":
    main()
