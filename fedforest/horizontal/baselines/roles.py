"""The roles of the baselines ``local`` and ``centralized`` (see the package docstring)."""
import numpy as np

from ...federation.rounds import ask
from ..client_tree import fit_client_tree, run_tree_client, run_tree_server
from ..model_files import explain, predict_proba  # noqa: F401  (the modes' local roles)

SEND_ROWS = "send_rows"      # server -> client (centralized): send your rows and labels


def _build_local(comm, job):
    return None, {}          # each client's own tree becomes its model at the final round


def _build_centralized(comm, job):
    data = ask(comm, SEND_ROWS)
    clients = comm.clients
    X = np.concatenate([data[r]["X"] for r in clients])
    y = np.concatenate([data[r]["y"] for r in clients])
    return fit_client_tree(X, y, job.enc, job.max_depth, job.seed, job.cfg.criterion or "gini"), {}


def server_train(comm, cfg):
    return run_tree_server(comm, cfg, _build_centralized if cfg.mode == "centralized" else _build_local)


def client_train(comm, cfg):
    if cfg.mode == "centralized":
        return run_tree_client(comm, cfg, {SEND_ROWS: lambda client, msg: {"X": client.X, "y": client.y}})
    # local: no rows leave, and the final message carries no tree (each client keeps its own)
    return run_tree_client(comm, cfg, final_tree=lambda client: None)
