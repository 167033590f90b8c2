"""The bundled demo: scikit-learn's breast cancer data split across two parties."""
import os

import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split

from .federation.metrics import compute_metrics

N_ESTIMATORS = 100
SEED = 0

JOB = """# Demo job: breast cancer (scikit-learn), columns split across 2 parties.
[job]
task = "classification"
data = ["train-party1.csv", "train-party2.csv"]
id_column = "id"
label_column = "diagnosis"
model_dir = "model"
output = "predictions.csv"

[forest]
n_estimators = {n}
random_state = {seed}
"""


def make_demo(out):
    data = load_breast_cancer(as_frame=True)
    df = data.frame.rename(columns={"target": "diagnosis"})
    df["diagnosis"] = np.where(df["diagnosis"] == 1, "benign", "malignant")
    df.insert(0, "id", [f"patient-{i:04d}" for i in range(len(df))])
    train, test = train_test_split(df, test_size=0.25, random_state=SEED, stratify=df["diagnosis"])
    features = list(data.feature_names)
    half = len(features) // 2
    groups = {1: features[:half] + ["diagnosis"], 2: features[half:]}
    os.makedirs(out, exist_ok=True)
    for name, frame in (("train", train), ("test", test)):
        for p, cols in groups.items():
            frame[["id"] + cols].to_csv(os.path.join(out, f"{name}-party{p}.csv"), index=False)
    with open(os.path.join(out, "job.toml"), "w") as fh:
        fh.write(JOB.format(n=N_ESTIMATORS, seed=SEED))
    return (f"demo data in {out}: party 1 holds {half} features + the label, party 2 holds "
            f"{len(features) - half} features; {len(train)} training and {len(test)} test rows")


def _pooled(folder, name):
    a = pd.read_csv(os.path.join(folder, f"{name}-party1.csv"))
    b = pd.read_csv(os.path.join(folder, f"{name}-party2.csv"))
    return a.merge(b, on="id")


def report(folder):
    train, test = _pooled(folder, "train"), _pooled(folder, "test")
    feats = [c for c in train.columns if c not in ("id", "diagnosis")]
    rf = RandomForestClassifier(n_estimators=N_ESTIMATORS, random_state=SEED, n_jobs=-1)
    rf.fit(train[feats], train["diagnosis"])
    central = compute_metrics(test["diagnosis"], rf.predict(test[feats]), "classification")
    pred = pd.read_csv(os.path.join(folder, "predictions.csv")).merge(test[["id", "diagnosis"]], on="id")
    fed = compute_metrics(pred["diagnosis"], pred["prediction"], "classification")
    lines = [f"{'model':<44}{'accuracy':>10}{'F1':>10}",
             f"{'Federated Forest (2 parties + master)':<44}{fed['accuracy']:>10.4f}{fed['f1_binary']:>10.4f}",
             f"{'scikit-learn RandomForest (pooled data)':<44}{central['accuracy']:>10.4f}{central['f1_binary']:>10.4f}",
             f"test rows: {fed['rows']}; F1 positive class: {fed['positive_class']} ({fed['positive_class_from']})",
             "model files: " + ", ".join(os.path.join(folder, "model", d)
                                         for d in sorted(os.listdir(os.path.join(folder, "model")))),
             f"predictions: {os.path.join(folder, 'predictions.csv')}"]
    return "\n".join(lines)
