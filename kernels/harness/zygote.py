"""A fork server for trials: one interpreter that has imported torch, forking one fresh child
per trial, so a trial skips the interpreter start and the torch import (2-4 s of each trial).

    python -m perfbisect.kernels.harness.zygote SOCKET      the server (started by launch.ForkServer)

The server imports torch and triton only: it never initialises CUDA (a CUDA context does not
survive fork) and never imports the measured repository, so every child starts with a clean
module state for the target package and makes its own CUDA context. A child is a new session
(its own process group, killable as a whole), with the trial's environment, working directory,
sys.path and argv; it runs kernels.harness.__main__ and reports its exit code.

Protocol, one Unix-socket connection per trial: the client sends one JSON line
{argv, cwd, env, sys_path, log}; the server answers {"pid": N} and the child, when done,
{"exit": code}. A child killed before it answers closes the connection (EOF).
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import sys
import traceback

# What the server imports before forking: the frameworks and the harness itself, never the
# measured repository. Names that are not installed (triton on a CPU box) are skipped.
PRELOAD = ("torch", "numpy", "triton", "perfbisect.kernels.harness.trial")
IDLE_POLL_S = 1.0


def preloaded_roots() -> set[str]:
    """Top-level names a repository must not shadow for a forked child to be equivalent to a
    fresh interpreter (the child would see the server's module, not the repository's)."""
    return {name.split(".")[0] for name in PRELOAD}


def _preload() -> list[str]:
    loaded = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except ImportError:
            continue
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # pragma: no cover - a bug, not a state
        raise RuntimeError("CUDA was initialised in the fork server; its children could not use it")
    return loaded


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall((json.dumps(message) + "\n").encode())


def _read_request(conn: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("client closed before sending a request")
        data += chunk
    return json.loads(data)


def _run_child(conn: socket.socket, listener: socket.socket, request: dict) -> None:
    """In the forked child: become the trial's process, run the harness, report, exit."""
    code = 1
    try:
        listener.close()
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores it; subprocess needs it
        log_fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[:] = request["sys_path"]
        sys.argv[:] = request["argv"]
        importlib.invalidate_caches()
        from perfbisect.kernels.harness.__main__ import main
        code = main(request["argv"][1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            _send(conn, {"exit": code})
        finally:
            os._exit(code)


def serve(socket_path: str) -> None:
    loaded = _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(16)
    listener.settimeout(IDLE_POLL_S)
    print(json.dumps({"ready": True, "pid": os.getpid(), "preloaded": loaded, "sys_path": sys.path}),
          flush=True)
    while os.getppid() == parent:  # the worker that started us is gone: stop
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(10)
            try:
                request = _read_request(conn)
            except (OSError, ValueError):
                continue
            pid = os.fork()
            if pid == 0:
                _run_child(conn, listener, request)
            try:
                _send(conn, {"pid": pid})
            except OSError:  # the client left; the child still runs and is reaped
                continue


if __name__ == "__main__":
    serve(sys.argv[1])
