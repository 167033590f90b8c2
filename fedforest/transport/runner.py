"""Running one rank of a job with failure handling shared by all transports."""
import re
import sys
import time
import traceback

from ..errors import InputError, RemoteError, Stopped, checkpoint_note
from .base import JobAborted, JobStopped


def run_rank(comm, master_fn, party_fn, results=None):
    """Party side: run ``party_fn``; on failure report to the master and wait to be stopped."""
    try:
        out = party_fn(comm)
        comm.raw.flush()
        if results is not None:
            results[comm.rank] = out
        return out
    except JobStopped as stop:
        raise SystemExit(stop.code) from None
    except JobAborted:
        return None
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the master
        stopped = Stopped.of(exc)
        if stopped is not None:
            # a signal (the whole job usually gets it): one line, and the master learns it too
            stopped.say(comm.rank)
            try:
                comm.report_error(stopped)
                # the master, busy in a kernel when the signal came, says its own line and
                # stops the job; exiting first would let the launcher kill it mid-sentence
                comm.wait_for_stop(timeout=STOP_WAIT_SECONDS)
            except BaseException:  # noqa: BLE001 - the master may be gone already
                pass
            raise SystemExit(stopped.exit_code) from None
        try:
            comm.report_error(exc)
            comm.wait_for_stop()
        except JobStopped as stop:
            raise SystemExit(stop.code) from None
        except JobAborted:
            return None
        return None


INPUT_ERRORS = ("InputError", "PartialTreeMismatch")
STOP_WAIT_SECONDS = 10.0   # a stopped party waits this long for the master to end the job
ABORT_GRACE_SECONDS = 1.0
MISSING_MODULE = re.compile(r"No module named '([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)'")
# modules whose pip distribution has another name
DISTRIBUTIONS = {"sklearn": "scikit-learn", "xgboost": "xgboost-cpu", "yaml": "pyyaml", "PIL": "pillow"}


def _extras_of(distribution):
    """The extras of fedforest's installed metadata that list ``distribution``
    (none when fedforest's own requirements list it), or None when no
    requirement names it."""
    from importlib import metadata
    try:
        requires = metadata.requires("fedforest") or []
    except metadata.PackageNotFoundError:
        return None
    name = re.compile(r"[-_.]+")
    want = name.sub("-", distribution).lower()
    extras, found = [], False
    for req in requires:
        head, _, marker = req.partition(";")
        if name.sub("-", re.split(r"[\s<>=!~\[(]", head.strip(), maxsplit=1)[0]).lower() != want:
            continue
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if extra is None:
            return []
        found = True
        extras.append(extra.group(1))
    return extras if found else None


def missing_module_line(rank, module):
    """The one line of a rank (None: a local command) that could not import
    ``module``: what to install (the extra of setup.cfg where an optional
    feature needs it)."""
    top = module.split(".")[0]
    if top == "fedforest":
        how = "the fedforest installation is incomplete: pip install --force-reinstall fedforest"
    else:
        distribution = DISTRIBUTIONS.get(top, top)
        extras = _extras_of(distribution)
        named = [e for e in extras or () if e not in ("all", "test")]
        how = f"pip install 'fedforest[{named[0]}]'" if named else f"pip install {distribution}"
    return ("" if rank is None else f"rank {rank}: ") + f"the module {module!r} is missing: {how}"


def describe_failure(exc, verbose=False):
    """What the master prints when the job fails."""
    if isinstance(exc, RemoteError):
        if exc.exc_type in INPUT_ERRORS + ("Stopped",) and not verbose:   # one line, no traceback
            return f"error on rank {exc.rank}: {exc.remote_message}"
        missing = MISSING_MODULE.fullmatch(exc.remote_message or "")
        if exc.exc_type == "ModuleNotFoundError" and missing and not verbose:
            return f"error: {missing_module_line(exc.rank, missing.group(1))}"
        return f"error on rank {exc.rank}: {exc.exc_type}: {exc.remote_message}\n" \
               f"--- traceback from rank {exc.rank} ---\n{exc.remote_traceback}"
    if isinstance(exc, InputError) and not verbose:
        return f"error: {exc}"
    if isinstance(exc, ModuleNotFoundError) and exc.name and not verbose:
        return f"error: {missing_module_line(0, exc.name)}"
    return "error on rank 0 (master):\n" + "".join(
        traceback.format_exception(type(exc), exc, exc.__traceback__))


def run_master(comm, master_fn, verbose=lambda: False):
    """Master side under MPI: run ``master_fn``; on failure print the cause (with
    tracebacks when ``verbose()``) and stop every rank with a non-zero exit code."""
    try:
        out = master_fn(comm)
        comm.raw.flush(poll=comm._poll_errors)
        return out
    except BaseException as exc:  # noqa: BLE001
        code = 2 if isinstance(exc, InputError) or (
            isinstance(exc, RemoteError) and exc.exc_type in INPUT_ERRORS) else 1
        stopped = Stopped.of(exc)
        if stopped is not None:
            code = stopped.exit_code
            stopped.say(0)
        elif isinstance(exc, RemoteError) and exc.exc_type == "Stopped":
            code = Stopped(exc.remote_message.replace("stopped by ", "", 1)).exit_code
            note = checkpoint_note(getattr(exc, "kept", None))
            print(f"error on rank {exc.rank}: {exc.remote_message}; the job stops." + (f" {note}" if note else ""),
                  file=sys.stderr, flush=True)
        else:
            print(describe_failure(exc, verbose()), file=sys.stderr, flush=True)
        if comm.raw.cooperative_stop and comm.stop_parties(code):
            # every party confirmed and ends with the same code (a stopped party waits for
            # this): no MPI_Abort, so the launcher and a batch system (srun) report the
            # job's own exit code, not a kill
            raise SystemExit(code)
        # MPI_Abort tears the job down at once: give the launcher a moment to
        # forward what was just printed before it kills the output channels
        time.sleep(ABORT_GRACE_SECONDS)
        comm.raw.abort(code)
        raise SystemExit(code)
