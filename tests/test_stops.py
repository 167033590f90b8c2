"""Ctrl-C on a job: one line per rank and nothing from the encryption worker
processes (they ignore the signal; their rank ends them), and the master's
line tells the truth about the checkpoint: ``--resume`` only where one
exists."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from fedforest.errors import NOTHING_SAVED, RemoteError, Stopped
from fedforest.vertical import model_files

from _util import ROOT, find_mpiexec
from test_dead_rank import (_cmdline, _environ, _rank_watcher, _rank_worker, _trees_saved, demo,  # noqa: F401
                            start_long_network_job)

MARK = "FEDFOREST_TEST_STOP"
LINE = re.compile(r"rank (\d+): stopped by SIGINT \(Ctrl-C\)\.( .*)?")


def _workers(mark):
    """The encryption worker processes of the job marked ``mark``."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and "spawn_main" in _cmdline(int(p))
            and _environ(int(p)).get(MARK.encode()) == mark.encode()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
def test_ctrl_c_while_the_workers_encrypt_prints_one_line_per_rank(demo, mode):
    """The forest with Paillier labels in the hidden instance space (its
    workers make the randomness of every level's slotted rows; the demo's
    426 labels of the shared space are encrypted in the rank, without
    workers) and boosting (encrypted by default: the workers make each
    round's randomness): Ctrl-C reaches every process of the terminal's group
    while the workers run.  Before: the ranks' lines spliced into 43-62 lines of
    the workers' tracebacks, and "--resume" advised where no checkpoint was."""
    job = demo / "job.toml"
    if mode == "vertical_boost":
        job.write_text(job.read_text().replace("[forest]", "[boost]"))
    flags = ["--mode", mode, "--encrypt-workers", "2", "--progress", "false"]
    if mode == "vertical":
        flags += ["--label-privacy", "paillier", "--instance-space", "hidden"]
    mark = str(demo)
    proc = subprocess.Popen([find_mpiexec(), "-n", "3", sys.executable, "-m", "fedforest", "train", "--config",
                             str(job), *flags], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONUNBUFFERED="1", **{MARK: mark}), start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not _workers(mark):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the workers never started"
            time.sleep(0.02)
        time.sleep(0.3)     # the workers import their modules (a Ctrl-C there was a traceback each)
        os.killpg(proc.pid, signal.SIGINT)          # what a terminal's Ctrl-C does
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    said = {}
    for line in lines:
        m = LINE.fullmatch(line)
        assert m, f"not a rank's stop line: {line!r}\n{err}"
        assert m.group(1) not in said, f"rank {m.group(1)} spoke twice:\n{err}"
        said[m.group(1)] = m.group(2) or ""
    assert "0" in said, err
    assert all(note == "" for rank, note in said.items() if rank != "0"), err    # a party knows no checkpoint
    saved = _trees_saved(str(demo / "model"))
    if saved:       # boosting may have stored a round by the time the signal came
        assert said["0"].startswith(" The last complete checkpoint holds "), err
        assert "--resume" in said["0"]
    else:
        assert said["0"] == " Nothing was saved: the job stopped before its first checkpoint; run the same " \
                            "command again.", err
        assert "--resume" not in err
    # the workers went with their ranks
    deadline = time.monotonic() + 10
    while _workers(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _workers(mark)


def test_the_stop_line_advises_resume_only_from_a_checkpoint(tmp_path):
    folder = str(tmp_path / "master")
    with pytest.raises(Stopped) as info:
        with model_files.kept_on_stop(folder, 10):
            raise KeyboardInterrupt
    assert info.value.kept == NOTHING_SAVED
    assert info.value.line(0) == ("rank 0: stopped by SIGINT (Ctrl-C). Nothing was saved: the job stopped before "
                                  "its first checkpoint; run the same command again.")
    model_files.write_manifest(folder, {"n_trees": 4})
    with pytest.raises(Stopped) as info:
        with model_files.kept_on_stop(folder, 10):
            raise Stopped("SIGTERM")
    assert info.value.line(0) == (f"rank 0: stopped by SIGTERM. The last complete checkpoint holds 4 of 10 trees "
                                  f"in {folder}: run the job again with --resume to continue from it.")
    # a party stopped by a signal: the master learns what the checkpoint holds for its line
    with pytest.raises(RemoteError) as info:
        with model_files.kept_on_stop(folder, 5, "rounds", 2):
            raise RemoteError(2, "Stopped", "stopped by SIGTERM", "")
    assert info.value.kept == f"2 of 5 rounds in {folder}"
    # what a rank does not know, it does not advise
    assert Stopped("SIGTERM").line(1) == "rank 1: stopped by SIGTERM."
    # any other failure passes untouched
    with pytest.raises(ValueError):
        with model_files.kept_on_stop(folder, 10):
            raise ValueError("x")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_signal_to_one_rank_while_it_starts_reaches_the_master(demo):
    """SIGTERM to party 2 alone (``scancel`` of one task) while it starts: it
    tells the master, which names it and ends the job.  Before: party 2 ended
    by itself before the job and the other ranks waited for it forever."""
    job = str(demo / "job.toml")
    proc = subprocess.Popen([find_mpiexec(), "-n", "3", sys.executable, "-m", "fedforest", "train", "--config", job,
                             "--label-privacy", "plain", "--progress", "false"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _rank_worker(job, 2):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "rank 2 never started"
            time.sleep(0.01)
        os.kill(_rank_watcher(job, 2)[0], signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the job hung after rank 2 was stopped\n{out}\n{err}")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, out + err
    assert "Traceback" not in err, err
    assert "error on rank 2: stopped by SIGTERM; the job stops. Nothing was saved: the job stopped before its first " \
           "checkpoint; run the same command again." in err, err


def test_ctrl_c_on_a_network_job_prints_one_line_per_process(tmp_path):
    """serve and join stopped by Ctrl-C: one line each (was a traceback from the
    master and two lines from each party)."""
    procs = []
    try:
        start_long_network_job(tmp_path, procs)
        for p in procs:
            p.send_signal(signal.SIGINT)
        ended = [(*p.communicate(timeout=60), p.returncode) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for _out, err, code in ended:
        assert code == 130 and "Traceback" not in err, err
        lines = err.strip().splitlines()
        # a party may hear the master's stop before its own Ctrl-C (the signals race): either line
        assert len(lines) == 1 and re.fullmatch(r"(rank \d: )?stopped by SIGINT \(Ctrl-C\)\..*|error: party '\w+': "
                                                r"the master \(.*\) stopped the job \(exit code 130\)", lines[0]), err
    assert ended[0][1].startswith("rank 0: stopped by SIGINT (Ctrl-C). ")      # the master says what was saved
