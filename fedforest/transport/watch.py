"""Naming a rank that dies without a word.

An exception on a rank reaches the master, which names the rank
(:mod:`.runner`).  A rank that is killed (``kill -9``, the kernel's
out-of-memory killer, a crash in native code) cannot say anything itself,
and the MPI launcher only reports a process id.  So a job rank started by a
launcher runs as two processes: a small *watcher*, the process the launcher
started, and the rank itself, its child, which does all the work (MPI is
initialised in the child only).  The watcher forwards the signals it gets to
the child and waits.  When the child ends by a signal the watcher did not
forward, it prints one line naming the rank, for example

    error: party 2 (rank 2) on host node7 died: killed by signal 9 (SIGKILL: ...); the job stops

and stops the whole job with exit code :data:`DIED` (3): under Hydra's
``mpiexec`` through the PMI connection (as ``MPI_Abort`` does; ``mpiexec``
then exits with 3); under ``srun`` by exiting with 3 itself (``srun
--kill-on-bad-exit=1`` then ends the step).  The other ranks are stopped
where they are; a training checkpoint is written atomically, so the last
complete one is what ``--resume`` continues from.

A machine that vanishes takes its watcher along: that case is left to the
launcher (``srun`` names the node) and to ``reply_timeout``.

``FEDFOREST_WATCH=0`` turns the watcher off.
"""
import os
import signal
import socket
import sys
import time

DIED = 3                    # exit code of a job whose rank died without reporting an error
ABORT_GRACE_SECONDS = 1.0   # the launcher forwards the line before the job is torn down
_FORWARD = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
_PR_SET_PDEATHSIG = 1


def launcher_rank_size(environ=None):
    """(rank, size) of this process as its launcher set them, or None outside a launched job."""
    env = os.environ if environ is None else environ
    for rank_var, size_var in (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                               ("PMIX_RANK", "SLURM_NTASKS"), ("SLURM_PROCID", "SLURM_NTASKS")):
        rank, size = env.get(rank_var, ""), env.get(size_var, "")
        if rank.isdigit() and size.isdigit():
            return int(rank), int(size)
    return None


def role_name(rank):
    return "the master (rank 0)" if rank == 0 else f"party {rank} (rank {rank})"


def _oom_kills():
    """The out-of-memory kills counted in this process's cgroup (v2), or None."""
    try:
        with open("/proc/self/cgroup") as fh:
            path = next(line.split(":", 2)[2].strip() for line in fh if line.startswith("0::"))
        with open(os.path.join("/sys/fs/cgroup", path.lstrip("/"), "memory.events")) as fh:
            for line in fh:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, StopIteration, ValueError):
        return None
    return None


def death_line(rank, signum, host=None, oom=False):
    """The one line that names a rank killed by ``signum``."""
    try:
        name = signal.Signals(signum).name
    except ValueError:
        name = f"signal {signum}"
    cause = f"killed by signal {signum} ({name}"
    if oom:
        cause += ", by the out-of-memory killer: give the job more memory or lower batch_memory_mb"
    elif signum == signal.SIGKILL:
        cause += ": kill -9, the out-of-memory killer or the batch system"
    elif signum in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT):
        cause += ": a crash in native code"
    cause += ")"
    return f"error: {role_name(rank)} on host {host or socket.gethostname()} died: {cause}; the job stops"


def _pmi_abort(code, message):
    """Ask the PMI server (Hydra's proxy, Slurm's pmi2 plugin) to end the job
    with ``code``, over the PMI-1 connection this process inherited."""
    fd = os.environ.get("PMI_FD", "")
    if not fd.isdigit() or os.environ.get("MPIR_CVAR_PMI_VERSION", "1").strip() == "2":
        return False
    if "SLURM_STEP_ID" in os.environ:
        # srun would end the step by SIGKILL and report 137: --kill-on-bad-exit keeps our code
        return False
    text = "".join(c if c.isalnum() or c in "-_.:,()" else "_" for c in message)[:200]
    try:
        os.write(int(fd), f"cmd=abort exitcode={int(code)} message={text}\n".encode("ascii"))
        return True
    except OSError:
        return False


def set_parent_death_signal():
    """Linux: this process is killed when its parent goes (the rank's child when its
    watcher goes: a launcher's SIGKILL reaches the watcher only; a worker process
    when its rank goes).  Returns whether it was set."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _write_line(text):
    try:
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def supervise(rank):
    """Fork: return in the child, which runs the rank; the parent watches it
    and never returns (it exits with the child's status)."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    oom_before = _oom_kills()
    pid = os.fork()
    if pid == 0:
        set_parent_death_signal()
        if os.getppid() != parent:      # the watcher went before the death signal was set
            os._exit(DIED)
        return
    _watch(pid, rank, oom_before)


def _watch(pid, rank, oom_before):
    forwarded = set()

    def forward(signum, _frame):
        forwarded.add(signum)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
    for name in _FORWARD:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), forward)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            os._exit(DIED)
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            break
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    signum = os.WTERMSIG(status)
    if signum in forwarded:
        # the whole job was stopped from outside (Ctrl-C, a time limit): end the same way
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)
    oom_after = _oom_kills()
    oom = oom_before is not None and oom_after is not None and oom_after > oom_before
    line = death_line(rank, signum, oom=oom)
    _write_line(line)
    time.sleep(ABORT_GRACE_SECONDS)
    if _pmi_abort(DIED, f"{role_name(rank)} died"):
        time.sleep(10)      # the launcher stops every rank, this one included
    os._exit(DIED)


def maybe_supervise():
    """Run this process as a watched rank when a launcher started it as one
    rank of several (see the module text); returns whether it did."""
    if os.environ.get("FEDFOREST_WATCH", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if not hasattr(os, "fork") or "mpi4py.MPI" in sys.modules:
        return False
    found = launcher_rank_size()
    if found is None or found[1] < 2:
        return False
    supervise(found[0])
    return True
