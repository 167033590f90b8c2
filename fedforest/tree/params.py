"""Forest hyper-parameters: defaults, validation and resolution.

Names and defaults follow scikit-learn's RandomForest where they mean the same.
"""
import math
import numbers
from dataclasses import dataclass, fields, asdict

from ..data.tasks import CLASSIFICATION, REGRESSION
from ..constraints import MAX_DEPTH, MAX_TREES, Interval, Options, check
from ..errors import InputError

CRITERIA = {CLASSIFICATION: ("gini", "entropy", "log_loss"), REGRESSION: ("squared_error",)}
CRITERION_CODE = {"gini": 0, "entropy": 1, "log_loss": 1, "squared_error": 2, "newton": 3}  # newton: boosting


@dataclass
class ForestParams:
    n_estimators: int = 100
    criterion: str = None            # "gini" for classification, "squared_error" for regression
    max_depth: int = None
    min_samples_split: object = 2
    min_samples_leaf: object = 1
    min_weight_fraction_leaf: float = 0.0
    min_impurity_decrease: float = 0.0
    max_features: object = "default"  # "sqrt" for classification, 1.0 for regression
    bootstrap: bool = True
    max_samples: object = None
    random_state: int = None
    class_weight: object = None
    split_method: str = "hist"       # "hist" (quantile bins) or "exact"
    max_bins: int = 255
    feature_sampling: str = "node"   # "node": a subset per node (as scikit-learn); "tree": per tree (the paper)

    @classmethod
    def names(cls):
        return [f.name for f in fields(cls)]

    def to_dict(self):
        return asdict(self)


FRACTION = Interval(float, 0.0, 1.0, closed="right")

# scikit-learn style: each parameter's accepted values (one of them must hold)
PARAMETER_CONSTRAINTS = {
    "n_estimators": (Interval(int, 1, MAX_TREES),),
    "criterion": (None, Options("gini", "entropy", "log_loss", "squared_error")),
    "max_depth": (None, Interval(int, 1, MAX_DEPTH)),
    "min_samples_split": (Interval(int, 2), FRACTION),
    "min_samples_leaf": (Interval(int, 1), FRACTION),
    "min_weight_fraction_leaf": (Interval(numbers.Real, 0.0, 0.5),),
    "min_impurity_decrease": (Interval(numbers.Real, 0.0),),
    "max_features": (None, Options("sqrt", "log2", "default"), Interval(int, 1), FRACTION),
    "bootstrap": (bool,),
    "max_samples": (None, Interval(int, 1), FRACTION),
    "random_state": (None, Interval(int, 0)),
    "class_weight": (None, Options("balanced", "balanced_subsample"), dict),
    "split_method": (Options("hist", "exact"),),
    "max_bins": (Interval(int, 2, 255),),
    "feature_sampling": (Options("node", "tree"),),
}

HELP = {
    "n_estimators": "number of trees",
    "criterion": "split quality: 'gini', 'entropy'/'log_loss' (classification) or 'squared_error' "
                 "(regression; default: 'gini' or 'squared_error' by task)",
    "max_depth": "maximum tree depth (None: grow until leaves are pure or too small)",
    "min_samples_split": "rows a node needs to be split (int, or a fraction of the rows)",
    "min_samples_leaf": "rows each leaf keeps at least (int, or a fraction of the rows)",
    "min_weight_fraction_leaf": "each leaf keeps at least this fraction of the tree's total "
                                "weight (bootstrap counts times class and sample weights)",
    "min_impurity_decrease": "a split must decrease the weighted impurity by at least this",
    "max_features": "features drawn per node or tree: 'sqrt', 'log2', None (all), an int or a "
                    "fraction (default: 'sqrt' for classification, 1.0 for regression)",
    "bootstrap": "draw each tree's rows with replacement",
    "max_samples": "rows drawn per tree with bootstrap (None: as many as there are rows)",
    "random_state": "seed of the whole forest (None: a fresh seed, recorded in the model)",
    "class_weight": "None, 'balanced', 'balanced_subsample' or a table {class = weight}",
    "split_method": "'hist' (quantile bins, max_bins per feature) or 'exact' (every threshold)",
    "max_bins": "bins per feature with split_method 'hist' (2..255)",
    "feature_sampling": "'node': a feature subset per node (as scikit-learn); 'tree': one subset "
                        "per tree (the Federated Forest paper)",
}


