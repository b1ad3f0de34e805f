"""``scripts/mongo-server.sh``: MongoDB without Docker, as docs/mongodb.md "MongoDB without Docker" shows it.

The page's commands run as written, in bash, from the repository root:
start the server, run ``examples/mongodb_quickstart.py`` against the URI it
printed, stop it; afterwards nothing answers on the port and the process is
gone. The port and data folder come from the environment variables the script
documents, so the test touches neither port 27017 nor ``./.mongo-data``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mongo_server import answers_ping

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "mongo-server.sh"

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def readme_commands(heading: str) -> str:
    """The first ``bash`` block after ``heading`` in docs/mongodb.md."""
    section = (ROOT / "docs" / "mongodb.md").read_text().split(f"\n{heading}\n", 1)[1]
    start = section.index("```bash\n") + len("```bash\n")
    return section[start:section.index("```", start)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or not stat.read_text().rpartition(") ")[2].startswith("Z")


@pytest.fixture
def shell_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a user who installed datakit and nx-27017 into this Python's environment."""
    server = Path(sys.executable).parent / "nx-27017"
    if not server.exists():
        pytest.fail(f"{server} is missing: install the test extra (bash scripts/setup-env.sh test)")
    bin_dir = tmp_path / "bin"  # `python` runs this interpreter (a symlink would lose its venv)
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (bin_dir / "python").chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != "DATAKIT_MONGO_URI"}
    env.update(PATH=os.pathsep.join([str(bin_dir), str(server.parent), env.get("PATH", "")]),
               DATAKIT_MONGO_PORT=str(free_port()), DATAKIT_MONGO_DATA=str(tmp_path / "mongo-data"))
    return env


def script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_readme_commands_run_the_quickstart_against_the_script_server(shell_env):
    commands = readme_commands("## MongoDB without Docker")
    assert "scripts/mongo-server.sh start" in commands and "examples/mongodb_quickstart.py" in commands
    port, data = shell_env["DATAKIT_MONGO_PORT"], Path(shell_env["DATAKIT_MONGO_DATA"])
    try:
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=ROOT, env=shell_env,
                                capture_output=True, text=True, timeout=150)
    finally:
        script(shell_env, "stop")  # a failed run leaves no server behind
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"converted 600 images into mongodb://127.0.0.1:{port}/datakit collection=quickstart" in output
    assert "verify ok" in output and "read one epoch: 600 samples" in output
    pid = int(re.search(r"running on 127\.0\.0\.1:\d+ \(pid (\d+)", output).group(1))  # type: ignore[union-attr]
    assert "stopped (pid" in output
    assert not is_alive(pid), f"the server (pid {pid}) still runs after stop"
    assert not answers_ping(f"mongodb://127.0.0.1:{port}")
    assert not (data / "nx-27017.pid").exists() and (data / "data").is_dir()


def test_start_is_idempotent_status_tells_and_stop_stops(shell_env, tmp_path):
    port = shell_env["DATAKIT_MONGO_PORT"]
    uri_line = f"DATAKIT_MONGO_URI=mongodb://127.0.0.1:{port}/datakit\n"
    try:
        started = script(shell_env, "start")
        assert (started.returncode, started.stdout) == (0, uri_line), started.stderr
        pid = int((tmp_path / "mongo-data" / "nx-27017.pid").read_text())
        assert is_alive(pid) and answers_ping(uri_line.strip().partition("=")[2])

        again = script(shell_env, "start")
        assert (again.returncode, again.stdout) == (0, uri_line) and "already running" in again.stderr
        status = script(shell_env, "status")
        assert (status.returncode, status.stdout) == (0, uri_line), status.stderr

        elsewhere = script(shell_env, "start", str(free_port()))
        assert elsewhere.returncode == 1 and f"already running on port {port}" in elsewhere.stderr
        second = script({**shell_env, "DATAKIT_MONGO_DATA": str(tmp_path / "other")}, "start")
        assert second.returncode == 1 and "another server already answers" in second.stderr
        assert not (tmp_path / "other").exists()
    finally:
        stopped = script(shell_env, "stop")
    assert stopped.returncode == 0 and f"stopped (pid {pid})" in stopped.stderr
    assert not is_alive(pid)
    stopped_status = script(shell_env, "status")
    assert (stopped_status.returncode, stopped_status.stdout) == (3, "")
    assert script(shell_env, "stop").returncode == 0  # stopping a stopped server is no error


def test_a_port_taken_by_another_program_is_reported(shell_env):
    with socket.socket() as squatter:  # listens, but speaks no MongoDB
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        result = script(shell_env, "start", str(squatter.getsockname()[1]))
    assert result.returncode == 1 and result.stdout == ""
    assert "exited before answering" in result.stderr and "address already in use" in result.stderr
    assert script(shell_env, "status").returncode == 3
