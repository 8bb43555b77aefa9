"""gpu.mps: a batch's GPU workers as clients of an MPS control daemon (a running one, or a
private one started and stopped around the batch), with a stand-in for the driver's
``nvidia-cuda-mps-control`` (no GPU needed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from gpu import mps

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MPS is Linux's")

#: The stand-in: ``-f`` opens pipe/control and runs until a client sends "quit" (writing its
#: pid to pipe/pid); with FAIL set in the environment it exits at once instead. As the real
#: one does, a client's "quit" returns once the daemon has closed.
STAND_IN = textwrap.dedent("""\
    #!{python}
    import os, sys, time
    pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
    control, quit = os.path.join(pipe, "control"), os.path.join(pipe, "quit")
    if sys.argv[1:] == ["-f"]:
        if os.environ.get("FAIL"):
            sys.exit(1)
        open(os.path.join(pipe, "pid"), "w").write(str(os.getpid()))
        open(control, "w").close()
        while not os.path.exists(quit):
            time.sleep(0.01)
        os.remove(control)
        sys.exit(0)
    if sys.stdin.read().strip() == "quit":
        open(quit, "w").close()
        while os.path.exists(control):
            time.sleep(0.01)
""")


@pytest.fixture
def control(tmp_path, monkeypatch):
    """The stand-in as the only ``nvidia-cuda-mps-control`` on PATH, no daemon running."""
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / mps.CONTROL
    program.write_text(STAND_IN.format(python=sys.executable))
    program.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.delenv(mps.PIPE_VARIABLE, raising=False)
    monkeypatch.delenv(mps.LOG_VARIABLE, raising=False)
    monkeypatch.setattr(mps, "SYSTEM_PIPE", tmp_path / "no-system-daemon")
    temporary = tmp_path / "tmp"  # private daemons' folders, here and in child processes
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    return program


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that has exited but is not yet reaped still "exists": ask its state.
    state = Path(f"/proc/{pid}/stat")
    return state.exists() and state.read_text().split(")")[-1].split()[0] != "Z"


def test_private_daemon_started_for_the_block_and_stopped_after(control):
    notes = []
    with mps.shared_gpu(notes.append) as shared:
        pipe = Path(os.environ[mps.PIPE_VARIABLE])
        assert shared is True
        assert notes == []
        assert (pipe / "control").exists()
        assert Path(os.environ[mps.LOG_VARIABLE]).is_dir()
        assert mps.running_daemon() == pipe
        pid = int((pipe / "pid").read_text())
        assert alive(pid)
    assert mps.PIPE_VARIABLE not in os.environ
    assert mps.LOG_VARIABLE not in os.environ
    # It quits once its clients are gone (here at once), then its folder is removed.
    deadline = time.monotonic() + 10
    while (alive(pid) or pipe.parent.exists()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(pid)
    assert not pipe.parent.exists()


def test_variables_set_before_are_restored(control, monkeypatch, tmp_path):
    monkeypatch.setenv(mps.LOG_VARIABLE, "/somewhere/else")
    with mps.shared_gpu() as shared:
        assert shared
        assert os.environ[mps.LOG_VARIABLE] != "/somewhere/else"
    assert os.environ[mps.LOG_VARIABLE] == "/somewhere/else"


def test_a_running_daemon_is_used_and_left_running(control, monkeypatch, tmp_path):
    pipe = tmp_path / "their-pipe"
    pipe.mkdir()
    (pipe / "control").touch()
    monkeypatch.setenv(mps.PIPE_VARIABLE, str(pipe))
    control.unlink()  # nothing may be started
    with mps.shared_gpu() as shared:
        assert shared is True
        assert os.environ[mps.PIPE_VARIABLE] == str(pipe)
    assert os.environ[mps.PIPE_VARIABLE] == str(pipe)
    assert (pipe / "control").exists()


def test_system_daemon_found_without_variable(control, monkeypatch, tmp_path):
    pipe = tmp_path / "system"
    pipe.mkdir()
    (pipe / "control").touch()
    monkeypatch.setattr(mps, "SYSTEM_PIPE", pipe)
    with mps.shared_gpu() as shared:
        assert shared is True
        assert mps.PIPE_VARIABLE not in os.environ


def test_without_the_control_program_the_gpu_is_shared_by_turns(control):
    control.unlink()
    notes = []
    with mps.shared_gpu(notes.append) as shared:
        assert shared is False
        assert mps.PIPE_VARIABLE not in os.environ
    assert len(notes) == 1
    assert "not available" in notes[0]
    assert mps.BY_TURNS in notes[0]


def test_a_daemon_that_does_not_start_is_reported(control, monkeypatch):
    monkeypatch.setenv("FAIL", "1")
    notes = []
    before = set(Path(tempfile.gettempdir()).glob("roadtracer-mps-*"))
    with mps.shared_gpu(notes.append) as shared:
        assert shared is False
        assert mps.PIPE_VARIABLE not in os.environ
    assert len(notes) == 1
    assert "did not start" in notes[0]
    assert set(Path(tempfile.gettempdir()).glob("roadtracer-mps-*")) == before


def test_the_daemon_ends_with_a_killed_batch(control, tmp_path):
    """SIGKILL leaves no time to stop the daemon: it ends with the process that started it."""
    script = textwrap.dedent(f"""\
        import os, sys, signal, json
        sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
        from gpu import mps
        mps.SYSTEM_PIPE = mps.Path({str(tmp_path / 'none')!r})
        with mps.shared_gpu():
            print(json.dumps(os.environ[mps.PIPE_VARIABLE]), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env={**os.environ}, timeout=60)
    assert child.returncode == -signal.SIGKILL
    pipe = Path(json.loads(child.stdout.splitlines()[0]))
    pid = int((pipe / "pid").read_text())
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


