"""Running a vertical job inside one process (each rank a thread).

The same master and party code as under ``mpiexec`` runs over the in-process
transport, with encrypted channels; party data may be given as pandas
DataFrames instead of files.  Meant for tests, experiments and trials.
"""
from .config import resolve
from .transport.inprocess import run_inprocess
from .vertical import master_predict, master_train, party_predict, party_train

_ROLES = {"train": (master_train, party_train), "predict": (master_predict, party_predict)}


def run_horizontal(data, **options):
    """Train a horizontal model (``mode`` in options, default "icdta4fl") with
    one rows file per client, in this process.  Returns the server's summary."""
    from .horizontal import roles
    options = dict({"progress": False, "quiet": True}, **options)
    server_train, client_train = roles(options.get("mode", "icdta4fl"))
    options["data"] = list(data)

    def cfg():
        return resolve(None, options)

    summary, _ = run_inprocess(len(options["data"]), lambda c: server_train(c, cfg()),
                               lambda c: client_train(c, cfg()))
    return summary


def run_vertical(command, data, tamper=None, **options):
    """Run ``command`` ("train" or "predict") with one data source per party.

    ``options`` are configuration keys (see docs/config.md); progress bars and
    summary lines are off unless asked for.  Returns the master's summary.
    Raises what the master raises; a party's failure arrives as RemoteError.
    """
    if command not in _ROLES:
        raise ValueError(f"command must be 'train' or 'predict', got {command!r}")
    master_fn, party_fn = _ROLES[command]
    options = dict({"progress": False, "quiet": True}, **options)
    options["data"] = list(data)

    def cfg():
        return resolve(None, options)

    summary, _ = run_inprocess(len(options["data"]) if "n_parties" not in options else options["n_parties"],
                               lambda c: master_fn(c, cfg()), lambda c: party_fn(c, cfg()), tamper=tamper)
    return summary
