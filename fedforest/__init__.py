"""fedforest: federated decision trees over MPI.

The vertical Federated Forest runs as one MPI job (``python -m fedforest``);
:class:`ForestClassifier` and :class:`ForestRegressor` run the same algorithm
in one process.
"""
__version__ = "0.1.0"

from .errors import ChannelError, FedForestError, InputError, RemoteError  # noqa: E402

__all__ = ["ForestClassifier", "ForestRegressor", "FedForestError", "InputError",
           "ChannelError", "RemoteError", "__version__"]


def __getattr__(name):
    # the estimators import scikit-learn, which MPI ranks do not need: load on first use
    if name in ("ForestClassifier", "ForestRegressor"):
        from . import forest
        return getattr(forest, name)
    raise AttributeError(f"module 'fedforest' has no attribute {name!r}")
