"""Vertical gradient boosting (``--mode vertical_boost``, settings in
``[boost]``, XGBoost's names) on the Federated Forest's vertical core: the
same grower, transport path, model format and one-round prediction.

* :mod:`.boosting`: objectives, the gradient grid, the boosting tree kind;
* :mod:`.roles`: the master's and the parties' training policies;
* :mod:`.encrypted_gradients`, :mod:`.gradient_rounds`: the encrypted
  gradients of the parties without labels and of the label holder;
* :mod:`.output`: its model output (base margin plus the trees' values);
* :mod:`.estimator`: :class:`BoostClassifier` / :class:`BoostRegressor`;
* :mod:`.params`: the settings.

This module declares the mode; its implementation is imported only when it runs.
"""
from ...errors import InputError
from ...federation.mode import VERTICAL, Mode, Param
from ..declare import JOB_PARAMS, check_job, label_privacy_param
from .params import CONSTRAINTS as BOOST_CONSTRAINTS
from .params import HELP as BOOST_HELP
from .params import BoostParams

# the boosting mode: XGBoost-named settings, then the job settings it shares with the forest
_SHARED = ("key_length", "insecure_key", "slot_bits", "encrypt_workers", "label_holder_first_trees", "instance_space",
           "master_full_model", "memory_mb",
           "n_jobs", "resume", "result_party", "predict_method", "explain_row",
           "explain_trees")
BOOST_PARAMS = tuple(
    Param(name, getattr(BoostParams(), name), BOOST_CONSTRAINTS[name], BOOST_HELP[name],
          text=name == "split_method")
    for name in BoostParams.names()
) + (
    label_privacy_param("paillier", "'paillier': the label holder keeps the key, the labels, the margins and the "
                        "leaf values and sends the gradients only encrypted under its own key (needs "
                        "split_method 'hist'); 'plain': the master computes them from the labels and sends "
                        "them in the clear"),
) + tuple(p for p in JOB_PARAMS if p.name in _SHARED)



def _check_boost(cfg):
    check_job(cfg)
    if cfg.privacy.encrypted:
        from ...crypto.paillier import check_key_length
        check_key_length(cfg.key_length, cfg.insecure_key)
        if cfg.split_method != "hist":
            raise InputError("split_method", "label_privacy = 'paillier' needs split_method = 'hist' "
                                             "(encrypted gradients are summed per histogram bin)")



BOOST_MODE = Mode(
    name="vertical_boost", family=VERTICAL, table="boost",
    summary="gradient-boosted trees on the Federated Forest's vertical core (XGBoost's settings)",
    params=BOOST_PARAMS, impl="fedforest.vertical.boost.roles", check=_check_boost,
    roles=("server_train", "client_train", "server_predict", "client_predict", "warm_up"))
MODES = (BOOST_MODE,)
__all__ = ["BOOST_MODE", "MODES"]
