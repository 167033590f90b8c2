"""The vertical mode's roles: the master is the server, the parties are the clients."""
from .master import master_predict as server_predict
from .master import master_train as server_train
from .party import party_predict as client_predict
from .party import party_train as client_train

__all__ = ["server_train", "client_train", "server_predict", "client_predict"]
