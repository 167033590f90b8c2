"""fedforest: federated decision trees over MPI.

The vertical Federated Forest runs as one MPI job (``python -m fedforest``);
:class:`ForestClassifier` and :class:`ForestRegressor` run the same algorithm
in one process.
"""
__version__ = "0.1.0"

from .errors import ChannelError, FedForestError, InputError, RemoteError  # noqa: E402
from .forest import ForestClassifier, ForestRegressor  # noqa: E402

__all__ = ["ForestClassifier", "ForestRegressor", "FedForestError", "InputError",
           "ChannelError", "RemoteError", "__version__"]
