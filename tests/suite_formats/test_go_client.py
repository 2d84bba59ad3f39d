"""The Go client's ImportSuite against a live server (clients/go/trajgrade/import_suite_test.go)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from client.conftest import ThreadedServer, free_port

GO_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "go"


def test_go_client_imports_an_orbit_suite_and_grades_with_it() -> None:
    go = shutil.which("go")
    assert go is not None, "the Go toolchain is required for the Go client test"
    server = ThreadedServer(f"127.0.0.1:{free_port()}").start()
    try:
        done = subprocess.run(
            [go, "test", "-count=1", "-run", "TestImportSuiteLive", "./trajgrade"],
            cwd=GO_CLIENT,
            env={**os.environ, "TRAJGRADE_TARGET": server.target},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in done.stdout
