"""Every experiment and benchmark script answers --help without running, and
names where its results come from."""
import glob
import os
import subprocess
import sys

import pytest

from _util import ROOT

SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "experiments", "*.py"))
                 if not os.path.basename(p).startswith("_") and os.path.basename(p) != "provenance.py")


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_describes_the_script_and_runs_nothing(script, tmp_path):
    before = set(os.listdir(os.path.join(ROOT, "experiments", "results")))
    proc = subprocess.run([sys.executable, os.path.join("experiments", script), "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and len(proc.stdout.splitlines()) > 3
    assert set(os.listdir(os.path.join(ROOT, "experiments", "results"))) == before


def test_results_are_refused_from_uncommitted_code(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "experiments"))
    import provenance
    monkeypatch.setattr(provenance, "git_state", lambda: ("0123456789abcdef", True))
    with pytest.raises(SystemExit, match="uncommitted changes.*0123456789ab.*--allow-dirty"):
        provenance.record(None)

    class Args:
        allow_dirty = True
    got = provenance.record(Args())
    assert got["git_commit"] == "0123456789abcdef" and got["fedforest_uncommitted_changes"] is True
    monkeypatch.setattr(provenance, "git_state", lambda: ("fedcba9876543210", False))
    assert provenance.record(None)["fedforest_uncommitted_changes"] is False


def test_readme_figures_agree_with_the_committed_results():
    proc = subprocess.run([sys.executable, os.path.join("experiments", "readme_figures.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(os.path.join(ROOT, "README.md")) as fh:
        text = fh.read()
    block = text.split("<!-- figures:begin -->")[1].split("<!-- figures:end -->")[0]
    assert block.count("\n| ") >= 8          # the figures are there, not an empty table
    prose = text.split("<!-- first-contact:begin -->")[1].split("<!-- first-contact:end -->")[0]
    assert "make demo" in prose and prose.count(" s") >= 7   # the paragraph is there, with its times


def test_readme_first_contact_figures_come_from_bench_startup():
    """Every time in README's first-contact paragraph is a field of bench_startup.json
    (whatever it holds); a missing field stops the generator, naming it."""
    sys.path.insert(0, os.path.join(ROOT, "experiments"))
    import readme_figures
    doc = {"fresh_clone_make_demo_seconds": 171.4, "fresh_clone_setup_seconds": 139.2,
           "fresh_clone_demo_seconds": 32.2, "fresh_clone_demo_train_seconds": 21.06,
           "cold_compile_seconds_vertical": 58.31, "cold_compile_seconds_all": 117.6, "rank_startup_seconds": 0.8123,
           "git_commit": "0123456789abcdef", "load_average_start": 2.345}
    text = " ".join(readme_figures.first_contact(doc).split())
    for shown in ("took 171 s: 139 s to create", "32.2 s for the demo", "encrypted labels took 21.1 s",
                  "vertical job takes 58.3 s", "every kernel 118 s", "ready to work 0.812 s", "commit `0123456`",
                  "load average of 2.3 when"):
        assert shown in text, (shown, text)
    with pytest.raises(SystemExit, match="lacks fresh_clone_demo_train_seconds, git_commit"):
        readme_figures.first_contact({k: v for k, v in doc.items()
                                      if k not in ("fresh_clone_demo_train_seconds", "git_commit")})


def test_random_forest_peers_of_the_vertical_benchmarks():
    """The peers of bench_vertical.py and scaling_vertical.py: XGBoost's forest is one
    round of parallel trees (the trees of its random-forest mode), LightGBM runs in its
    random-forest mode, and both get the same row share, per-node feature share and bins."""
    import math
    import warnings

    import numpy as np
    import xgboost as xgb
    from sklearn.datasets import make_classification

    sys.path.insert(0, os.path.join(ROOT, "experiments"))
    import bench_vertical as bv
    import scaling_vertical as sv

    X, y = make_classification(n_samples=600, n_features=12, random_state=0)
    train, test = (X[:500], y[:500]), (X[500:], y[500:])
    share = math.sqrt(12) / 12

    model = bv.xgboost_rf(7, 3, 12, n_jobs=1)
    got = bv.peer_params(model, bv.XGBOOST_PARAMS)
    assert type(model) is xgb.XGBClassifier
    assert got == {"n_estimators": 1, "num_parallel_tree": 7, "learning_rate": 1, "max_depth": 3,
                   "subsample": bv.PEER_ROW_FRACTION, "colsample_bynode": share, "reg_lambda": 1e-5,
                   "tree_method": "hist", "max_bin": bv.PEER_MAX_BIN, "n_jobs": 1, "random_state": bv.SEED}
    model.fit(*train)
    assert len(model.get_booster().get_dump()) == 7
    if hasattr(xgb, "XGBRFClassifier"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rf = xgb.XGBRFClassifier(n_estimators=7, max_depth=3, subsample=bv.PEER_ROW_FRACTION,
                                     colsample_bynode=share, tree_method="hist", max_bin=bv.PEER_MAX_BIN,
                                     n_jobs=1, random_state=bv.SEED).fit(*train)
        assert rf.get_booster().get_dump() == model.get_booster().get_dump()

    model = bv.lightgbm_rf(7, 3, 12, n_jobs=1)
    assert bv.peer_params(model, bv.LIGHTGBM_PARAMS) == {
        "boosting_type": "rf", "n_estimators": 7, "bagging_fraction": bv.PEER_ROW_FRACTION,
        "bagging_freq": 1, "feature_fraction_bynode": share, "max_depth": 3, "num_leaves": 8,
        "max_bin": bv.PEER_MAX_BIN, "min_child_samples": 1, "n_jobs": 1, "random_state": bv.SEED}
    assert bv.lightgbm_rf(7, 30, 12).get_params()["num_leaves"] == bv.LIGHTGBM_MAX_LEAVES
    for run in (bv.run_sklearn, bv.run_xgboost, bv.run_lightgbm):
        res = run(train, test, 7, 3)
        assert res["fit_seconds"] > 0 and res["accuracy"] > 0.7, (run.__name__, res)

    got = sv.peers(X, y, 5, 3, 1)
    assert sorted(got) == sorted(sv.PEER_KEYS) == ["lightgbm_seconds", "sklearn_seconds", "xgboost_seconds"]
    row = sv.add_ratios(dict(got, train_seconds=1.0))
    assert row["ratio_vs_lightgbm"] == 1.0 / got["lightgbm_seconds"]
    assert np.isfinite([row[f"ratio_vs_{name}"] for name in ("sklearn", "xgboost", "lightgbm")]).all()
