"""Validation of feature matrices and labels (shared by every estimator and mode)."""
import numpy as np

from ..errors import InputError
from .io import LABEL_NA_TEXTS
from .tasks import CLASSIFICATION, REGRESSION  # noqa: F401  (CLASSIFICATION: re-exported)


def check_features(X, what="X"):
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(what, f"must be numeric ({exc})") from None
    if X.ndim != 2:
        raise InputError(what, f"must be a 2-D array, got shape {X.shape}")
    if X.shape[0] == 0:
        raise InputError(what, "has no rows")
    if np.isinf(X).any():
        raise InputError(what, "contains infinite values (NaN is allowed and means missing)")
    return X


def encode_labels(y, task, what="y"):
    """Validated labels: ``(codes_or_values, classes)``; classes is None for regression."""
    y = np.asarray(y)
    if y.ndim != 1:
        raise InputError(what, f"must be 1-D, got shape {y.shape}")
    if y.shape[0] < 2:
        rows = "only 1 row (one sample)" if y.shape[0] == 1 else f"{y.shape[0]} rows"
        raise InputError(what, f"{rows} to train on; training needs at least 2 rows")
    if task == REGRESSION:
        try:
            yf = y.astype(np.float64)
        except (TypeError, ValueError):
            raise InputError(what, "must be numeric for regression") from None
        if not np.isfinite(yf).all():
            raise InputError(what, f"contains {int((~np.isfinite(yf)).sum())} NaN or infinite labels")
        return yf, None
    if y.dtype.kind in "fc":
        if not np.isfinite(y).all():
            raise InputError(what, f"contains {int((~np.isfinite(y)).sum())} NaN or infinite labels")
        fraction = y[y != np.round(y)] if y.dtype.kind == "f" else y[y.imag != 0]
        if fraction.size:
            # scikit-learn's type_of_target calls such labels 'continuous' and its classifiers refuse them
            raise InputError(what, f"is continuous (non-integer values such as {fraction[0].item()!r}, "
                                   f"{np.unique(y).size} distinct values): classification needs classes; "
                                   "use regression (task = \"regression\") for a continuous target")
    elif y.dtype.kind in "OUS":
        missing = missing_labels(y)
        if missing.any():
            at = np.flatnonzero(missing)
            more = ", ..." if at.size > 5 else ""
            raise InputError(what, f"contains {at.size} missing labels (no value, NaN, or a text that "
                                   f"means missing: 'nan', 'NaN', 'NA', 'null', 'None', '', ...; at "
                                   f"positions {', '.join(str(i) for i in at[:5])}{more}): a missing "
                                   "label is never a class")
        y = y.astype(str)
    classes, codes = np.unique(y, return_inverse=True)
    if classes.size < 2:
        raise InputError(what, f"has only one class ({classes[0].item()!r}); classification needs at least two")
    return codes.astype(np.int32), classes


def missing_labels(y):
    """Which of the labels ``y`` (a 1-D array) are missing: None, NaN, or a
    text of :data:`~fedforest.data.io.LABEL_NA_TEXTS` (pandas' missing-value
    texts).  NumPy only: a rank that reads no table imports no pandas."""
    if y.dtype.kind in "US":
        return np.isin(y.astype(str), LABEL_NA_TEXTS)
    if y.dtype.kind == "f":
        return np.isnan(y)
    if y.dtype.kind != "O":
        return np.zeros(y.shape, dtype=bool)
    texts = frozenset(LABEL_NA_TEXTS)
    return np.fromiter((v is None or (isinstance(v, (float, np.floating)) and v != v)
                        or (isinstance(v, str) and v in texts) or type(v).__name__ == "NAType"
                        for v in y), dtype=bool, count=y.size)


def label_text(v):
    """A class label as text, the form in which labels are compared (1, 1.0
    and "1" are the same class), as the ``evaluate`` command compares them."""
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def positive_class_index(classes, positive_class=None, counts=None):
    """The position in ``classes`` (the two classes in sorted order) of the
    class whose F1 is scored and reported.

    ``positive_class`` given: that class, compared as text (:func:`label_text`);
    a value that is not a class is an :class:`InputError` naming the classes
    (the message of the ``evaluate`` command).  Otherwise the minority class of
    ``counts`` (rows per class, pooled over every client, in the order of
    ``classes``); a tie, or no counts, goes to the class that sorts last,
    the default of ``evaluate``."""
    names = [label_text(c) for c in classes]
    if positive_class is not None:
        pos = label_text(positive_class)
        if pos not in names:
            raise InputError("positive_class", f"{pos!r} is not a class; classes: {names}")
        return names.index(pos)
    if counts is None:
        return len(names) - 1
    counts = np.asarray(counts, dtype=np.float64)
    if counts.shape != (len(names),):
        raise ValueError(f"expected {len(names)} class counts, got shape {counts.shape}")
    return int(len(names) - 1 - np.argmin(counts[::-1]))     # the last of the smallest
