"""The vertical mode's roles: the master is the server, the parties are the clients."""
from ...data.tasks import CLASSIFICATION
from ...tree import predict
from .. import tree_grower
from ..model_output import prediction_roles
from .master import master_train as server_train
from .output import ForestOutput
from .party import party_train as client_train

__all__ = ["server_train", "client_train", "server_predict", "client_predict", "warm_up"]


# prediction: the shared one with the forest's model output
server_predict, client_predict = prediction_roles(ForestOutput())


def warm_up(cfg, command):
    """Load the kernels a rank of this job runs (from numba's cache)."""
    if command == "train":
        tree_grower.warm_up(cfg.split_method, cfg.task == CLASSIFICATION)
    else:
        predict.warm_up()
