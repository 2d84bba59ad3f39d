"""A Ray cluster of separate nodes on this machine (`ray start --head` plus `ray start
--address` workers), for the Ray engine's tests and benchmark; ended by process, never by
`ray stop` (which ends every Ray on the machine)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
# `ray start` waits for its node to register; a loaded 2-core machine can take a while, and
# a start that missed Ray's own deadline is cleaned up and tried again.
START_TIMEOUT = 180
START_ATTEMPTS = 3


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _names(proc: Path, temp_dir: str) -> bool:
    """Whether process `proc` (/proc/PID) belongs to the cluster in temp_dir: its command line
    or environment (RAY_AUTH_TOKEN_PATH, inherited) or an open file names the temp dir."""
    needle = temp_dir.encode()
    with contextlib.suppress(OSError):
        if needle in (proc / "cmdline").read_bytes() or needle in (proc / "environ").read_bytes():
            return True
        return any(temp_dir in os.readlink(fd) for fd in (proc / "fd").iterdir())
    return False


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a process, None once it is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        # /proc/PID/stat is "pid (comm) state ppid ...", and comm may hold spaces.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    return None


def _parents() -> dict[int, int]:
    return {
        int(proc.name): stat[1]
        for proc in Path("/proc").iterdir()
        if proc.name.isdigit() and (stat := _stat(int(proc.name))) is not None
    }


def _descendants(parents: dict[int, int], roots: set[int]) -> set[int]:
    found = set(roots)
    while grown := {pid for pid, parent in parents.items() if parent in found} - found:
        found |= grown
    return found


def kill_ray_children() -> None:
    """End the Ray processes this process started (a local Ray whose start timed out): its
    descendants whose command line is Ray's (a binary of the ray package, or `ray::...`)."""
    parents = _parents()
    for pid in _descendants(parents, {os.getpid()}) - {os.getpid()}:
        with contextlib.suppress(OSError):
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"/ray/" in command or command.startswith(b"ray::"):
                os.kill(pid, signal.SIGKILL)


def _kill(temp_dir: str) -> None:
    """End this cluster's processes (see _names) and their descendants (Ray's agents and
    workers rename themselves), by pid."""
    parents = _parents()
    mine = os.getpid()
    roots = {pid for pid in parents if pid != mine and _names(Path(f"/proc/{pid}"), temp_dir)}
    found = _descendants(parents, roots)
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        (stat := _stat(pid)) is not None and stat[0] != "Z" for pid in found
    ):
        time.sleep(0.1)


def _ray_start(env: dict[str, str], cpus: int, *args: str) -> None:
    subprocess.run(
        [RAY, "start", f"--num-cpus={cpus}", "--node-ip-address=127.0.0.1",
         "--disable-usage-stats", *args],
        check=True,
        capture_output=True,
        timeout=START_TIMEOUT,
        env={**os.environ, **env},
    )  # fmt: skip


def alive_nodes(env: dict[str, str]) -> int:
    """Nodes alive in the cluster of `env` (asked from a separate driver process)."""
    probe = (
        "import ray; ray.init(log_to_driver=False, logging_level='warning'); "
        "print(sum(1 for n in ray.nodes() if n['Alive']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        env={**os.environ, **env},
    )
    return int(done.stdout.split()[-1])


@contextlib.contextmanager
def local_cluster(workers: int = 1, cpus: int = 1) -> Iterator[dict[str, str]]:
    """A head node and `workers` worker nodes, `cpus` CPUs each, on 127.0.0.1; yields what a
    driver's environment needs: RAY_ADDRESS and Ray's token authentication (on by default
    for a head started here since Ray 2.59, so every node and driver gets the same token)."""
    # A short temp dir: Ray's Unix socket paths under it must stay within 107 bytes.
    temp_dir = tempfile.mkdtemp(prefix="tgray")
    token = Path(temp_dir) / "auth_token"
    token.write_text(secrets.token_hex(32), encoding="utf-8")
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    try:
        for attempt in range(1, START_ATTEMPTS + 1):
            port = _free_port()
            env = {**auth, "RAY_ADDRESS": f"127.0.0.1:{port}"}
            try:
                _ray_start(
                    auth, cpus, "--head", f"--port={port}", f"--temp-dir={temp_dir}",
                    "--include-dashboard=false",
                )  # fmt: skip
                for _ in range(workers):
                    _ray_start(
                        auth, cpus, f"--address={env['RAY_ADDRESS']}", f"--temp-dir={temp_dir}"
                    )
                deadline = time.monotonic() + START_TIMEOUT
                while alive_nodes(env) < workers + 1:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{workers} worker node(s) never joined")
                    time.sleep(1)
                break
            except (subprocess.SubprocessError, TimeoutError):
                _kill(temp_dir)
                if attempt == START_ATTEMPTS:
                    raise
        yield env
    finally:
        _kill(temp_dir)
        shutil.rmtree(temp_dir, ignore_errors=True)
