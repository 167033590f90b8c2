"""A command's outputs never name a file it reads, and a model folder that
cannot be written is refused before any data is read: a clear error, the
inputs untouched, nothing written (fedforest/federation/paths.py)."""
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from fedforest.errors import InputError
from fedforest.federation.paths import check_output_file, check_output_folder, is_model_file
from fedforest.jobs import run_vertical

from _util import ROOT, mpirun, party_frames, write_job
from test_bad_input import snapshot     # every file with its bytes and time: untouched means equal

PYTHON = sys.executable


def frames(n=80, seed=0):
    rng = np.random.default_rng(seed)
    X = np.round(rng.normal(size=(n, 4)), 3)
    y = (X[:, 0] + X[:, 2] > 0).astype(int)
    return party_frames(X, y, [[0, 1], [2, 3]])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-party vertical job trained under mpiexec: (folder, job file)."""
    folder = tmp_path_factory.mktemp("trained")
    job = write_job(str(folder), frames(), "classification", n_estimators=3)
    proc = mpirun(3, ["train", "--config", job])
    assert proc.returncode == 0, proc.stderr
    return folder, job


def test_predict_output_naming_a_party_data_file_is_refused_and_the_file_kept(trained):
    """The demo's mistake: --output names party 1's own input file."""
    folder, job = trained
    before = snapshot(folder)
    proc = mpirun(3, ["predict", "--config", job, "--data", "party1.csv", "party2.csv", "--output", "party1.csv"],
                  cwd=str(folder))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: output: 'party1.csv' is the data file of party 1, which this command reads: writing the file "
        "there would replace it; name another path"], proc.stderr
    assert snapshot(folder) == before


@pytest.mark.parametrize("flags,key,what", [
    (["--output", "job.toml"], "output", "is the job file"),
    (["--output", "model/party-1/manifest.json"], "output", "is a file of the model in"),
    (["--summary-json", "party2.csv"], "summary_json", "is the data file of party 2"),
    (["--output", "p.csv", "--summary-json", "p.csv"], "summary_json", "is also the predictions file (output)"),
    (["--output", "model"], "output", "is a folder: name a file"),
])
def test_predict_outputs_naming_what_it_reads_are_refused(trained, flags, key, what):
    folder, job = trained
    before = snapshot(folder)
    proc = mpirun(3, ["predict", "--config", job, *flags], cwd=str(folder))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {key}: ") and what in lines[0], proc.stderr
    assert snapshot(folder) == before


def test_model_dir_naming_a_file_is_refused_before_the_data_is_read(tmp_path):
    """Was a NotADirectoryError traceback (exit 1) after the trees were grown."""
    job = write_job(str(tmp_path), frames(), "classification", n_estimators=3)
    (tmp_path / "notes.txt").write_text("mine\n")
    # party 2's data file would fail to read: the model_dir error comes first
    (tmp_path / "party2.csv").write_text("not,a\nparty,table\n")
    before = snapshot(tmp_path)
    for model_dir, said in (("notes.txt", "'notes.txt' is a file, not a folder"),
                            ("notes.txt/model", "cannot be created: ")):
        proc = mpirun(3, ["train", "--config", job, "--model-dir", model_dir], cwd=str(tmp_path))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: model_dir: ") and said in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr and "NotADirectoryError" not in proc.stderr
        assert snapshot(tmp_path) == before


def test_training_summary_naming_a_data_file_is_refused_in_process(tmp_path):
    data = [str(tmp_path / f"p{k}.csv") for k in (1, 2)]
    for path, df in zip(data, frames()):
        df.to_csv(path, index=False)
    before = snapshot(tmp_path)
    with pytest.raises(InputError, match=r"summary_json: .*p2\.csv' is the data file of party 2"):
        run_vertical("train", data, task="classification", label_column="y", model_dir=str(tmp_path / "m"),
                     summary_json=data[1], n_estimators=2)
    assert snapshot(tmp_path) == before and not (tmp_path / "m").exists()


def test_horizontal_local_predict_refuses_its_own_rows_file_as_output(tmp_path):
    from _util import client_files
    rng = np.random.default_rng(1)
    df = pd.DataFrame({"a": rng.integers(0, 3, 90), "b": rng.integers(0, 3, 90)})
    df["y"] = (df["a"] > 0).astype(int)
    paths, _ = client_files(df, tmp_path, 2)
    job = tmp_path / "job.toml"
    job.write_text(f'[job]\nmode = "icdta4fl"\ntask = "classification"\ndata = {json.dumps(paths)}\n'
                   'label_column = "y"\nmodel_dir = "model"\nprogress = false\n')
    proc = mpirun(3, ["train", "--config", str(job)])
    assert proc.returncode == 0, proc.stderr
    before = snapshot(tmp_path)
    proc = subprocess.run([PYTHON, "-m", "fedforest", "predict", "--config", str(job), "--data", paths[0],
                           "--output", paths[0]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is the data file of client 1" in proc.stderr, proc.stderr
    assert snapshot(tmp_path) == before


def test_evaluate_json_and_split_out_cannot_replace_their_inputs(tmp_path):
    preds = tmp_path / "p.csv"
    truth = tmp_path / "t.csv"
    preds.write_text("id,prediction\n1,a\n2,b\n")
    truth.write_text("id,y\n1,a\n2,b\n")
    before = snapshot(tmp_path)
    proc = subprocess.run([PYTHON, "-m", "fedforest", "evaluate", "--predictions", str(preds), "--truth",
                           str(truth), "--label-column", "y", "--json", str(truth)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "error: --json: " in proc.stderr and "(--truth)" in proc.stderr, proc.stderr
    # the table to split lies in --out under a name split writes
    table = tmp_path / "train-party1.csv"
    pd.DataFrame({"id": range(8), "a": range(8), "b": range(8), "y": [0, 1] * 4}).to_csv(table, index=False)
    before = snapshot(tmp_path)
    proc = subprocess.run([PYTHON, "-m", "fedforest", "split", "--input", str(table), "--parties", "2",
                           "--label-column", "y", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "is the table to split (--input)" in proc.stderr, proc.stderr
    assert snapshot(tmp_path) == before
    proc = subprocess.run([PYTHON, "-m", "fedforest", "split", "--input", str(table), "--parties", "2",
                           "--label-column", "y", "--out", str(preds)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "error: --out: " in proc.stderr and "is a file, not a folder" in proc.stderr
    assert snapshot(tmp_path) == before


def test_the_checks_themselves(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("x\n")
    os.symlink(data, tmp_path / "link.csv")
    inputs = [("the data file of party 1", str(data))]
    with pytest.raises(InputError, match="is the data file of party 1"):      # through a link
        check_output_file("output", str(tmp_path / "link.csv"), inputs)
    with pytest.raises(InputError, match="is the data file of party 1"):      # another spelling
        check_output_file("output", str(tmp_path / "sub" / ".." / "d.csv"), inputs)
    with pytest.raises(InputError, match="cannot be created: .* is a file, not a folder"):
        check_output_file("output", str(data / "p.csv"), inputs)
    with pytest.raises(InputError, match="model_dir: .* is the data file of party 1"):
        check_output_folder("model_dir", str(data), inputs)
    check_output_file("output", str(tmp_path / "new" / "deeper" / "p.csv"), inputs)     # made where absent
    check_output_folder("model_dir", str(tmp_path / "new" / "model"), inputs)
    assert not (tmp_path / "new").exists()                  # checking writes nothing
    model = tmp_path / "m"
    (model / "party-2" / "trees").mkdir(parents=True)
    (model / "party-2" / "manifest.json").write_text("{}")
    (model / "summary.json").write_text("{}")
    assert is_model_file(str(model / "party-2" / "manifest.json"), str(model))
    assert not is_model_file(str(model / "summary.json"), str(model))       # a file beside the model
    assert not is_model_file(str(model / "party-2" / "absent.npz"), str(model))
    if os.geteuid() != 0:      # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        with pytest.raises(InputError, match="is not writable"):
            check_output_folder("model_dir", str(locked / "model"))
