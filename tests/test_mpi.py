"""Real mpiexec runs (2-5 ranks): losslessness, one-round prediction, tampering,
remote failures and resumed training."""
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification

from fedforest import ForestClassifier
from fedforest.vertical import model_files as model_io

from _util import assert_same_trees, complete_trees, mpirun, party_frames, write_job

FORMATS = {1: "csv", 2: "parquet", 3: "npz", 4: "csv"}


def _data(seed, n=400):
    X, y = make_classification(n, 8, n_informative=5, n_classes=3, n_clusters_per_class=1,
                               random_state=seed)
    X = np.round(X, 2)
    X[np.random.default_rng(seed).random(X.shape) < 0.03] = np.nan
    return X, y


def _groups(n_parties):
    return [list(g) for g in np.array_split(np.arange(8)[::-1], n_parties)]


def _check(proc, ok=True):
    msg = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert (proc.returncode == 0) == ok, msg
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("n_parties", [1, 2, 3, 4])
def test_mpi_train_and_predict_equal_centralized(tmp_path, n_parties):
    X, y = _data(n_parties)
    groups = _groups(n_parties)
    frames = party_frames(X, y, groups, label_party=n_parties // 2)
    job = write_job(str(tmp_path), frames, "classification", n_estimators=5,
                    fmt=FORMATS[n_parties], extra='summary_json = "train.json"')
    out = _check(mpirun(n_parties + 1, ["train", "--config", job]))
    assert "ID alignment: 400 rows" in out
    order = [c for g in groups for c in g]
    est = ForestClassifier(n_estimators=5, random_state=7).fit(X[:, order], y)
    offsets = np.concatenate(([0], np.cumsum([len(g) for g in groups])))
    assert_same_trees(complete_trees(str(tmp_path / "model"), n_parties, offsets), est.estimators_)
    # prediction on new per-party files, rows in a different order per party
    Xt, yt = _data(100 + n_parties, n=150)
    test = party_frames(Xt, yt, groups, label_party=n_parties // 2)
    paths = []
    for p, f in enumerate(test, start=1):
        path = str(tmp_path / f"test{p}.csv")
        f.sample(frac=1.0, random_state=p).to_csv(path, index=False)
        paths.append(path)
    out = _check(mpirun(n_parties + 1, ["predict", "--config", job, "--data", *paths,
                                        "--output", str(tmp_path / "pred.csv"),
                                        "--summary-json", str(tmp_path / "pred.json")]))
    assert "(oneshot, 1 round)" in out
    pred = pd.read_csv(tmp_path / "pred.csv")
    ref = pd.DataFrame({"id": test[0]["id"], "ref": est.predict(Xt[:, order])})
    merged = pred.merge(ref, on="id")
    assert len(merged) == 150
    assert (merged["prediction"] == merged["ref"]).all()
    proba = est.predict_proba(Xt[:, order])
    got = merged[[f"proba_{c}" for c in est.classes_]].to_numpy()
    np.testing.assert_allclose(got, proba[[int(i.split("-")[1]) for i in merged["id"]]], atol=1e-12)


@pytest.mark.parametrize("spec,sender,receiver", [("0:2:4", 0, 2), ("1:0:3", 1, 0)])
def test_mpi_tampered_message_stops_job(tmp_path, spec, sender, receiver):
    X, y = _data(0)
    job = write_job(str(tmp_path), party_frames(X, y, _groups(2)), "classification")
    out = _check(mpirun(3, ["train", "--config", job], env={"FEDFOREST_FAULT_TAMPER": spec},
                        timeout=120), ok=False)
    assert f"message from rank {sender} to rank {receiver} failed authentication" in out
    assert not os.path.exists(tmp_path / "model" / "master" / "manifest.json")


def test_mpi_party_failure_names_rank_and_resume_gives_same_forest(tmp_path):
    X, y = _data(3)
    groups = _groups(3)
    frames = party_frames(X, y, groups, label_party=0)
    job = write_job(str(tmp_path), frames, "classification", n_estimators=6)
    out = _check(mpirun(4, ["train", "--config", job], env={"FEDFOREST_FAULT_CRASH": "2:3"},
                        timeout=120), ok=False)
    assert "error on rank 2" in out and "injected failure after 3 trees" in out
    assert "Traceback" in out
    master = model_io.read_manifest(str(tmp_path / "model" / "master"))
    assert master["n_trees"] == 3 and not master["complete"]
    # a fresh run refuses the existing checkpoint; --resume finishes it
    _check(mpirun(4, ["train", "--config", job], timeout=120), ok=False)
    out = _check(mpirun(4, ["train", "--config", job, "--resume"]))
    assert "resuming from checkpoint: 3 of 6 trees" in out
    order = [c for g in groups for c in g]
    est = ForestClassifier(n_estimators=6, random_state=7).fit(X[:, order], y)
    offsets = np.concatenate(([0], np.cumsum([len(g) for g in groups])))
    assert_same_trees(complete_trees(str(tmp_path / "model"), 3, offsets), est.estimators_)
    assert model_io.read_manifest(str(tmp_path / "model" / "party-2"))["complete"]


DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def test_cli_end_to_end_on_real_data_with_missing_values(tmp_path):
    """split -> train -> predict -> evaluate, as the README describes, on the UCI breast
    cancer (diagnostic) table in tests/data (NA cells; see tests/data/README.md).  Its Id
    column is dropped and the table is split with row numbers as IDs (split creates them)."""
    import subprocess
    import sys
    original = os.path.join(DATA, "breastcancer.csv")
    assert os.path.isfile(original), f"{original} is missing"
    src = str(tmp_path / "breastcancer.csv")
    pd.read_csv(original, na_values=["NA"]).drop(columns=["Id"]).to_csv(src, index=False)
    py = [sys.executable, "-m", "fedforest"]
    parts = tmp_path / "parts"
    run = subprocess.run(py + ["split", "--input", src, "--parties", "3", "--id-column", "Id",
                               "--label-column", "Class", "--label-party", "2",
                               "--test-size", "0.3", "--out", str(parts)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    train = [str(parts / f"train-party{p}.csv") for p in (1, 2, 3)]
    test = [str(parts / f"test-party{p}.csv") for p in (1, 2, 3)]
    common = ["--task", "classification", "--id-column", "Id", "--label-column", "Class",
              "--model-dir", str(tmp_path / "model")]
    out = _check(mpirun(4, ["train", "--data", *train, *common, "--n-estimators", "30", "--random-state", "1"]))
    assert "trained 30 trees" in out
    out = _check(mpirun(4, ["predict", "--data", *test, *common, "--output", str(tmp_path / "p.csv")]))
    assert "(oneshot, 1 round)" in out
    run = subprocess.run(py + ["evaluate", "--predictions", str(tmp_path / "p.csv"), "--truth",
                               test[1], "--id-column", "Id", "--label-column", "Class"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    accuracy = float(next(line for line in run.stdout.splitlines() if "accuracy" in line).split(":")[1])
    assert accuracy > 0.9, run.stdout


@pytest.mark.parametrize("n_parties", [2, 3])
def test_mpi_paillier_labels_equal_centralized(tmp_path, n_parties):
    """Encrypted labels under mpiexec: the same trees as the centralized forest."""
    X, y = _data(20 + n_parties, n=300)
    groups = _groups(n_parties)
    frames = party_frames(X, y, groups, label_party=n_parties - 1)
    job = write_job(str(tmp_path), frames, "classification", n_estimators=3,
                    forest='label_privacy = "paillier"\nkey_length = 512\ninsecure_key = true\n',
                    extra='summary_json = "train.json"')
    out = _check(mpirun(n_parties + 1, ["train", "--config", job, "--max-depth", "5"]))
    assert "labels encrypted" in out and "Paillier key: 512 bits" in out
    order = [c for g in groups for c in g]
    est = ForestClassifier(n_estimators=3, random_state=7, max_depth=5).fit(X[:, order], y)
    offsets = np.concatenate(([0], np.cumsum([len(g) for g in groups])))
    assert_same_trees(complete_trees(str(tmp_path / "model"), n_parties, offsets), est.estimators_)
    manifest = model_io.read_manifest(model_io.party_dir(str(tmp_path / "model"), 0))
    assert manifest["label_privacy"] == "paillier"


def _horizontal_job(folder, n_clients, mode, tree_type="id3"):
    rng = np.random.default_rng(n_clients)
    X = rng.integers(0, 3, size=(90 * n_clients, 5))
    y = np.where((X[:, 0] == 0) | (X[:, 3] == 2), "a", "b")
    df = pd.DataFrame({f"q{j}": np.array(["lo", "mid", "hi"])[X[:, j]] for j in range(5)})
    df["y"] = y
    files = []
    for k, rows in enumerate(np.array_split(rng.permutation(len(df)), n_clients), start=1):
        df.iloc[rows].to_csv(folder / f"c{k}.csv", index=False)
        files.append(f"c{k}.csv")
    toml = folder / "job.toml"
    toml.write_text(f'[job]\nmode = "{mode}"\ntask = "classification"\n'
                    f'data = {files!r}\nlabel_column = "y"\nmodel_dir = "model"\n'
                    f'summary_json = "summary.json"\n[{mode}]\ntree_type = "{tree_type}"\n'.replace("'", '"'))
    return str(toml)


@pytest.mark.parametrize("n_clients,mode", [(2, "icdta4fl"), (4, "icdta4fl"), (3, "federated_id3")])
def test_mpi_horizontal(tmp_path, n_clients, mode):
    job = _horizontal_job(tmp_path, n_clients, mode)
    out = _check(mpirun(n_clients + 1, ["train", "--config", job]))
    assert f"{mode}: {n_clients} clients" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["n_clients"] == n_clients and summary["train_accuracy"] > 0.8
    for r in range(1, n_clients + 1):
        assert (tmp_path / "model" / f"client-{r}" / "model.json").is_file()
    # prediction and explanation are local: no MPI job
    proc = subprocess.run([sys.executable, "-m", "fedforest", "predict", "--config", job, "--data",
                           str(tmp_path / "c1.csv"), "--output", str(tmp_path / "p.csv")],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    pred = pd.read_csv(tmp_path / "p.csv")
    truth = pd.read_csv(tmp_path / "c1.csv")["y"]
    assert (pred["prediction"] == truth).mean() > 0.8


def test_mpi_horizontal_fewer_ranks_than_clients(tmp_path):
    job = _horizontal_job(tmp_path, 3, "icdta4fl")
    out = _check(mpirun(3, ["train", "--config", job]), ok=False)
    assert "names 3 clients but runs 3 ranks; start it with mpiexec -n 4" in out


@pytest.mark.parametrize("n_clients", [2, 3])
def test_mpi_fedxgbllr(tmp_path, n_clients):
    X, y = make_classification(150 * n_clients, 6, n_informative=4, random_state=n_clients)
    df = pd.DataFrame(X, columns=[f"x{j}" for j in range(6)])
    df["y"] = y
    files = []
    for k, rows in enumerate(np.array_split(np.arange(len(df)), n_clients), start=1):
        df.iloc[rows].to_csv(tmp_path / f"c{k}.csv", index=False)
        files.append(f"c{k}.csv")
    toml = tmp_path / "job.toml"
    toml.write_text(f'[job]\nmode = "fedxgbllr"\ntask = "classification"\ndata = {files!r}\n'
                    f'label_column = "y"\nmodel_dir = "model"\nsummary_json = "s.json"\n[fedxgbllr]\n'
                    f'xgb_trees = 40\nrounds = 3\nlocal_epochs = 5\nmax_depth = 3\n'.replace("'", '"'))
    out = _check(mpirun(n_clients + 1, ["train", "--config", str(toml)]))
    assert "fedxgbllr: 4 rounds" in out
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["rounds"] == 4 and summary["train_accuracy"] > 0.8
    assert summary["trees_per_client"] == 40 // n_clients


def test_mpi_unknown_mode_and_a_key_of_another_mode_exit_2_before_any_work(tmp_path):
    job = _horizontal_job(tmp_path, 2, "icdta4fl")
    proc = mpirun(3, ["train", "--config", job, "--mode", "no-such-mode"])
    out = _check(proc, ok=False)
    assert proc.returncode == 2
    assert "unknown mode 'no-such-mode'" in out and "icdta4fl" in out and "vertical" in out
    proc = mpirun(3, ["train", "--config", job, "--label-privacy", "paillier"])
    out = _check(proc, ok=False)
    assert proc.returncode == 2
    assert "key 'label_privacy' is a setting of mode 'vertical' (table [forest]), mode 'vertical_boost' " \
           "(table [boost]); mode 'icdta4fl' does not use it" in out
    assert out.count("error:") == 1, out
    assert not (tmp_path / "model").exists()


@pytest.mark.parametrize("n_parties,privacy", [(2, "plain"), (4, "plain"), (3, "paillier")])
def test_mpi_vertical_boost_equals_single_process(tmp_path, n_parties, privacy):
    """--mode vertical_boost under mpiexec: train, then predict (the model knows its
    mode) equal the single-process BoostClassifier on the pooled columns, with
    gradients in the clear or Paillier-encrypted."""
    from fedforest import BoostClassifier
    X, y = _data(40 + n_parties)
    groups = _groups(n_parties)
    frames = party_frames(X, y, groups, label_party=n_parties - 1)
    paths = []
    for p, f in enumerate(frames, start=1):
        f.to_csv(tmp_path / f"party{p}.csv", index=False)
        paths.append(f"party{p}.csv")
    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nmode = "vertical_boost"\ntask = "classification"\ndata = {paths!r}\n'
                   f'label_column = "y"\nmodel_dir = "model"\nprogress = false\n'
                   f'summary_json = "train.json"\n[boost]\nn_estimators = 8\nmax_depth = 4\n'
                   f'subsample = 0.8\nrandom_state = 3\nlabel_privacy = "{privacy}"\n'
                   f'key_length = 512\ninsecure_key = true\n'.replace("'", '"'))
    out = _check(mpirun(n_parties + 1, ["train", "--config", str(job)]))
    assert "boosted 8 rounds (24 trees)" in out
    summary = json.loads((tmp_path / "train.json").read_text())
    # two exchanges per level and the commit; encrypted: the label holder's decision is a
    # third exchange of a level, and each round starts with its encrypted gradients
    assert summary["rounds_per_boosting_round"] <= (2 * 4 + 1 if privacy == "plain" else 3 * 4 + 2)
    order = [c for g in groups for c in g]
    est = BoostClassifier(n_estimators=8, max_depth=4, subsample=0.8, random_state=3).fit(X[:, order], y)
    offsets = np.concatenate(([0], np.cumsum([len(g) for g in groups])))
    assert_same_trees(complete_trees(str(tmp_path / "model"), n_parties, offsets),
                      [t for r in est.estimators_ for t in r])
    test_paths = [str(tmp_path / p) for p in paths]
    pred_job = tmp_path / "predict.toml"
    # with encrypted gradients the leaf values are the label holder's: it writes the predictions
    pred_job.write_text(f'[job]\ndata = {test_paths!r}\nmodel_dir = "model"\nprogress = false\n'
                        f'[boost]\nresult_party = {n_parties}\n'.replace("'", '"'))
    out = _check(mpirun(n_parties + 1, ["predict", "--config", str(pred_job), "--output",
                                        str(tmp_path / "pred.csv")]))
    assert "(oneshot, 1 round)" in out
    pred = pd.read_csv(tmp_path / "pred.csv")
    rows = [int(i.split("-")[1]) for i in pred["id"]]
    got = pred[[f"proba_{c}" for c in est.classes_]].to_numpy()
    assert np.array_equal(got, est.predict_proba(X[:, order])[rows])
    assert (pred["prediction"].to_numpy() == est.predict(X[:, order])[rows]).all()


@pytest.mark.parametrize("mode", ["vertical_boost", "vertical"])
def test_mpi_hidden_instance_space_predicts_as_single_process(tmp_path, mode):
    """instance_space = "hidden" under mpiexec (3 parties): the parties without
    the labels store thresholds only, and the one-round prediction the label
    holder routes equals the single-process estimator's on the pooled columns."""
    from fedforest import BoostClassifier
    X, y = _data(61, n=240)
    groups = _groups(3)
    frames = party_frames(X, y, groups, label_party=0)
    paths = []
    for p, f in enumerate(frames, start=1):
        f.to_csv(tmp_path / f"party{p}.csv", index=False)
        paths.append(f"party{p}.csv")
    table = "boost" if mode == "vertical_boost" else "forest"
    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nmode = "{mode}"\ntask = "classification"\ndata = {paths!r}\n'
                   f'label_column = "y"\nmodel_dir = "model"\nprogress = false\n'
                   f'[{table}]\nn_estimators = 3\nmax_depth = 3\nrandom_state = 3\nlabel_privacy = "paillier"\n'
                   f'instance_space = "hidden"\nkey_length = 512\ninsecure_key = true\n'.replace("'", '"'))
    _check(mpirun(4, ["train", "--config", str(job)]))
    passive = model_io.read_trees(model_io.party_dir(str(tmp_path / "model"), 2), 3)
    assert all(t["children_left"].shape == (1,) and "hidden_feature" in t for t in passive)
    test_paths = [str(tmp_path / p) for p in paths]
    pred_job = tmp_path / "predict.toml"
    pred_job.write_text(f'[job]\ndata = {test_paths!r}\nmodel_dir = "model"\nprogress = false\n'
                        f'[{table}]\nresult_party = 1\n'.replace("'", '"'))
    out = _check(mpirun(4, ["predict", "--config", str(pred_job), "--output", str(tmp_path / "pred.csv")]))
    assert "(oneshot, 1 round)" in out
    order = [c for g in groups for c in g]
    if mode == "vertical_boost":
        est = BoostClassifier(n_estimators=3, max_depth=3, random_state=3).fit(X[:, order], y)
    else:
        est = ForestClassifier(n_estimators=3, max_depth=3, random_state=3).fit(X[:, order], y)
    pred = pd.read_csv(tmp_path / "pred.csv")
    rows = [int(i.split("-")[1]) for i in pred["id"]]
    got = pred[[f"proba_{c}" for c in est.classes_]].to_numpy()
    np.testing.assert_array_equal(got, est.predict_proba(X[:, order])[rows])
