"""fedforest: federated decision trees over MPI.

The vertical Federated Forest runs as one MPI job (``python -m fedforest``);
:class:`ForestClassifier` and :class:`ForestRegressor` run the same algorithm
in one process; :class:`BoostClassifier` and :class:`BoostRegressor` run
gradient boosting on the same grower.  Horizontal algorithms run over the same transport
(``--mode``; see :mod:`fedforest.horizontal`).
"""
from .errors import ChannelError, FedForestError, InputError, RemoteError
from .version import __version__

__all__ = ["ForestClassifier", "ForestRegressor", "BoostClassifier", "BoostRegressor", "run_job", "run_vertical", "run_horizontal",
           "FedForestError", "InputError", "ChannelError", "RemoteError", "__version__"]

_LAZY = {"ForestClassifier": ".vertical.forest.estimator", "ForestRegressor": ".vertical.forest.estimator",
         "BoostClassifier": ".vertical.boost.estimator", "BoostRegressor": ".vertical.boost.estimator",
         "run_job": ".jobs", "run_vertical": ".jobs", "run_horizontal": ".jobs"}


def __getattr__(name):
    # scikit-learn takes a second to import and MPI ranks do not need it: load on first use
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'fedforest' has no attribute {name!r}")
