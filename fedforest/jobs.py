"""Running a job inside one process (each rank a thread).

The same server and client code as under ``mpiexec`` runs over the in-process
transport, with encrypted channels; vertical party data may be given as
pandas DataFrames instead of files.  Meant for tests, experiments and trials.
"""
from .federation.config import resolve
from .federation.paths import check_job_paths
from .transport.inprocess import run_inprocess

_COMMANDS = {"train": ("server_train", "client_train"), "predict": ("server_predict", "client_predict")}


def run_job(command, data, tamper=None, **options):
    """Run ``command`` ("train" or "predict") of ``options["mode"]`` (default
    "vertical") with one data source per party/client, in this process.

    ``options`` are configuration settings (see docs/config.md); progress bars
    and summary lines are off unless asked for.  Returns the server's summary.
    Raises what the server raises; a client's failure arrives as RemoteError."""
    if command not in _COMMANDS:
        raise ValueError(f"command must be 'train' or 'predict', got {command!r}")
    options = dict({"progress": False, "quiet": True}, **options)
    options["data"] = list(data)
    resolved = resolve(None, options)
    check_job_paths(resolved, command)      # no output names an input, each can be written
    mode = resolved.spec
    server_role, client_role = _COMMANDS[command]
    server_fn, client_fn = mode.role(server_role), mode.role(client_role)

    def cfg():
        return resolve(None, options)

    n = options.get("n_parties") or len(options["data"])
    summary, _ = run_inprocess(n, lambda c: server_fn(c, cfg()), lambda c: client_fn(c, cfg()), tamper=tamper)
    return summary


def run_vertical(command, data, tamper=None, **options):
    """A vertical job (train or predict) in this process; see :func:`run_job`."""
    return run_job(command, data, tamper=tamper, **dict(options, mode="vertical"))


def run_horizontal(data, **options):
    """Train a horizontal model (``mode`` in options, default "icdta4fl") with
    one rows file per client, in this process.  Returns the server's summary."""
    return run_job("train", data, **dict({"mode": "icdta4fl"}, **options))
