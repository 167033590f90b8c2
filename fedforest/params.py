"""Forest hyper-parameters: defaults, validation and resolution.

Names and defaults follow scikit-learn's RandomForest where they mean the same.
"""
import math
import numbers
from dataclasses import dataclass, fields, asdict

from .errors import InputError

CLASSIFICATION = "classification"
REGRESSION = "regression"
CRITERIA = {CLASSIFICATION: ("gini", "entropy", "log_loss"), REGRESSION: ("squared_error",)}
CRITERION_CODE = {"gini": 0, "entropy": 1, "log_loss": 1, "squared_error": 2}


@dataclass
class ForestParams:
    n_estimators: int = 100
    criterion: str = None            # "gini" for classification, "squared_error" for regression
    max_depth: int = None
    min_samples_split: object = 2
    min_samples_leaf: object = 1
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


def _int_or_frac(name, value, low_int):
    if isinstance(value, bool):
        raise InputError(name, f"must be an int or a float, got {value!r}")
    if isinstance(value, numbers.Integral):
        if value < low_int:
            raise InputError(name, f"must be an int >= {low_int} or a float in (0, 1], got {value!r}")
        return
    if isinstance(value, numbers.Real):
        if not 0.0 < value <= 1.0:
            raise InputError(name, f"must be an int >= {low_int} or a float in (0, 1], got {value!r}")
        return
    raise InputError(name, f"must be an int or a float, got {value!r}")


def validate(params, task):
    """Check every parameter; raise :class:`InputError` naming the first bad one.
    Returns a copy with task-dependent defaults filled in."""
    p = ForestParams(**params.to_dict())
    if task not in CRITERIA:
        raise InputError("task", f"must be 'classification' or 'regression', got {task!r}")
    if p.criterion is None:
        p.criterion = CRITERIA[task][0]
    if p.criterion not in CRITERIA[task]:
        raise InputError("criterion", f"must be one of {CRITERIA[task]} for {task}, got {p.criterion!r}")
    if p.max_features == "default":
        p.max_features = "sqrt" if task == CLASSIFICATION else 1.0
    if not isinstance(p.n_estimators, numbers.Integral) or isinstance(p.n_estimators, bool) or p.n_estimators < 1:
        raise InputError("n_estimators", f"must be an int >= 1, got {p.n_estimators!r}")
    if p.max_depth is not None and (not isinstance(p.max_depth, numbers.Integral) or p.max_depth < 1):
        raise InputError("max_depth", f"must be None or an int >= 1, got {p.max_depth!r}")
    _int_or_frac("min_samples_split", p.min_samples_split, 2)
    _int_or_frac("min_samples_leaf", p.min_samples_leaf, 1)
    if not isinstance(p.min_impurity_decrease, numbers.Real) or p.min_impurity_decrease < 0:
        raise InputError("min_impurity_decrease", f"must be a float >= 0, got {p.min_impurity_decrease!r}")
    mf = p.max_features
    if not (mf is None or mf in ("sqrt", "log2")
            or (isinstance(mf, numbers.Integral) and not isinstance(mf, bool) and mf >= 1)
            or (isinstance(mf, numbers.Real) and not isinstance(mf, bool) and 0.0 < mf <= 1.0)):
        raise InputError("max_features", f"must be 'sqrt', 'log2', None, an int >= 1 or a float in (0, 1], got {mf!r}")
    if not isinstance(p.bootstrap, bool):
        raise InputError("bootstrap", f"must be true or false, got {p.bootstrap!r}")
    if p.max_samples is not None:
        if not p.bootstrap:
            raise InputError("max_samples", "can only be set when bootstrap is true")
        _int_or_frac("max_samples", p.max_samples, 1)
    if p.random_state is not None and (not isinstance(p.random_state, numbers.Integral) or p.random_state < 0):
        raise InputError("random_state", f"must be None or an int >= 0, got {p.random_state!r}")
    cw = p.class_weight
    if cw is not None:
        if task != CLASSIFICATION:
            raise InputError("class_weight", "only applies to classification")
        if not (cw in ("balanced", "balanced_subsample") or isinstance(cw, dict)):
            raise InputError("class_weight", f"must be None, 'balanced', 'balanced_subsample' or a dict, got {cw!r}")
    if p.split_method not in ("hist", "exact"):
        raise InputError("split_method", f"must be 'hist' or 'exact', got {p.split_method!r}")
    if not isinstance(p.max_bins, numbers.Integral) or not 2 <= p.max_bins <= 255:
        raise InputError("max_bins", f"must be an int in [2, 255], got {p.max_bins!r}")
    if p.feature_sampling not in ("tree", "node"):
        raise InputError("feature_sampling", f"must be 'tree' or 'node', got {p.feature_sampling!r}")
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
