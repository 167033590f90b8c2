"""A rank killed with ``kill -9`` in the middle of training is named, in one
line, within seconds: under mpiexec by the rank's watcher (exit code 3, and
the checkpoint continues with --resume), over TCP by the master."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from fedforest.transport import watch

from _util import ROOT, find_mpiexec, mpirun

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "transport"))


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
    except OSError:
        return {}


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _parent(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _rank_worker(marker, rank):
    """The pid of the process doing the work of ``rank`` (the watcher's child)."""
    mine = [int(p) for p in os.listdir("/proc") if p.isdigit() and marker in _cmdline(int(p))
            and _environ(int(p)).get(b"PMI_RANK") == str(rank).encode()]
    return [p for p in mine if _parent(p) in mine]


def _trees_saved(model_dir):
    try:
        with open(os.path.join(model_dir, "master", "manifest.json")) as fh:
            return json.load(fh).get("n_trees", 0)
    except (OSError, ValueError):
        return 0


# the demo's job with plain labels: the test is about a dead rank, not about encryption
FLAGS = ["--n-estimators", "300", "--batch-memory-mb", "1", "--progress", "false", "--label-privacy", "plain"]


def _long_training(demo):
    """A 300-tree demo training under mpiexec, returned once its first checkpoint is on disk."""
    job = str(demo / "job.toml")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([find_mpiexec(), "-n", "3", sys.executable, "-m", "fedforest", "train",
                             "--config", job, *FLAGS], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while _trees_saved(str(demo / "model")) == 0 and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(proc.communicate())
        time.sleep(0.05)
    return job, FLAGS, proc


@pytest.fixture
def demo(tmp_path):
    out = tmp_path / "demo"
    subprocess.run([sys.executable, "-m", "fedforest", "demo-data", "--out", str(out)], check=True,
                   capture_output=True, timeout=120)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_mpi_party_killed_is_named_and_training_resumes(demo):
    job, flags, proc = _long_training(demo)
    try:
        workers = _rank_worker(job, 2)
        assert len(workers) == 1, workers
        os.kill(workers[0], signal.SIGKILL)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - killed < 10
    assert proc.returncode == watch.DIED == 3, out + err
    lines = [line for line in err.splitlines() if "died" in line]
    assert lines == [f"error: party 2 (rank 2) on host {socket.gethostname()} died: killed by signal 9 "
                     "(SIGKILL: kill -9, the out-of-memory killer or the batch system); the job stops"], err
    assert "BAD TERMINATION" not in out + err
    # the last checkpoint is whole: --resume finishes the forest
    saved = _trees_saved(str(demo / "model"))
    assert 0 < saved < 300
    done = mpirun(3, ["train", "--config", job, "--resume", *flags], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"resuming from checkpoint: {saved} of 300 trees" in done.stdout
    assert _trees_saved(str(demo / "model")) == 300


def test_a_watched_rank_passes_its_exit_code_through_and_slurm_without_pmi_is_explained(demo):
    """srun without a PMI plugin: each task is a world of 1; the message says so
    (not "start it with mpiexec"), once, and the job exits 2 through the watcher."""
    env = dict(os.environ, SLURM_NTASKS="3", SLURM_PROCID="0", PYTHONUNBUFFERED="1")
    for var in ("PMI_RANK", "PMI_SIZE", "PMI_FD", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"):
        env.pop(var, None)
    run = subprocess.run([sys.executable, "-m", "fedforest", "train", "--config", str(demo / "job.toml")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Slurm started 3 tasks, but MPI sees each as a job of 1 rank: PMI is not connected" in run.stderr
    assert "srun --mpi=pmi2" in run.stderr and "start it with mpiexec" not in run.stderr
    assert run.stderr.count("error:") == 1
    # outside Slurm the usual advice stays
    env.pop("SLURM_NTASKS")
    env.pop("SLURM_PROCID")
    run = subprocess.run([sys.executable, "-m", "fedforest", "train", "--config", str(demo / "job.toml")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "start it with mpiexec -n 3" in run.stderr, run.stderr


def test_the_death_line_and_the_launcher_variables():
    assert watch.launcher_rank_size({"PMI_RANK": "2", "PMI_SIZE": "3"}) == (2, 3)
    assert watch.launcher_rank_size({"SLURM_PROCID": "1", "SLURM_NTASKS": "4"}) == (1, 4)
    assert watch.launcher_rank_size({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}) == (0, 2)
    assert watch.launcher_rank_size({}) is None
    assert watch.death_line(0, 11, host="n1") == (
        "error: the master (rank 0) on host n1 died: killed by signal 11 (SIGSEGV: a crash in native "
        "code); the job stops")
    assert "by the out-of-memory killer" in watch.death_line(2, 9, host="n1", oom=True)


def test_a_killed_process_under_a_watcher_is_named(tmp_path):
    """The watcher alone (no launcher): the child is killed, the watcher names the rank."""
    script = ("import os, signal, sys\n"
              "from fedforest.transport import watch\n"
              "watch.supervise(4)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    env = dict(os.environ)
    env.pop("PMI_FD", None)
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 3
    assert time.monotonic() - start < 10
    assert re.fullmatch(r"error: party 4 \(rank 4\) on host \S+ died: killed by signal 9 \(SIGKILL[^)]*\); "
                        r"the job stops\n", run.stderr), run.stderr


def start_long_network_job(tmp_path, procs):
    """A 400-tree forest over TCP (``serve`` and two ``join``), its processes
    appended to ``procs`` (the master first), returned once both parties joined."""
    from test_tcp import HOLDER, PLAIN, PLAIN_OK, _port, _start, write_job, write_party   # tests/transport/test_tcp.py
    import numpy as np
    from fedforest.crypto.identity import keygen
    from _util import party_frames
    keys = {name: keygen(str(tmp_path / "keys"), name) for name in ("master", "p1", "p2")}
    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 6))
    y = (X[:, 0] + X[:, 1] * X[:, 3] > 0).astype(int)
    frames = party_frames(X, y, [[0, 2, 4], [1, 3, 5]])
    job = write_job(str(tmp_path), keys, forest=f"tree_batch = 1\n{PLAIN}")
    with open(job) as fh:
        text = fh.read().replace("n_estimators = 3\n", "n_estimators = 400\n")
    with open(job, "w") as fh:
        fh.write(text)
    master = _start(["serve", "--config", job])
    procs.append(master)
    port = _port(master)
    procs += [_start(["join", "--config", write_party(str(tmp_path), keys, n, f, port,
                                                      **(dict(job=HOLDER, policy=PLAIN_OK) if n == "p1" else {}))])
              for n, f in zip(("p1", "p2"), frames)]
    joined = 0
    while joined < 2:
        line = master.stdout.readline()
        assert line, master.stderr.read()
        joined += " joined from " in line
    time.sleep(1.0)


def test_tcp_party_killed_is_named_by_the_master(tmp_path):
    everyone = []
    try:
        start_long_network_job(tmp_path, everyone)
        master, procs = everyone[0], everyone[1:]
        assert master.poll() is None
        procs[1].send_signal(signal.SIGKILL)
        killed = time.monotonic()
        out, err = master.communicate(timeout=60)
        ended = time.monotonic()
        p1 = procs[0].communicate(timeout=60)
    finally:
        for p in everyone:
            if p.poll() is None:
                p.kill()
    assert ended - killed < 10
    assert master.returncode == 3, err
    assert re.search(r"error: party 'p2' \(rank 2\) on host 127\.0\.0\.1 (closed|dropped) the connection.* "
                     r"during the job: its process died or was stopped", err), err
    assert procs[0].returncode == 3 and "stopped the job (exit code 3)" in p1[1], p1


def _rank_watcher(marker, rank):
    """The pid of the process the launcher started for ``rank`` (the watcher)."""
    mine = [int(p) for p in os.listdir("/proc") if p.isdigit() and marker in _cmdline(int(p))
            and _environ(int(p)).get(b"PMI_RANK") == str(rank).encode()]
    return [p for p in mine if _parent(p) not in mine]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signum,name", [(signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT (Ctrl-C)")])
def test_a_signal_to_every_rank_ends_the_job_with_one_line_per_rank(demo, signum, name):
    """What Slurm does at a time limit (SIGTERM to every task) or a terminal's
    Ctrl-C: a rank says in one line that it stopped and what the folder keeps
    (the master always), no traceback, no half-written file, and --resume
    finishes the forest."""
    job, flags, proc = _long_training(demo)
    try:
        watchers = [_rank_watcher(job, r) for r in range(3)]
        assert all(len(w) == 1 for w in watchers), watchers
        for w in watchers:
            os.kill(w[0], signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in err, err
    # one line per rank at most (the launcher may end a party before its output is passed on);
    # the master's line always
    stopped = [line for line in err.splitlines() if "stopped by" in line]
    saved = _trees_saved(str(demo / "model"))
    assert 0 < saved < 300
    # the master says what its last complete checkpoint holds; a party, which does not know, only that it stopped
    want = {r: f"rank {r}: stopped by {name}." for r in range(1, 3)}
    want[0] = (f"rank 0: stopped by {name}. The last complete checkpoint holds {saved} of 300 trees in "
               f"{demo / 'model' / 'master'}: run the job again with --resume to continue from it.")
    assert want[0] in stopped and len(stopped) == len(set(stopped)) and set(stopped) <= set(want.values()), err
    assert proc.returncode != 0
    assert not list((demo / "model").rglob(".tmp-*")), "a file half-written at the signal stayed"
    done = mpirun(3, ["train", "--config", job, "--resume", *flags], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _trees_saved(str(demo / "model")) == 300


def test_bad_input_ends_every_rank_by_itself_with_exit_2(demo, tmp_path):
    """No MPI_Abort for refused input: every rank exits 2 itself, which is what
    srun reports as the job's exit code (an abort would show as tasks killed)."""
    bad = demo / "bad.toml"
    bad.write_text((demo / "job.toml").read_text().replace('label_column = "diagnosis"',
                                                          'label_column = "nope"'))
    codes = tmp_path / "codes"
    codes.mkdir()
    script = f'"$0" -m fedforest train --config {bad}; rc=$?; echo $rc > {codes}/rank$PMI_RANK; exit $rc'
    run = subprocess.run([find_mpiexec(), "-n", "3", "sh", "-c", script, sys.executable], cwd=ROOT,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"), capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "MPI_Abort" not in run.stderr and "BAD TERMINATION" not in run.stdout + run.stderr
    assert run.stderr.strip().splitlines() == [
        "error: label_column: 'nope' must be held by exactly one party, found on no party"], run.stderr
    assert {p.name: p.read_text().strip() for p in codes.iterdir()} == {f"rank{r}": "2" for r in range(3)}
