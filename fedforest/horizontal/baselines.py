"""Baselines of the tree modes (horizontal modes ``local`` and ``centralized``).

* ``local``: every client keeps its own tree, trained on its rows only (the
  baseline of every federated tree method);
* ``centralized``: the clients send their rows to the server, which trains one
  tree on all of them.  A baseline only: it moves every row and label to the
  server in the clear.
"""
import numpy as np

from ..data.validation import CLASSIFICATION
from ..federation.mode import HORIZONTAL, Mode
from ..federation.rounds import ask
from .common import fit_client_tree, run_tree_client, run_tree_server, tree_params
from .common import explain, predict_proba  # noqa: F401  (the modes' local roles)

SEND_ROWS = "send_rows"      # server -> client (centralized): send your rows and labels

PARAMS = tree_params()


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


_ROLES = ("server_train", "client_train", "predict_proba", "explain")
LOCAL = Mode(
    name="local", family=HORIZONTAL, table="local",
    summary="baseline: every client trains and keeps its own tree (no federation)",
    params=PARAMS, impl=__name__, tasks=(CLASSIFICATION,), roles=_ROLES)
CENTRALIZED = Mode(
    name="centralized", family=HORIZONTAL, table="centralized",
    summary="baseline: the clients send their rows to the server, which trains one tree "
            "(moves every row and label in the clear)",
    params=PARAMS, impl=__name__, tasks=(CLASSIFICATION,), roles=_ROLES)
MODES = (LOCAL, CENTRALIZED)
