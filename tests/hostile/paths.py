"""Escapes through paths the root worker handles after repository code ran: each commit's build
or trial leaves a symlink, a special file, a sparse file or a deep tree where the worker (root)
copies, reads or removes (tests/test_hostile_paths.py). The test names a root-only directory in
HOSTILE_SECRET_DIR (secret.txt, secret.json) and one the worker must not touch in HOSTILE_VICTIM_DIR.

    shas = write_hostile_repo(path, "0", PATH_ESCAPES)
"""

from __future__ import annotations

import textwrap

# escape -> (build.sh, body of probe(x, y) before it returns normally)
PATH_ESCAPES: dict[str, tuple[str, str]] = {
    "benign": ("exit 0", ""),
    # {build_dir} a symlink to the root-only directory: stored, then restored to the next trial
    "symlink_build_dir": ('ln -s "$HOSTILE_SECRET_DIR" "$PERFBISECT_BUILD_DIR"', textwrap.dedent("""\
        try:
            found = {name: open(os.path.join(".perfbisect-build", name)).read()
                     for name in sorted(os.listdir(".perfbisect-build"))}
        except OSError as exc:
            found = type(exc).__name__
        report(build=found)""")),
    # the trial's result file a symlink to a root-only JSON file, then a clean exit
    "symlink_result": ("exit 0", textwrap.dedent("""\
        import glob
        scratch = os.path.join(os.path.dirname(os.getcwd()), "scratch")
        planted = 0
        for trial_dir in glob.glob(os.path.join(scratch, "perfbisect-trial-*")):
            os.symlink(os.path.join(os.environ["HOSTILE_SECRET_DIR"], "secret.json"),
                       os.path.join(trial_dir, "result.json"))
            planted += 1
        print(f"PLANTED {planted}", flush=True)
        os._exit(0)""")),
    # an entry of the slot's trial cache (a "toolchain") that is a symlink to a root-owned
    # directory: the next trial's prune would remove its subdirectories
    "symlink_cache": ("exit 0", textwrap.dedent("""\
        root = os.environ["TRITON_CACHE_DIR"]
        for _ in range(3):  # <root>/<toolchain>/<sha>/jit
            root = os.path.dirname(root)
        os.symlink(os.environ["HOSTILE_VICTIM_DIR"], os.path.join(root, "0-toolchain"))
        print(f"PLANTED {root}", flush=True)""")),
    # a build output 1500 directories deep
    "deep_build": ('mkdir -p "$PERFBISECT_BUILD_DIR/deep" && cd "$PERFBISECT_BUILD_DIR/deep" && i=0 && '
                   'while [ $i -lt 1500 ]; do mkdir d && cd d || exit 1; i=$((i+1)); done', ""),
    # a FIFO, a socket and a 256 MiB sparse file in the build output
    "odd_build": ('mkdir -p "$PERFBISECT_BUILD_DIR" && echo ok > "$PERFBISECT_BUILD_DIR/lib.so" && '
                  'mkfifo "$PERFBISECT_BUILD_DIR/fifo" && truncate -s 256M "$PERFBISECT_BUILD_DIR/sparse" && '
                  'python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" '
                  '"$PERFBISECT_BUILD_DIR/sock"', ""),
}
