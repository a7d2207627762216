"""The sandbox's command line without running it: which GPU device nodes a slot gets, and the
flags every sandbox has (tests/test_hostile.py runs real ones)."""

from __future__ import annotations

from perfbisect.kernels.harness.contain import bwrap as namespaces


def test_a_worker_pinned_to_one_nvidia_gpu_binds_only_that_gpus_node(monkeypatch):
    monkeypatch.setattr(namespaces, "nvidia_minors", lambda: [0, 1, 2, 3])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    nodes = namespaces.gpu_nodes(present=lambda path: path != "/dev/kfd")
    assert nodes == ("/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert len(namespaces.gpu_nodes(present=lambda path: path != "/dev/kfd")) == 4 + 3  # unpinned: every GPU


def test_a_pinned_worker_names_its_gpu_by_uuid_inside_the_sandbox(monkeypatch):
    """Only GPU 2's node exists in there: index 2 may name nothing; its UUID names it either way."""
    monkeypatch.setattr(namespaces, "nvidia_gpus", lambda: [(0, "GPU-a"), (1, "GPU-b"), (5, "GPU-c"), (3, "GPU-d")])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert namespaces.gpu_env() == {"CUDA_VISIBLE_DEVICES": "GPU-c"}
    assert namespaces.gpu_nodes(present=lambda path: path != "/dev/kfd")[0] == "/dev/nvidia5"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert namespaces.gpu_env() == {}  # unpinned: every GPU, as the worker sees them


def test_an_amd_worker_gets_kfd_and_its_render_node_only(monkeypatch):
    monkeypatch.setattr(namespaces, "nvidia_minors", lambda: [])
    monkeypatch.setattr(namespaces, "render_nodes", lambda: ["/dev/dri/renderD128", "/dev/dri/renderD129"])
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert namespaces.gpu_nodes(present=lambda path: True) == ("/dev/kfd", "/dev/dri/renderD129")


def test_every_sandbox_is_without_network_and_dies_with_the_worker():
    view = namespaces.View(writable=("/srv/slot-0",), devices=("/dev/nvidia2",))
    args = namespaces.argv(view, chdir="/srv/slot-0/worktree")
    for flag in ("--unshare-net", "--unshare-pid", "--unshare-user", "--die-with-parent", "--disable-userns"):
        assert flag in args
    pairs = list(zip(args, args[1:]))
    assert ("--bind", "/srv/slot-0") in pairs and ("--dev-bind", "/dev/nvidia2") in pairs
    assert not any(a == "--bind" and b in ("/", "/var", "/run", "/root", "/home") for a, b in pairs)
    assert "--unshare-net" not in namespaces.argv(namespaces.View(writable=(), network=True))


def test_the_interpreters_import_dirs_show_inside_even_under_tmp_but_never_the_home(monkeypatch, tmp_path, home):
    """On the H200's stock image the service stack was carried in a PYTHONPATH directory under
    /tmp, which the sandbox's private /tmp hid: every trial failed 'the fork server did not
    start'. Import directories are bound after the tmpfs; the service's home and the
    directories above it (a worker's cwd on sys.path) are not."""
    import sys

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(site), str(home), str(home.parent), "/"])
    paths = namespaces.readonly_paths(str(home))
    assert str(site.resolve()) in paths
    assert str(home.resolve()) not in paths and str(home.parent.resolve()) not in paths and "/" not in paths
    args = namespaces.argv(namespaces.View(writable=(), devices=(), network=False, private=str(home)))
    assert args.index("/tmp") < args.index(str(site.resolve()))
