"""The vertical Federated Forest: parties share rows (matched by ID) and hold
different columns; one party holds the label.

* :mod:`.master` and :mod:`.party`: the two policies of a job (training and
  one-round prediction);
* :mod:`.encrypted_labels`: the growers of the Paillier label-privacy mode;
* :mod:`.model_files`: the ``fedforest-vertical`` model format;
* :mod:`.estimator`: :class:`ForestClassifier` / :class:`ForestRegressor`, the
  same algorithm in one process on pooled columns;
* :mod:`.boosting`, :mod:`.boost_roles`, :mod:`.boost_estimator`: gradient
  boosting on the same grower, transport path and model format.

This module declares the two modes: ``--mode vertical`` (the forest, settings
in ``[forest]``) and ``--mode vertical_boost`` (settings in ``[boost]``).
"""
import numbers

from ..constraints import MAX_TREES, Interval, Options
from ..errors import InputError
from ..federation.mode import VERTICAL, Mode, Param
from ..tree.params import HELP, PARAMETER_CONSTRAINTS, ForestParams
from .boost_params import CONSTRAINTS as BOOST_CONSTRAINTS
from .boost_params import HELP as BOOST_HELP
from .boost_params import BoostParams

_TEXT = ("criterion", "split_method", "feature_sampling")

PARAMS = tuple(
    Param(name, getattr(ForestParams(), name), PARAMETER_CONSTRAINTS[name], HELP[name], text=name in _TEXT)
    for name in ForestParams.names()
) + (
    Param("label_privacy", "plain", (Options("plain", "paillier"),),
          "'plain': labels shared with the master and the parties; 'paillier': the label holder keeps "
          "the Paillier key, the labels and every label statistic, the other parties sum its "
          "ciphertexts (needs split_method 'hist', no class_weight)", text=True),
    Param("key_length", 2048, (Interval(int, 256, 16_384),), "Paillier key bits: 2048 or 3072"),
    Param("insecure_key", False, (bool,), "allow Paillier keys shorter than 2048 bits (tests only)"),
    Param("slot_bits", None, (None, Interval(int, 1, 1024)),
          "bits per encrypted statistic (None: just enough for the rows)"),
    Param("encrypt_workers", None, (None, Interval(int, 1, 1024)),
          "processes the label holder uses to make the randomness of its encryptions with its own "
          "key, and threads a party uses for its encrypted sums and the label holder for its "
          "decryptions (None: every core of its host, as n_jobs = -1 gives; the other parties wait "
          "for these steps)"),
    Param("master_full_model", False, (bool,),
          "the master also stores every split's feature and threshold (each party must allow it)"),
    Param("tree_batch", None, (None, Interval(int, 1, MAX_TREES)),
          "trees grown together, two exchanges per level for the whole batch; each batch ends with a "
          "checkpoint (None: as many trees as batch_memory_mb allows and checkpoint_minutes lets "
          "finish in time)"),
    Param("checkpoint_minutes", 5.0, (Interval(numbers.Real, 0.0, None, closed="neither"),),
          "with tree_batch = None, batches are sized so that a checkpoint is written at least this "
          "often (the first from an estimate of the time per tree, later ones from the measured time)"),
    Param("batch_memory_mb", 4096, (Interval(int, 1, 1 << 20),),
          "memory per rank for the growing trees of a batch, in MiB (bounds the default tree_batch)"),
    Param("memory_mb", None, (None, Interval(int, 1, 1 << 30)),
          "memory this rank may use, in MiB (None: the memory available when the job starts); a "
          "rank whose estimate for its table exceeds it refuses the job before reading it"),
    Param("n_jobs", -1, (Interval(int, 1), Interval(int, None, -1)),
          "threads per rank for split search, partitions and prediction (-1: the cores given to "
          "the rank, from OMP_NUM_THREADS, SLURM_CPUS_PER_TASK or the CPU affinity, shared equally "
          "by the job's ranks on a host when the launcher bound none of them; -2: all but one)"),
    Param("resume", False, (bool,), "continue training from the checkpoint in model_dir"),
    Param("result_party", 1, (Interval(int, 1),), "party that receives the predictions and writes them"),
    Param("predict_method", "oneshot", (Options("oneshot", "classical"),),
          "'oneshot': one round for the whole forest; 'classical': node by node", text=True),
    Param("explain_row", None, (None, str),
          "predict only the row with this ID and print its decision path: the master the owner of "
          "each split and the leaf value (boosting: the base margin and each leaf's margin contribution "
          "to its tree's class; with paillier the label holder prints the values), each party its own "
          "conditions", text=True),
    Param("explain_trees", 3, (Interval(int, 1),), "trees whose path explain_row prints"),
)


# the boosting mode: XGBoost-named settings, then the job settings it shares with the forest
_SHARED = ("key_length", "insecure_key", "slot_bits", "encrypt_workers", "master_full_model", "memory_mb",
           "n_jobs", "resume", "result_party", "predict_method", "explain_row",
           "explain_trees")
BOOST_PARAMS = tuple(
    Param(name, getattr(BoostParams(), name), BOOST_CONSTRAINTS[name], BOOST_HELP[name],
          text=name == "split_method")
    for name in BoostParams.names()
) + (
    Param("label_privacy", "paillier", (Options("plain", "paillier"),),
          "'paillier': the label holder keeps the key, the labels, the margins and the leaf values and "
          "sends the gradients only encrypted under its own key (needs split_method 'hist'); 'plain': "
          "the master computes them from the labels and sends them in the clear", text=True),
) + tuple(p for p in PARAMS if p.name in _SHARED)


def _check(cfg):
    cfg.check_parties("party")
    if cfg.result_party > cfg.n_parties:
        raise InputError("result_party", f"must be a party rank in 1..{cfg.n_parties}, got {cfg.result_party!r}")


def _check_boost(cfg):
    _check(cfg)
    if cfg.label_privacy == "paillier":
        from ..crypto.paillier import check_key_length
        check_key_length(cfg.key_length, cfg.insecure_key)
        if cfg.split_method != "hist":
            raise InputError("split_method", "label_privacy = 'paillier' needs split_method = 'hist' "
                                             "(encrypted gradients are summed per histogram bin)")


def forest_params(cfg):
    """The forest hyper-parameters of a resolved job configuration."""
    return ForestParams(**{k: cfg.values[k] for k in ForestParams.names()})


MODE = Mode(
    name="vertical", family=VERTICAL, table="forest",
    summary="Federated Forest: parties hold different columns of the same rows",
    params=PARAMS, impl="fedforest.vertical.roles", check=_check,
    roles=("server_train", "client_train", "server_predict", "client_predict", "warm_up"))
BOOST_MODE = Mode(
    name="vertical_boost", family=VERTICAL, table="boost",
    summary="gradient-boosted trees on the Federated Forest's vertical core (XGBoost's settings)",
    params=BOOST_PARAMS, impl="fedforest.vertical.boost_roles", check=_check_boost,
    roles=("server_train", "client_train", "server_predict", "client_predict", "warm_up"))
MODES = (MODE, BOOST_MODE)
__all__ = ["MODE", "BOOST_MODE", "MODES", "forest_params"]
