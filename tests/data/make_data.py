"""Regenerate ``breastcancer.csv`` in this folder from scikit-learn's bundled copy of the
UCI Breast Cancer Wisconsin (Diagnostic) data.

Run by hand from the repository root (the tests only read the CSV):

    python tests/data/make_data.py

Layout of the output (``Id`` first, features, ``Class`` last, ``NA`` for a missing cell):

* ``Id``: the row number 1..569.  scikit-learn does not ship the original sample IDs.
* 30 numeric features: scikit-learn's feature names with spaces replaced by ``_``
  (``mean_radius`` ... ``worst_fractal_dimension``), values as scikit-learn stores them.
* ``Class``: ``benign`` or ``malignant``.

The source has no missing values.  So that the file exercises missing-value handling,
this script blanks 1% of the feature cells, chosen with a fixed seed, and writes them as ``NA``.
"""
import os

import numpy as np
from sklearn.datasets import load_breast_cancer

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "breastcancer.csv")
MISSING_FRACTION = 0.01
SEED = 0


def make_breastcancer():
    bunch = load_breast_cancer(as_frame=True)
    features = bunch.data.copy()
    features.columns = [c.replace(" ", "_") for c in features.columns]
    rng = np.random.default_rng(SEED)
    blank = rng.random(features.shape) < MISSING_FRACTION
    features = features.mask(blank)
    table = features.copy()
    table.insert(0, "Id", np.arange(1, len(table) + 1))
    table["Class"] = bunch.target_names[bunch.target.to_numpy()]
    return table


def main():
    table = make_breastcancer()
    table.to_csv(OUT, index=False, na_rep="NA")
    n_missing = int(table.isna().sum().sum())
    print(f"wrote {OUT}: {table.shape[0]} rows, {table.shape[1]} columns, {n_missing} NA cells")


if __name__ == "__main__":
    main()
