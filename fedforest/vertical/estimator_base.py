"""What the single-process estimators of every vertical algorithm share: the
scikit-learn base (:class:`TableEstimator`: table checks, fitted state,
threads) and the sample-weight check.
"""
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import NotFittedError
from sklearn.utils.multiclass import type_of_target
from sklearn.utils.validation import validate_data

from ..data.validation import CLASSIFICATION, REGRESSION, check_features
from ..errors import InputError


class NotFitted(InputError, NotFittedError):
    """Prediction before ``fit`` (scikit-learn's ``NotFittedError`` too)."""



def check_sample_weight(sample_weight, n_rows):
    if sample_weight is None:
        return None
    try:
        w = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError("sample_weight", "must be numbers") from None
    if w.ndim == 0:
        w = np.full(n_rows, float(w))
    if w.shape != (n_rows,):
        raise InputError("sample_weight", f"must hold one weight per row ({n_rows}), got shape {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise InputError("sample_weight", "must be finite and non-negative")
    if not np.any(w > 0):
        raise InputError("sample_weight", "all weights are zero; at least one must be positive")
    return w



class TableEstimator(BaseEstimator):
    """What the single-process estimators share: their input checks."""
    _task = None
    _regressor = "ForestRegressor"

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True   # NaN means missing
        return tags

    def _validate(self, X, y=None):
        """``X`` (and ``y`` when fitting) checked as scikit-learn checks them,
        scikit-learn's wording in fedforest's error type."""
        fitting = y is not None or not hasattr(self, "n_features_in_")
        if fitting and y is None:
            raise InputError("y", f"{type(self).__name__} requires y to be passed, but the target y is None")
        try:
            if not fitting:
                X = validate_data(self, X, reset=False, ensure_all_finite="allow-nan", dtype=np.float64)
                return check_features(X), None
            X, y = validate_data(self, X, y, ensure_all_finite="allow-nan", dtype=np.float64,
                                 y_numeric=self._task == REGRESSION)
            if self._task == CLASSIFICATION:
                kind = type_of_target(y, input_name="y")
                if kind not in ("binary", "multiclass"):
                    raise InputError("y", f"Unknown label type: {kind!r}; a classifier needs classes "
                                          f"(use {self._regressor}, a regression, for a continuous target)")
        except InputError:
            raise
        except ValueError as exc:
            what = "y" if "y" in str(exc).split(":")[0].split() else "X"
            raise InputError(what, str(exc)) from None
        return check_features(X), y

    def _check_fitted(self):
        if not hasattr(self, "estimators_"):
            raise NotFitted(type(self).__name__, "is not fitted yet; call fit first")
