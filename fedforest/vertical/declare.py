"""What the vertical modes declare alike: the job settings they share (the
encrypted labels' key, batches, memory, threads, prediction) and the checks
of a job's parties.  Cheap to import: the modes' declarations build on it."""
import numbers

from ..constraints import MAX_TREES, Interval, Options
from ..errors import InputError
from ..federation import privacy
from ..federation.mode import Param

def label_privacy_param(default, help_text):
    """The ``label_privacy`` setting of a vertical mode (its default and help are the mode's)."""
    return Param("label_privacy", default, (Options(*privacy.BY_NAME),), help_text, text=True)


JOB_PARAMS = (
    Param("key_length", 2048, (Interval(int, 256, 16_384),), "Paillier key bits: 2048 or 3072"),
    Param("insecure_key", False, (bool,), "allow Paillier keys shorter than 2048 bits (tests only)"),
    Param("slot_bits", None, (None, Interval(int, 1, 1024)),
          "bits per encrypted statistic (None: just enough for the rows)"),
    Param("encrypt_workers", None, (None, Interval(int, 1, 1024)),
          "processes the label holder uses to make the randomness of its encryptions with its own "
          "key, and threads a party uses for its encrypted sums and the label holder for its "
          "decryptions (None: every core of its host, as n_jobs = -1 gives, and a batch of fewer than "
          "20,000 encryptions is made in the label holder's own process, without starting workers; "
          "the other parties wait for these steps)"),
    Param("label_holder_first_trees", 0, (Interval(int, 0, MAX_TREES),),
          "the first k trees (boosting: the trees of the first k rounds) split on the label holder's "
          "columns only, and no other party takes part in them: it stores their shape, learns none of "
          "their partitions and refuses any message of theirs (FATE's complete_secure)"),
    Param("instance_space", "shared", (Options("shared", "hidden"),),
          "with label_privacy = 'paillier': 'shared' sends every party each level's "
          "partition (SecureBoost's protocol); 'hidden' keeps every node's rows at the label holder: it "
          "sends the other parties each row's gradients encrypted in the slot of its node, they sum "
          "them per feature bin without learning any node, and only the label holder applies the "
          "splits (more encryption, growing with the rows and the levels: see docs/protocol.md, 'Hidden "
          "instance space')", text=True),
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


def check_job(cfg):
    cfg.check_parties("party")
    first = cfg.values.get("label_holder_first_trees") or 0
    if first > cfg.n_estimators:
        raise InputError("label_holder_first_trees", f"must be at most n_estimators ({cfg.n_estimators}), "
                                                     f"got {first}")
    if cfg.values.get("instance_space", "shared") == "hidden":
        check_hidden(cfg)
    if cfg.result_party > cfg.n_parties:
        raise InputError("result_party", f"must be a party rank in 1..{cfg.n_parties}, got {cfg.result_party!r}")


def check_hidden(cfg):
    """What ``instance_space = "hidden"`` needs, checked before any work."""
    if cfg.privacy is None or not cfg.privacy.encrypted:
        raise InputError("instance_space", "'hidden' needs label_privacy = 'paillier' (with plain labels "
                                           "every party sees the labels' statistics anyway)")
    if cfg.values.get("label_holder_first_trees"):
        raise InputError("label_holder_first_trees", "has no use with instance_space = 'hidden', where the "
                                                     "other parties see no tree's partition: set it to 0")
    if cfg.spec.name != "vertical_boost":
        return
    if cfg.values.get("resume"):
        raise InputError("resume", "a boosting job with instance_space = 'hidden' cannot resume from a "
                                   "checkpoint (the stored rounds' leaves would need every party's thresholds): "
                                   "train again")
    sub = cfg.values.get("subsample", 1.0)
    stop = cfg.values.get("early_stopping_rounds")
    if sub is not None and sub < 1.0 or stop:
        raise InputError("instance_space", "'hidden' needs every training row in every boosting tree (subsample "
                                           "= 1.0, no early_stopping_rounds): the label holder then takes the "
                                           "rows' leaves from its own growth and no party routes rows")