def validate(params, task):
    """Check every parameter; raise :class:`InputError` naming the first bad one.
    Returns a copy with task-dependent defaults filled in."""
    p = ForestParams(**params.to_dict())
    if task not in CRITERIA:
        raise InputError("task", f"must be 'classification' or 'regression', got {task!r}")
    for name in ForestParams.names():
        check(name, getattr(p, name), PARAMETER_CONSTRAINTS[name])
    if p.criterion is None:
        p.criterion = CRITERIA[task][0]
    if p.criterion not in CRITERIA[task]:
        raise InputError("criterion", f"must be one of {CRITERIA[task]} for {task}, got {p.criterion!r}")
    if p.max_features == "default":
        p.max_features = "sqrt" if task == CLASSIFICATION else 1.0
    if p.max_samples is not None and not p.bootstrap:
        raise InputError("max_samples", "can only be set when bootstrap is true")
    if p.class_weight is not None and task != CLASSIFICATION:
        raise InputError("class_weight", "only applies to classification")
    return p


def resolve_max_features(max_features, n_features):
    if max_features == "sqrt":
        k = int(math.sqrt(n_features))
    elif max_features == "log2":
        k = int(math.log2(n_features))
    elif max_features is None:
        k = n_features
    elif isinstance(max_features, numbers.Integral):
        if max_features > n_features:
            raise InputError("max_features", f"is {max_features} but there are only {n_features} features")
        k = max_features
    else:
        k = int(max_features * n_features)
    return min(n_features, max(1, k))


def resolve_count(value, n):
    """min_samples_split / min_samples_leaf / max_samples as an absolute count."""
    if isinstance(value, numbers.Integral):
        return int(value)
    return max(1, int(math.ceil(value * n)))


def resolve_max_samples(max_samples, n):
    if max_samples is None:
        return n
    if isinstance(max_samples, numbers.Integral):
        if max_samples > n:
            raise InputError("max_samples", f"is {max_samples} but there are only {n} rows")
        return int(max_samples)
    return max(1, int(max_samples * n))


#: environment variables in which MPI launchers give the number of ranks of the
#: job on this host (MPICH's Hydra, Open MPI)
LOCAL_RANKS_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def _local_ranks():
    """Ranks of this MPI job started on this host (1 outside mpiexec)."""
    import os
    for var in LOCAL_RANKS_VARS:
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def available_cores(alone=False):
    """Cores given to this process: the CPU affinity, bounded by
    ``OMP_NUM_THREADS`` and SLURM's ``SLURM_CPUS_PER_TASK`` when they are set.
    Ranks of one ``mpiexec`` job that share a host and its cores (the same
    affinity: the launcher bound none of them) take an equal share each, so
    a job of more ranks than cores does not run more threads than cores;
    ``alone``: for work the other ranks wait for, which gets all of them."""
    import os
    try:
        n = len(os.sched_getaffinity(0))
        cpus = os.cpu_count() or n
    except AttributeError:  # not Linux
        n = cpus = os.cpu_count() or 1
    local = 1 if alone else _local_ranks()
    if local > 1 and n >= cpus:      # unbound ranks (a bound rank's affinity is its share)
        n = max(1, n // local)
    for var in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        value = os.environ.get(var, "").split(",")[0].strip()
        if value.isdigit() and int(value) > 0:
            n = min(n, int(value))
    return max(1, n)


def resolve_n_jobs(n_jobs, alone=False):
    """Threads for ``n_jobs`` in scikit-learn's sense: None or -1 = every
    available core, -2 = all but one, a positive number as given
    (``alone``: as :func:`available_cores`)."""
    cores = available_cores(alone)
    if n_jobs is None:
        return cores
    n_jobs = int(n_jobs)
    if n_jobs == 0:
        raise InputError("n_jobs", "must be an int >= 1 or an int <= -1, got 0")
    if n_jobs < 0:
        return max(1, cores + 1 + n_jobs)
    return n_jobs
