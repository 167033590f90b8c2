"""The horizontal chain a user runs, through the command line: split by rows ->
train under mpiexec -> predict -> evaluate, on a mixed table (numeric and text
columns, IDs with leading zeros), for every horizontal mode; and what the chain
must refuse."""
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from _util import ROOT, mpirun

HORIZONTAL_MODES = ["icdta4fl", "local", "centralized", "federated_id3", "fedxgbllr", "fedga", "efdt"]
FAST = {"fedxgbllr": ["--xgb-trees", "30", "--rounds", "2", "--local-epochs", "3"],
        "fedga": ["--generations", "5", "--max-depth", "4", "--cv-folds", "2"],
        "efdt": ["--grace-period", "20", "--rounds", "10"]}
PERSONAL = ("local", "fedga")      # every client keeps its own model: no global one


def cli(*args):
    return subprocess.run([sys.executable, "-m", "fedforest", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)


def mixed_table(n=360, seed=0):
    """Numeric (few distinct values, so ID3 takes them too) and text columns;
    the label follows a rule on both kinds, with 5 % noise."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "id": [f"{i:05d}" for i in range(n)],
        "age": rng.integers(0, 10, n),
        "score": np.round(rng.uniform(0, 3, n), 1),
        "color": rng.choice(["red", "green", "blue"], n),
        "size": rng.choice(["S", "M", "L"], n).astype(object),
    })
    df.loc[rng.random(n) < 0.05, "size"] = None
    yes = ((df["color"] == "red") & (df["age"] >= 4)) | ((df["color"] != "red") & (df["score"] > 1.5))
    flip = rng.random(n) < 0.05
    df["label"] = np.where(yes ^ flip, "yes", "no")
    return df


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chain")
    table = folder / "table.csv"
    mixed_table().to_csv(table, index=False)
    proc = cli("split", "--input", str(table), "--by", "rows", "--parties", "3", "--label-column", "label",
               "--test-size", "0.25", "--out", str(folder / "clients"))
    assert proc.returncode == 0, proc.stderr
    return folder


def test_split_by_rows_keeps_the_ids_as_text_in_every_file(clients):
    seen = []
    for k in (1, 2, 3):
        for name in (f"client{k}.csv", f"client{k}-test.csv"):
            df = pd.read_csv(clients / "clients" / name, dtype={"id": str})
            assert list(df.columns)[0] == "id" and df["id"].str.len().eq(5).all()
            seen += df["id"].tolist()
    assert sorted(seen) == [f"{i:05d}" for i in range(360)]


def test_split_by_rows_creates_the_id_column_when_the_table_has_none(tmp_path):
    mixed_table(60).drop(columns="id").to_csv(tmp_path / "t.csv", index=False)
    proc = cli("split", "--input", str(tmp_path / "t.csv"), "--by", "rows", "--parties", "2",
               "--label-column", "label", "--id-column", "row", "--out", str(tmp_path / "c"))
    assert proc.returncode == 0, proc.stderr
    ids = [pd.read_csv(tmp_path / "c" / f"client{k}.csv")["row"].tolist() for k in (1, 2)]
    assert sorted(ids[0] + ids[1]) == list(range(1, 61))


def _train(clients, mode, model_dir, *extra):
    data = [str(clients / "clients" / f"client{k}.csv") for k in (1, 2, 3)]
    return mpirun(4, ["train", "--mode", mode, "--task", "classification", "--label-column", "label",
                      "--data", *data, "--model-dir", str(model_dir), "--random-state", "3",
                      "--summary-json", str(model_dir) + ".json", "--progress", "false", *extra])


@pytest.mark.parametrize("mode", HORIZONTAL_MODES)
def test_split_train_predict_evaluate_chain(clients, mode, tmp_path):
    model = tmp_path / "model"
    proc = _train(clients, mode, model, *FAST.get(mode, []))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "model.json").read_text())
    assert summary["random_state"] == 3
    test = clients / "clients" / "client2-test.csv"
    # a job without a global model: predict with one client's own model
    model_dir = model / "client-2" if mode in PERSONAL else model
    out = tmp_path / "pred.csv"
    proc = cli("predict", "--model-dir", str(model_dir), "--data", str(test), "--output", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr     # no --mode: read from the model
    pred = pd.read_csv(out, dtype={"id": str})
    truth = pd.read_csv(test, dtype={"id": str})
    assert pred["id"].tolist() == truth["id"].tolist()         # IDs as written, leading zeros kept
    proc = cli("evaluate", "--predictions", str(out), "--truth", str(test), "--label-column", "label")
    assert proc.returncode == 0, proc.stderr
    accuracy = (pred["prediction"].to_numpy() == truth["label"].to_numpy()).mean()
    assert f"{accuracy:.4f}" in proc.stdout
    majority = truth["label"].value_counts(normalize=True).max()
    assert accuracy >= majority + 0.1, (mode, accuracy, majority)   # a constant model does not pass
    proc = cli("explain", "--model-dir", str(model_dir), "--data", str(test), "--row", "2")
    assert proc.returncode == 0, proc.stderr
    if mode == "fedxgbllr":                                       # learning rates, the same for every row
        assert "per-tree learning rates" in proc.stdout and "client 3:" in proc.stdout
    elif mode != "efdt":
        assert "row 2 (" in proc.stdout and "THEN" in proc.stdout
    if mode in ("icdta4fl", "centralized"):                       # CART rules on numbers and text codes
        assert "IF " in proc.stdout and (" <= " in proc.stdout or " > " in proc.stdout)


def test_a_second_train_into_the_same_folder_is_refused_and_overwrite_swaps(clients, tmp_path):
    model = tmp_path / "model"
    assert _train(clients, "icdta4fl", model).returncode == 0
    before = {p: p.read_bytes() for p in model.rglob("model.json")}
    assert len(before) == 4                                    # server + 3 clients
    proc = _train(clients, "icdta4fl", model, "--tree-type", "id3")
    assert proc.returncode != 0
    assert "already holds a model; use another model_dir or pass --overwrite" in proc.stdout + proc.stderr
    assert {p: p.read_bytes() for p in model.rglob("model.json")} == before
    proc = _train(clients, "icdta4fl", model, "--tree-type", "id3", "--overwrite")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = {p: p.read_bytes() for p in model.rglob("model.json")}
    assert set(after) == set(before) and all(after[p] != before[p] for p in after)
    assert not [p for p in os.listdir(model) if p.startswith(".")]   # no staging folder left behind


def test_predict_on_a_local_job_folder_names_the_client_folders(clients, tmp_path):
    model = tmp_path / "model"
    assert _train(clients, "local", model).returncode == 0
    proc = cli("predict", "--model-dir", str(model), "--data", str(clients / "clients" / "client1-test.csv"),
               "--output", str(tmp_path / "p.csv"))
    assert proc.returncode == 2
    assert "holds no global model: each client keeps its own (3 client folders)" in proc.stderr
    assert str(model / "client-1") in proc.stderr
    assert not (tmp_path / "p.csv").exists()


def test_unset_random_state_draws_a_fresh_seed(clients, tmp_path):
    from fedforest.jobs import run_horizontal
    data = [str(clients / "clients" / f"client{k}.csv") for k in (1, 2, 3)]
    seeds = set()
    for k in range(2):
        s = run_horizontal(data, mode="fedxgbllr", task="classification", label_column="label",
                           model_dir=str(tmp_path / f"m{k}"), xgb_trees=6, rounds=1, local_epochs=1,
                           progress=False, quiet=True)
        seeds.add(s["random_state"])
    assert len(seeds) == 2


def test_federated_id3_sets_its_tree_type_and_refuses_another(clients, tmp_path):
    from fedforest.errors import InputError
    from fedforest.jobs import run_horizontal
    data = [str(clients / "clients" / f"client{k}.csv") for k in (1, 2, 3)]
    s = run_horizontal(data, mode="federated_id3", task="classification", label_column="label",
                       model_dir=str(tmp_path / "m"), progress=False, quiet=True)
    assert s["tree_type"] == "id3"
    with pytest.raises(InputError, match="tree_type: must be 'id3', got 'cart'"):
        run_horizontal(data, mode="federated_id3", tree_type="cart", task="classification",
                       label_column="label", model_dir=str(tmp_path / "m2"), progress=False, quiet=True)


def test_text_columns_are_encoded_for_cart_and_xgboost(clients, tmp_path):
    from fedforest.horizontal.model_files import load_model
    from fedforest.jobs import run_horizontal
    data = [str(clients / "clients" / f"client{k}.csv") for k in (1, 2, 3)]
    run_horizontal(data, mode="centralized", task="classification", label_column="label",
                   model_dir=str(tmp_path / "m"), random_state=0, progress=False, quiet=True)
    enc = load_model(str(tmp_path / "m"))["encoding"]
    by_name = dict(zip(enc.columns, enc.categories))
    assert by_name["color"] == ["blue", "green", "red"] and by_name["age"] is None
    assert by_name["size"] == ["L", "M", "S", "NA"]            # missing text is a category of its own
