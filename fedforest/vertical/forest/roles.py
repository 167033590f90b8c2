"""The vertical mode's roles: the master is the server, the parties are the clients."""
from ...data.tasks import CLASSIFICATION
from ...tree import predict
from .. import tree_grower
from ..job_master import master_predict
from ..job_party import party_predict
from .master import master_train as server_train
from .output import ForestOutput
from .party import party_train as client_train

__all__ = ["server_train", "client_train", "server_predict", "client_predict", "warm_up"]


def server_predict(comm, cfg):
    """The master's side of a forest's prediction."""
    return master_predict(comm, cfg, ForestOutput())


def client_predict(comm, cfg):
    """A party's side of a forest's prediction."""
    return party_predict(comm, cfg, ForestOutput())


def warm_up(cfg, command):
    """Load the kernels a rank of this job runs (from numba's cache)."""
    if command == "train":
        tree_grower.warm_up(cfg.split_method, cfg.task == CLASSIFICATION)
    else:
        predict.warm_up()
