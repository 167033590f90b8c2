"""Baselines of the tree modes (horizontal modes ``local`` and ``centralized``).

* ``local``: every client keeps its own tree, trained on its rows only (the
  baseline of every federated tree method);
* ``centralized``: the clients send their rows to the server, which trains one
  tree on all of them.  A baseline only: it moves every row and label to the
  server in the clear.

This module declares the modes; the implementation is in :mod:`.roles`
(imported when a mode runs).
"""
from ...data.tasks import CLASSIFICATION
from ...federation.mode import HORIZONTAL, Mode
from ..declare import tree_params

PARAMS = tree_params()

_ROLES = ("server_train", "client_train", "predict_proba", "explain")
_IMPL = "fedforest.horizontal.baselines.roles"
LOCAL = Mode(
    name="local", family=HORIZONTAL, table="local",
    summary="baseline: every client trains and keeps its own tree (no federation)",
    params=PARAMS, impl=_IMPL, tasks=(CLASSIFICATION,), roles=_ROLES)
CENTRALIZED = Mode(
    name="centralized", family=HORIZONTAL, table="centralized",
    summary="baseline: the clients send their rows to the server, which trains one tree "
            "(moves every row and label in the clear)",
    params=PARAMS, impl=_IMPL, tasks=(CLASSIFICATION,), roles=_ROLES)
MODES = (LOCAL, CENTRALIZED)
