"""Metrics of a predictions file against the true labels (joined by ID)."""
import numpy as np
import pandas as pd
from sklearn import metrics as skm

from .data.io import read_table
from .errors import InputError


def evaluate_files(predictions, truth, id_column, label_column, task=None):
    pred = read_table(predictions, id_column, "predictions")
    true = read_table(truth, id_column, "truth")
    if label_column not in true.columns:
        raise InputError("truth", f"{truth!r} has no label column {label_column!r}")
    if "prediction" not in pred.columns:
        raise InputError("predictions", f"{predictions!r} has no 'prediction' column")
    if task is None:
        task = "classification" if any(c.startswith("proba_") for c in pred.columns) else "regression"
    joined = pred.merge(true[[id_column, label_column]], on=id_column, how="inner")
    if joined.empty:
        raise InputError("evaluate", "no ID of the predictions file appears in the truth file")
    return compute_metrics(joined[label_column].to_numpy(), joined["prediction"].to_numpy(), task,
                           n_missing=len(pred) - len(joined))


def compute_metrics(y_true, y_pred, task, n_missing=0):
    out = {"task": task, "rows": int(len(y_true))}
    if n_missing:
        out["rows_without_truth"] = int(n_missing)
    if task == "classification":
        yt = np.asarray(y_true).astype(str)
        yp = np.asarray(y_pred).astype(str)
        labels = np.unique(np.concatenate([yt, yp]))
        out["accuracy"] = float(skm.accuracy_score(yt, yp))
        average = "binary" if labels.size == 2 else "macro"
        pos = labels[-1] if average == "binary" else 1
        out[f"f1_{average}"] = float(skm.f1_score(yt, yp, average=average, pos_label=pos))
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
