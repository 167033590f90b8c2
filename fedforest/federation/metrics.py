"""Metrics: of a predictions file against the true labels (joined by ID), and
the scores clients report on their own rows."""
import numpy as np

from ..data.io import read_table
from ..errors import InputError


def evaluate_files(predictions, truth, id_column, label_column, task=None, positive_class=None,
                   na_values=None, by_position=False):
    """Metrics of a predictions file (``prediction`` and, for classification,
    ``proba_<class>`` columns) against the labels of ``truth``, joined by ID,
    or with ``by_position`` row by row (a truth file without IDs: both files
    must have the same number of rows) (``na_values``: texts that mean a
    missing value in ``truth``; its feature columns, if any, are not read)."""
    pred = read_table(predictions, id_column, "predictions", na_values=[], categorical_columns=[],
                      check_types=False, require_id=not by_position)
    true = read_table(truth, id_column, "truth", na_values=na_values or [], categorical_columns=[],
                      label_column=label_column, check_types=False, require_id=not by_position)
    if label_column not in true.columns:
        raise InputError("truth", f"{truth!r} has no label column {label_column!r}")
    if "prediction" not in pred.columns:
        raise InputError("predictions", f"{predictions!r} has no 'prediction' column")
    if task is None:
        task = "classification" if any(c.startswith("proba_") for c in pred.columns) else "regression"
    if by_position:
        if len(pred) != len(true):
            raise InputError("evaluate", f"--by-position pairs rows in order, but {predictions!r} has "
                                         f"{len(pred)} rows and {truth!r} {len(true)}")
        # the row number is the ID of both files
        id_column = "__row__"
        pred = pred.assign(**{id_column: np.arange(len(pred))})
        true = true.assign(**{id_column: np.arange(len(true))})
    true = true[[id_column, label_column]].dropna(subset=[label_column])
    # IDs and class labels compared in one text form (1, 1.0 and "1" agree)
    pred = pred.assign(**{id_column: pred[id_column].map(_text)})
    true = true.assign(**{id_column: true[id_column].map(_text)})
    joined = pred.merge(true, on=id_column, how="inner")
    if joined.empty:
        raise InputError("evaluate", "no ID of the predictions file has a label in the truth file")
    y_true, y_pred = joined[label_column], joined["prediction"]
    proba = None
    if task == "classification":
        y_true, y_pred = y_true.map(_text), y_pred.map(_text)
        columns = [c for c in pred.columns if c.startswith("proba_")]
        if columns:
            proba = (np.array([c[len("proba_"):] for c in columns]), joined[columns].to_numpy(dtype=float))
    return compute_metrics(y_true.to_numpy(), y_pred.to_numpy(), task, n_missing=len(pred) - len(joined),
                           proba=proba, positive_class=positive_class)


def _text(v):
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def compute_metrics(y_true, y_pred, task, n_missing=0, proba=None, positive_class=None):
    """Accuracy and F1 (binary F1 of ``positive_class``, by default the
    minority class of ``y_true``, the class that sorts last on a tie, named in
    the result with how it was chosen; macro-F1 for more classes), and with ``proba`` = ``(class names, probabilities)`` ROC AUC
    (one-vs-rest macro for more classes) and log-loss; R², RMSE and MAE for
    regression."""
    from sklearn import metrics as skm  # a second to import: only where used
    out = {"task": task, "rows": int(len(y_true))}
    if n_missing:
        out["rows_without_truth"] = int(n_missing)  # no ID match or no true label
    if task == "classification":
        yt = np.asarray(y_true).astype(str)
        yp = np.asarray(y_pred).astype(str)
        names = None if proba is None else [str(c) for c in proba[0]]
        labels = np.unique(np.concatenate([yt, yp] + ([np.array(names)] if names else [])))
        out["accuracy"] = float(skm.accuracy_score(yt, yp))
        if labels.size == 2:
            if positive_class is None:
                # as FedGA-Tree's default: F1 of the majority class of an imbalanced table says little
                counts = np.array([np.count_nonzero(yt == c) for c in labels])
                pos = labels[int(labels.size - 1 - np.argmin(counts[::-1]))]
                out["positive_class_from"] = "minority of the true labels"
            else:
                pos = _text(positive_class)
                out["positive_class_from"] = "setting"
            if pos not in labels:
                raise InputError("positive_class", f"{pos!r} is not a class; classes: {labels.tolist()}")
            out["positive_class"] = pos
            out["f1_binary"] = float(skm.f1_score(yt, yp, average="binary", pos_label=pos))
        else:
            out["f1_macro"] = float(skm.f1_score(yt, yp, average="macro", labels=labels, zero_division=0))
        if proba is not None:
            P = np.clip(proba[1], 0.0, 1.0)
            known = np.isin(yt, names)
            if known.all() and len(np.unique(yt)) > 1:
                if len(names) == 2:
                    k = names.index(out.get("positive_class", names[-1]))
                    out["roc_auc"] = float(skm.roc_auc_score(yt == names[k], P[:, k]))
                else:
                    P = P / np.maximum(P.sum(axis=1, keepdims=True), 1e-300)
                    out["roc_auc"] = float(skm.roc_auc_score(yt, P, multi_class="ovr", labels=names))
                out["log_loss"] = float(skm.log_loss(yt, P, labels=names))
    else:
        yt = np.asarray(y_true, dtype=float)
        yp = np.asarray(y_pred, dtype=float)
        out["r2"] = float(skm.r2_score(yt, yp))
        out["rmse"] = float(np.sqrt(skm.mean_squared_error(yt, yp)))
        out["mae"] = float(skm.mean_absolute_error(yt, yp))
    return out


def format_metrics(m):
    return "\n".join(f"{k:>20}: {v:.4f}" if isinstance(v, float) else f"{k:>20}: {v}"
                     for k, v in m.items())


def accuracy(y, pred):
    y, pred = np.asarray(y), np.asarray(pred)
    return float(np.mean(y == pred)) if y.size else 0.0


def macro_f1(y, pred):
    """Macro-averaged F1 over the classes present in ``y`` or ``pred`` (a class
    with no true or predicted row scores 0), as scikit-learn's
    ``f1_score(average="macro", zero_division=0)``."""
    y, pred = np.asarray(y), np.asarray(pred)
    labels = np.union1d(y, pred)
    if labels.size == 0:
        return 0.0
    scores = []
    for c in labels:
        tp = np.count_nonzero((y == c) & (pred == c))
        fp = np.count_nonzero((y != c) & (pred == c))
        fn = np.count_nonzero((y == c) & (pred != c))
        scores.append(2.0 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores))


def class_scores(y, proba):
    """``{"accuracy", "f1"}`` (macro-F1) of class codes ``y`` against the argmax of ``proba``."""
    pred = np.asarray(proba).argmax(axis=1)
    return {"accuracy": accuracy(y, pred), "f1": macro_f1(y, pred)}
