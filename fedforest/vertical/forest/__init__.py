"""The vertical Federated Forest (``--mode vertical``, settings in
``[forest]``): parties share rows (matched by ID) and hold different
columns; one party holds the label.

* :mod:`.master` and :mod:`.party`: the forest's training policies (the
  shared job skeleton is :mod:`fedforest.vertical.job_master` and
  :mod:`fedforest.vertical.job_party`);
* :mod:`.held_labels`: its labels at the label holder of an encrypted job;
* :mod:`.output`: its model output (the mean of the trees' leaf values);
* :mod:`.estimator`: :class:`ForestClassifier` / :class:`ForestRegressor`,
  the same algorithm in one process on pooled columns;
* :mod:`.roles`: the mode's roles.

This module declares the mode; its implementation is imported only when it runs.
"""
from ...federation.mode import VERTICAL, Mode, Param
from ...tree.params import HELP, PARAMETER_CONSTRAINTS, ForestParams
from ..declare import JOB_PARAMS, check_job, label_privacy_param

_TEXT = ("criterion", "split_method", "feature_sampling")

PARAMS = tuple(
    Param(name, getattr(ForestParams(), name), PARAMETER_CONSTRAINTS[name], HELP[name], text=name in _TEXT)
    for name in ForestParams.names()
) + (
    label_privacy_param("plain", "'plain': labels shared with the master and the parties; 'paillier': the label "
                        "holder keeps the Paillier key, the labels and every label statistic, the other "
                        "parties sum its ciphertexts (needs split_method 'hist', no class_weight)"),
) + JOB_PARAMS


def forest_params(cfg):
    """The forest hyper-parameters of a resolved job configuration."""
    return ForestParams(**{k: cfg.values[k] for k in ForestParams.names()})


MODE = Mode(
    name="vertical", family=VERTICAL, table="forest",
    summary="Federated Forest: parties hold different columns of the same rows",
    params=PARAMS, impl="fedforest.vertical.forest.roles", check=check_job,
    roles=("server_train", "client_train", "server_predict", "client_predict", "warm_up"))
MODES = (MODE,)
__all__ = ["MODE", "MODES", "forest_params"]
