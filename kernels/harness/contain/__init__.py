"""Containment of repository code in one place: how a build or a trial starts contained, is
waited for with limits, has its whole tree or namespace killed, and is torn down. The worker's
sandbox (workers/sandbox.py: slots, uids, settings) and the harness's launcher (launch.py: which
fork server serves a trial) both go through it; nothing else starts repository code
(tests/test_layering.py checks that workers/ and the rest of the harness start no process).

    process.py     Containment (cgroup, uid, rlimits, wrapper, umask, death with the parent),
                   popen (the one Popen), Subprocess, Supervised, supervise (wait with a
                   deadline and a stop check, then kill the tree and end it), run_captured (probes)
    bwrap.py       the bubblewrap command line of a slot (View: writable paths, network, devices,
                   tmpfs sizes, a trial's view, capabilities), the slot's GPU nodes, the host probe
    cgroup.py      a delegated cgroup v2 directory prepared, a slot's cgroup made with its limits
    forkserver.py  the fork server's client: ForkServer (started under a Containment, as the
                   namespace's init under bwrap), ForkedTrial (a Supervised process), stale dirs
    zygote.py      the fork server itself (python -m ...contain.zygote), forking one child per trial
    trialview.py   a forked trial's own mount view of its slot, then no capability
    teardown.py    the server, as init, kills its namespace's other processes and empties /tmp,
                   /dev/shm and System V IPC after each trial
    tree.py        the worker's side of a tree: subreaper, marker, kill_tree, kill_marked, reaping

/proc is read only through kernels/harness/procfs.py. Only the standard library: kernels/ imports
no service code, so the policy (which uid, which limits, from the settings) is the worker's. This
package's __init__ imports nothing, so that `python -m ...contain.zygote` starts without it.
"""
