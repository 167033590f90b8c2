"""Boosting settings: names, defaults, constraints and help (cheap to import:
the mode's declaration reads them without numpy).

Names follow XGBoost's where they mean the same.
"""
import numbers
from dataclasses import asdict, dataclass, fields

from ...constraints import MAX_DEPTH, MAX_TREES, Interval, Options
from ...tree.params import ForestParams

_REAL = numbers.Real


@dataclass
class BoostParams:
    """Boosting settings, named as XGBoost names them where they mean the same."""
    n_estimators: int = 100
    learning_rate: float = 0.3
    max_depth: int = 6
    min_child_weight: float = 1.0
    reg_lambda: float = 1.0
    gamma: float = 0.0
    subsample: float = 1.0
    colsample_bytree: float = 1.0
    max_bins: int = 255
    base_score: float = None
    early_stopping_rounds: int = None
    validation_fraction: float = 0.1
    random_state: int = None
    split_method: str = "hist"

    @classmethod
    def names(cls):
        return [f.name for f in fields(cls)]

    def to_dict(self):
        return asdict(self)

    def grower_params(self):
        """The forest settings the shared grower reads, for one boosting tree."""
        return GrowerParams(n_estimators=1, criterion="newton", max_depth=self.max_depth,
                            min_samples_split=2, min_samples_leaf=1, min_weight_fraction_leaf=0.0,
                            min_impurity_decrease=float(self.gamma), max_features=float(self.colsample_bytree),
                            bootstrap=False, max_samples=None, random_state=self.random_state, class_weight=None,
                            split_method=self.split_method, max_bins=self.max_bins, feature_sampling="tree",
                            reg_lambda=float(self.reg_lambda), min_child_weight=float(self.min_child_weight),
                            subsample=float(self.subsample))


@dataclass
class GrowerParams(ForestParams):
    """:class:`ForestParams` with the boosting settings the grower needs."""
    reg_lambda: float = 1.0
    min_child_weight: float = 1.0
    subsample: float = 1.0


CONSTRAINTS = {
    "n_estimators": (Interval(int, 1, MAX_TREES),),
    "learning_rate": (Interval(_REAL, 0, None, closed="neither"),),
    "max_depth": (Interval(int, 1, MAX_DEPTH),),
    "min_child_weight": (Interval(_REAL, 0, None),),
    "reg_lambda": (Interval(_REAL, 0, None),),
    "gamma": (Interval(_REAL, 0, None),),
    "subsample": (Interval(_REAL, 0, 1, closed="right"),),
    "colsample_bytree": (Interval(_REAL, 0, 1, closed="right"),),
    "max_bins": (Interval(int, 2, 255),),
    "base_score": (None, Interval(_REAL, None, None)),
    "early_stopping_rounds": (None, Interval(int, 1)),
    "validation_fraction": (Interval(_REAL, 0, 1, closed="neither"),),
    "random_state": (None, Interval(int, 0)),
    "split_method": (Options("hist", "exact"),),
}

HELP = {
    "n_estimators": "boosting rounds (multiclass: one tree per class per round)",
    "learning_rate": "shrinkage of every leaf value (XGBoost's eta)",
    "max_depth": "maximum tree depth",
    "min_child_weight": "least hessian sum of a child",
    "reg_lambda": "L2 penalty on leaf values",
    "gamma": "least loss change of a split, XGBoost's min_split_loss (the split's gain "
             "G_l^2/(H_l+lambda) + G_r^2/(H_r+lambda) - G^2/(H+lambda)), tested as each split is found",
    "subsample": "share of the rows each tree draws (each row kept with this probability)",
    "colsample_bytree": "share of the columns each tree draws",
    "max_bins": "bins per feature with split_method 'hist' (2..255)",
    "base_score": "starting prediction: binary classification, the probability of the positive class, "
                  "in (0, 1); regression, the starting value; multiclass, no effect (None: the one that "
                  "minimises the training loss)",
    "early_stopping_rounds": "stop once the validation loss has not improved for this many rounds "
                             "(None: no early stopping, no validation share)",
    "validation_fraction": "share of the rows held out for early stopping (the label holder's labels "
                           "score it)",
    "random_state": "seed of the whole ensemble (None: a fresh seed, recorded in the model)",
    "split_method": "'hist' (quantile bins, max_bins per feature) or 'exact' (every threshold, as "
                    "XGBoost's exact method: a value on a split's midpoint goes right)",
}
