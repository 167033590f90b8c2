"""FedXGBllr: federated XGBoost with learnable learning rates (horizontal mode ``fedxgbllr``).

Round 0: every client trains an XGBoost ensemble on its rows and sends it
once; the server orders the ensembles by client rank and sends the aggregate
to every client with the initial CNN weights.  Rounds 1..R: FedAvg of a
one-layer 1D CNN (:mod:`.cnn`) whose kernel holds one learning rate per tree.
The implementation is in :mod:`.roles` (imported when the mode runs: it needs
the ``xgboost`` package).
"""
import numbers

from ...constraints import MAX_DEPTH, MAX_TREES, Interval
from ...federation.mode import HORIZONTAL, Mode, Param

DEFAULT_DEPTH = 8

PARAMS = (
    Param("xgb_trees", 500, (Interval(int, 1, MAX_TREES),),
          "XGBoost trees over all clients (each client grows xgb_trees // K)"),
    Param("xgb_eta", 0.1, (Interval(numbers.Real, 0, closed="neither"),),
          "learning rate of the client XGBoost ensembles"),
    Param("max_depth", None, (None, Interval(int, 1, MAX_DEPTH)), f"depth of the XGBoost trees (None: {DEFAULT_DEPTH})"),
    Param("random_state", None, (None, Interval(int, 0)), "seed of the ensembles and of the CNN"),
    Param("rounds", 10, (Interval(int, 1, 10_000),), "FedAvg rounds of the CNN"),
    Param("local_epochs", 100, (Interval(int, 1, 100_000),), "CNN epochs per client per round"),
    Param("batch_size", 64, (Interval(int, 1),), "CNN mini-batch rows"),
    Param("cnn_channels", 64, (Interval(int, 1, 4096),), "CNN channels (learning-rate strategies)"),
    Param("cnn_lr", 0.001, (Interval(numbers.Real, 0, closed="neither"),),
          "Adam learning rate of the CNN"),
)


def _check(cfg):
    if cfg.data is not None and cfg.n_parties is None:
        cfg.set("n_parties", len(cfg.data))
    if cfg.n_parties is not None and cfg.xgb_trees < cfg.n_parties:
        from ...errors import InputError
        raise InputError("xgb_trees", f"{cfg.xgb_trees} trees cannot give each of {cfg.n_parties} "
                                      "clients one tree")


MODE = Mode(
    name="fedxgbllr", family=HORIZONTAL, table="fedxgbllr",
    summary="FedXGBllr: client XGBoost ensembles, per-tree learning rates learned by FedAvg of a small CNN",
    params=PARAMS, impl="fedforest.horizontal.fedxgbllr.roles", check=_check, extra="xgboost",
    roles=("server_train", "client_train", "predict_proba", "explain"))
MODES = (MODE,)