@pytest.mark.gpu
def test_gpu_batch_workers_share_the_gpu_under_mps(tmp_path):
    """The batch's GPU workers as MPS clients trace what they trace by turns (and what the
    CPU backend traces); no private daemon or folder is left behind."""
    if shutil.which(mps.CONTROL) is None:
        pytest.skip(f"{mps.CONTROL} is not installed")
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, str(root / "benchmarks" / "batch_workload.py"),
                    str(tmp_path / "work"), "4"], check=True, capture_output=True)
    before = set(Path(tempfile.gettempdir()).glob("roadtracer-mps-*"))
    lines = {}
    for name, options in [("mps", ["--backend", "gpu", "--workers", "2"]),
                          ("turns", ["--backend", "gpu", "--workers", "2", "--no-mps"]),
                          ("cpu", ["--backend", "cpu", "--workers", "1"])]:
        out = tmp_path / name
        done = subprocess.run(
            [sys.executable, str(root / "main.py"), "batch", str(tmp_path / "work" / "images"),
             "--seeds", str(tmp_path / "work" / "seeds.geojson"), "-o", str(out), "-q",
             *options], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["gpu_sharing"] == (None if name == "cpu" else name)
        lines[name] = {feature["properties"]["seed"]: np.array(feature["geometry"]["coordinates"])
                       for tile in sorted(out.glob("tile*.geojson"))
                       for feature in json.loads(tile.read_text())["features"]}
    assert len(lines["mps"]) == 24
    assert lines["mps"].keys() == lines["cpu"].keys()
    for key, line in lines["mps"].items():
        assert np.array_equal(line, lines["turns"][key])
        assert line.shape == lines["cpu"][key].shape
        assert np.abs(line - lines["cpu"][key]).max() <= 0.5
    deadline = time.monotonic() + 10
    while set(Path(tempfile.gettempdir()).glob("roadtracer-mps-*")) != before:
        assert time.monotonic() < deadline, "the private MPS daemon's folder is left behind"
        time.sleep(0.1)


def test_no_sharing_note_when_the_batch_does_not_trace_on_the_gpu(control, monkeypatch, tmp_path,
                                                                   capsys):
    """A batch that might have used the GPU (``--backend auto`` where pycuda is installed) but
    traces on the CPU says nothing of how GPU workers would share it."""
    import cli.batch_cmd
    from cli import main as cli_main

    control.unlink()  # MPS unavailable: the note it would give must not be told
    monkeypatch.setattr(cli.batch_cmd, "gpu_likely", lambda backend: True)
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, str(root / "benchmarks" / "batch_workload.py"),
                    str(tmp_path / "work"), "2"], check=True, capture_output=True)
    out = tmp_path / "out"
    code = cli_main(["batch", str(tmp_path / "work" / "images"), "--seeds",
                     str(tmp_path / "work" / "seeds.geojson"), "-o", str(out),
                     "--backend", "cpu", "--workers", "2"])
    assert code == 0
    assert "MPS" not in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["gpu_sharing"] is None
