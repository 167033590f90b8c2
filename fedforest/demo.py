"""The bundled demo: scikit-learn's breast cancer data split across two parties,
trained with the labels kept by their holder (Paillier, its own key)."""
import json
import os

import numpy as np
import pandas as pd
from sklearn.datasets import load_breast_cancer
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import train_test_split

from .federation import privacy as label_privacy
from .errors import InputError
from .federation.metrics import compute_metrics

# 30 trees: with the labels Paillier-encrypted (2048-bit key) each tree costs the
# label holder decryptions and party 2 sums of ciphertexts; 100 trees take about 3x
# as long and get one more of the 143 test rows right
N_ESTIMATORS = 30
SEED = 0
SUMMARY = "train-summary.json"   # the training's run summary (prediction writes train-summary-predict.json)

JOB = """# Demo job: breast cancer (scikit-learn), columns split across 2 parties.
[job]
task = "classification"
data = ["train-party1.csv", "train-party2.csv"]
id_column = "id"
label_column = "diagnosis"
model_dir = "model"
output = "predictions.csv"
summary_json = "{summary}"

[forest]
n_estimators = {n}
random_state = {seed}
# party 1 makes a Paillier key pair and keeps the private key and the labels:
# the master and party 2 get the labels only as ciphertexts
label_privacy = "paillier"
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
        fh.write(JOB.format(n=N_ESTIMATORS, seed=SEED, summary=SUMMARY))
    return (f"demo data in {out}: party 1 holds {half} features + the label, party 2 holds "
            f"{len(features) - half} features; {len(train)} training and {len(test)} test rows")


def _pooled(folder, name):
    a = pd.read_csv(os.path.join(folder, f"{name}-party1.csv"))
    b = pd.read_csv(os.path.join(folder, f"{name}-party2.csv"))
    return a.merge(b, on="id")


def _megabytes(n):
    return f"{n / 1e6:.1f} MB"


def _labels(got):
    """How a rank got the labels, from the run summary's ``labels_received`` entry."""
    if got["form"] == "plaintext":
        return f"the {got['rows']} labels in plaintext"
    return (f"the {got['rows']} labels only as Paillier ciphertexts ({_megabytes(got['bytes'])}; the private key "
            f"stays with party {got['key_holder']}), no label in plaintext")


def training_lines(summary):
    """The demo report's lines on the training run: its time and what the
    master and the parties without the labels received."""
    got = summary["labels_received"]
    took = f"training took {summary['total_seconds']:.1f} s"
    if label_privacy.of(summary["label_privacy"]).encrypted:
        holder = {g["key_holder"] for g in got.values()}
        took += (f" ({summary['label_encrypt_seconds']:.1f} s of it encrypting the labels under a "
                 f"{summary['key_length']}-bit Paillier key of party {', '.join(map(str, sorted(holder)))}, "
                 f"{summary['train_seconds']:.1f} s growing the {summary['n_trees']} trees)")
    else:
        took += f" ({summary['train_seconds']:.1f} s growing the {summary['n_trees']} trees)"
    # every rank that got the labels: with paillier all but their holder, in plain mode every rank
    ranks = sorted(got, key=int)
    sizes = ", ".join(f"{'the master' if r == '0' else f'party {r}'} {_megabytes(summary['bytes_received'][r])}"
                      for r in ranks)
    forms = [_labels(got[r]) for r in ranks]
    labels = forms[0] if len(set(forms)) == 1 else "; ".join(f"rank {r}: {f}" for r, f in zip(ranks, forms))
    return [took, f"received in training: {sizes}; {labels}"]


def audit_line(summary):
    """The label holder's privacy audit of the run (encrypted labels only), as
    the demo report's line (none without it)."""
    got = summary.get("privacy_audit") or {}
    if got.get("passive_labels_recovered_fraction") is None:
        return []
    from .vertical.audit import sentence
    return ["privacy audit: " + sentence(got["passive_labels_recovered_fraction"],
                                         got["majority_baseline_fraction"])]


def report(folder):
    path = os.path.join(folder, SUMMARY)
    if not os.path.isfile(path):
        raise InputError("demo-report", f"no training summary at {path}: train the demo job first "
                                        "(make demo does)")
    with open(path) as fh:
        summary = json.load(fh)
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
             *training_lines(summary), *audit_line(summary),
             "model files: " + ", ".join(os.path.join(folder, "model", d)
                                         for d in sorted(os.listdir(os.path.join(folder, "model")))),
             f"predictions: {os.path.join(folder, 'predictions.csv')}"]
    return "\n".join(lines)
