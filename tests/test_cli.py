"""What the command line shows a user: version, settings predict refuses, the
training summary kept by predict, progress bars only on a terminal."""
import json
import subprocess
import sys

import numpy as np
from sklearn.datasets import make_classification

from fedforest.version import __version__

from _util import ROOT, mpirun, party_frames, write_job


def test_version():
    proc = subprocess.run([sys.executable, "-m", "fedforest", "--version"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"fedforest {__version__}"


def test_importing_the_kernels_leaves_the_environment_alone():
    # OMP_WAIT_POLICY is fedforest's choice for its own processes only, not for a user's
    # process that imports the package beside scikit-learn or XGBoost
    code = "import os, fedforest.tree.splitter, fedforest.tree.threads; print(os.environ.get('OMP_WAIT_POLICY'))"
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "None", proc.stderr


def test_vertical_predict_keeps_the_training_summary_and_refuses_training_flags(tmp_path):
    X, y = make_classification(200, 4, random_state=0)
    frames = party_frames(np.round(X, 3), y, [[0, 1], [2, 3]])
    job = write_job(str(tmp_path), frames, "classification", n_estimators=3, extra='summary_json = "train.json"')
    text = open(job).read().replace("progress = false\n", "")    # the default: bars only on a terminal
    open(job, "w").write(text)
    proc = mpirun(3, ["train", "--config", job])
    assert proc.returncode == 0, proc.stderr
    assert "training trees" not in proc.stderr          # no progress bar into a file or pipe
    status = [line for line in proc.stdout.splitlines() if line.strip()]
    assert status and all(line.startswith("[rank 0] ") for line in status)   # only the master speaks
    assert any("ID alignment: 200 rows" in line for line in status)
    trained = (tmp_path / "train.json").read_text()
    # plain labels: the summary says every rank received them in plaintext, and how many bytes each received
    doc = json.loads(trained)
    assert doc["labels_received"] == {str(r): {"form": "plaintext", "rows": 200} for r in range(3)}
    assert sorted(doc["bytes_received"]) == ["0", "1", "2"] and all(v > 0 for v in doc["bytes_received"].values())
    paths = [str(tmp_path / f"party{p}.csv") for p in (1, 2)]
    proc = mpirun(3, ["predict", "--config", job, "--data", *paths, "--output", str(tmp_path / "p.csv"),
                      "--n-estimators", "9", "--max-depth", "2"])
    assert proc.returncode == 2
    assert proc.stderr.count("error:") == 1
    assert "--max-depth, --n-estimators are training settings; predict uses the model's own" in proc.stderr
    assert not (tmp_path / "p.csv").exists()
    proc = mpirun(3, ["predict", "--config", job, "--data", *paths, "--output", str(tmp_path / "p.csv")])
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "train.json").read_text() == trained          # the training summary is kept
    predicted = json.loads((tmp_path / "train-predict.json").read_text())
    assert predicted["method"] == "oneshot" and predicted["n_rows"] == 200


def _demo_recipe():
    """The commands of the Makefile's ``demo`` target, continuation lines joined."""
    lines, inside = [], False
    for line in open(f"{ROOT}/Makefile"):
        if line.startswith("demo:"):
            inside = True
            continue
        if inside:
            if not line.startswith("\t"):
                break
            lines.append(line.strip())
    commands, current = [], ""
    for line in lines:
        current += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            commands.append(current.strip())
            current = ""
    return commands


def test_make_demo_runs_end_to_end(tmp_path):
    """What ``make demo`` runs (read from the Makefile), into a temporary folder."""
    import os
    import shlex
    from _util import find_mpiexec
    commands = _demo_recipe()
    assert len(commands) == 4 and "demo-data" in commands[0] and "demo-report" in commands[-1]
    out = str(tmp_path / "demo")
    for command in commands:
        command = (command.replace("$(MPIEXEC)", find_mpiexec()).replace("$(PY)", sys.executable)
                   .replace("$(DEMO)", out))
        proc = subprocess.run(shlex.split(command), cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{command}\n{proc.stdout}\n{proc.stderr}"
    report = proc.stdout
    fed = [line for line in report.splitlines() if line.startswith("Federated Forest")][0].split()
    ref = [line for line in report.splitlines() if line.startswith("scikit-learn RandomForest")][0].split()
    assert float(fed[-2]) >= float(ref[-2]) - 0.03        # accuracy within 3 points of scikit-learn's
    assert os.path.isfile(os.path.join(out, "predictions.csv"))
    # the labels stayed with party 1: the report says so from the training's own summary
    with open(os.path.join(out, "train-summary.json")) as fh:
        summary = json.load(fh)
    assert summary["label_privacy"] == "paillier" and summary["key_length"] == 2048
    assert sorted(summary["labels_received"]) == ["0", "2"]
    assert {g["form"] for g in summary["labels_received"].values()} == {"paillier ciphertexts"}
    took = [line for line in report.splitlines() if line.startswith("training took ")]
    assert len(took) == 1 and f"{summary['total_seconds']:.1f} s" in took[0] and "2048-bit Paillier key" in took[0]
    got = [line for line in report.splitlines() if line.startswith("received in training: ")]
    assert len(got) == 1 and "the master " in got[0] and "party 2 " in got[0] and "party 1 " not in got[0], got
    assert "labels only as Paillier ciphertexts" in got[0] and "no label in plaintext" in got[0], got


def test_the_demo_report_says_what_each_rank_received_from_the_summary():
    """The report's lines come from the run summary: plain labels are called plaintext."""
    from fedforest.demo import training_lines
    base = {"total_seconds": 3.31, "train_seconds": 2.5, "n_trees": 100,
            "bytes_received": {"0": 2_000_000, "1": 3_000_000, "2": 4_500_000}}
    plain = dict(base, label_privacy="plain",
                 labels_received={r: {"form": "plaintext", "rows": 426} for r in ("0", "1", "2")})
    took, got = training_lines(plain)
    assert took == "training took 3.3 s (2.5 s growing the 100 trees)"
    assert got == "received in training: the master 2.0 MB, party 1 3.0 MB, party 2 4.5 MB; the 426 labels in plaintext"
    cipher = {"form": "paillier ciphertexts", "rows": 426, "bytes": 218_112, "key_holder": 1}
    he = dict(base, label_privacy="paillier", key_length=2048, label_encrypt_seconds=0.74,
              labels_received={"0": cipher, "2": cipher})
    took, got = training_lines(he)
    assert took == ("training took 3.3 s (0.7 s of it encrypting the labels under a 2048-bit Paillier key of "
                    "party 1, 2.5 s growing the 100 trees)")
    assert got == ("received in training: the master 2.0 MB, party 2 4.5 MB; the 426 labels only as Paillier "
                   "ciphertexts (0.2 MB; the private key stays with party 1), no label in plaintext")


def test_the_settings_reference_in_docs_matches_the_modes():
    from fedforest.cli import settings_markdown
    text = open(f"{ROOT}/docs/config.md").read()
    block = text.split("<!-- settings:begin -->")[1].split("<!-- settings:end -->")[0]
    assert block.strip() == settings_markdown().strip(), \
        "docs/config.md is stale: run python -m fedforest modes --markdown and paste it between the markers"


def test_a_job_rank_loads_its_kernels_and_freezes_its_start_up_heap_before_the_job():
    """Mode.prepare_rank (the command line's job ranks): the vertical mode's
    warm_up role loads the kernels of the job's kind, then the objects alive so
    far leave the collector's view and collection is on again; other commands
    run with collection on and nothing frozen."""
    code = (
        "import gc, json, fedforest.cli as cli\n"
        "from fedforest.federation.config import resolve\n"
        "from fedforest.tree import predict\n"
        "from fedforest.vertical import tree_grower\n"
        "gc.disable()\n"
        "cfg = resolve(None, {'task': 'regression', 'split_method': 'exact', 'data': ['a.csv', 'b.csv'],\n"
        "                     'label_column': 'y'})\n"
        "cfg.spec.prepare_rank(cfg, 'train')\n"
        "out = {'warm': sorted(map(list, tree_grower._WARM)), 'predict_warm': bool(predict._WARM),\n"
        "       'frozen': gc.get_freeze_count() > 0, 'enabled': gc.isenabled()}\n"
        "gc.unfreeze()\n"
        "cli.main(['modes'])\n"
        "out['modes_enabled'] = gc.isenabled(); out['modes_frozen'] = gc.get_freeze_count()\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"warm": [["exact", False]], "predict_warm": False, "frozen": True, "enabled": True,
                   "modes_enabled": True, "modes_frozen": 0}


def _help(command):
    proc = subprocess.run([sys.executable, "-m", "fedforest", command, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_predict_and_serve_help_show_their_own_options():
    train, predict, serve = _help("train"), _help("predict"), _help("serve")
    assert "--max-depth VALUE" in train and "--n-estimators VALUE" in train
    for text in (predict, serve):
        assert "--max-depth VALUE" not in text and "--n-estimators VALUE" not in text
        assert "--label-privacy" not in text
        assert len(text.splitlines()) < len(train.splitlines()) / 4
    assert "--output" in predict and "--predict-method" in predict and "--model-dir" in predict
    assert "--predict" in serve and "--reply-timeout" in serve and "--data" not in serve
    assert "python -m fedforest train --help" in serve


def test_network_help_shows_resume_and_overwrite(monkeypatch):
    # docs/network.md restarts a stopped job with serve --resume and join --resume, and a party's
    # error about a model already in its model_dir says to pass --overwrite
    serve, join = _help("serve"), _help("join")
    assert "--resume" in serve and "continue training from the checkpoint" in " ".join(serve.split())
    assert "--overwrite" in join and "--resume" in join
    from fedforest import cli
    args = cli.build_parser().parse_args(["join", "--config", "p.toml", "--overwrite"])
    assert args.overwrite is True and args.resume is False
    assert cli.build_parser().parse_args(["serve", "--config", "j.toml", "--resume"]).resume is True
    got = {}
    monkeypatch.setattr("fedforest.federation.network.join", lambda config, **kw: got.update(kw) or 0)
    assert args.func(args) == 0
    assert got == {"resume": False, "data": None, "overwrite": True}


def test_keygen_says_who_sends_what(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fedforest", "keygen", "--out", str(tmp_path), "--name", "m"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "send it to the master)" not in proc.stdout
    assert "a party sends it to the master" in proc.stdout and "the master keeps its own" in proc.stdout


def test_progress_choice_and_lines_for_logs(monkeypatch):
    import io
    from tqdm import tqdm
    from fedforest import logs

    class Pipe(io.StringIO):
        def isatty(self):
            return False
    assert logs.progress_choice({}, Pipe()) is False
    assert logs.progress_choice({"FEDFOREST_PROGRESS": "0"}, Pipe(), under_launcher=True) is False
    assert logs.progress_choice({"FEDFOREST_PROGRESS": "1"}, Pipe()) is True
    out = Pipe()
    monkeypatch.setattr(sys, "stderr", out)
    bar = tqdm(total=5, desc="training trees", **logs.progress_options())
    for _ in range(5):
        bar.update(1)
    bar.close()
    assert "\r" not in out.getvalue() and "training trees" in out.getvalue()
    assert all(line.startswith("training trees") for line in out.getvalue().splitlines())
    logs.progress_choice({}, Pipe())                # back to the default style
    assert logs.progress_options() == {}


def test_the_master_shows_progress_when_mpiexec_runs_at_a_terminal(tmp_path):
    """Ranks only see pipes; rank 0 looks at the terminal of the mpiexec that started it."""
    import os
    import select
    from _util import find_mpiexec
    X, y = make_classification(200, 6, random_state=0)
    job = write_job(str(tmp_path), party_frames(X, y, [[0, 1, 2], [3, 4, 5]]), "classification",
                    n_estimators=5)
    with open(job) as fh:
        text = fh.read().replace("progress = false\n", "")
    with open(job, "w") as fh:
        fh.write(text)
    env = {k: v for k, v in os.environ.items() if k != "FEDFOREST_PROGRESS"}
    master_fd, slave_fd = os.openpty()
    proc = subprocess.Popen([find_mpiexec(), "-n", "3", sys.executable, "-m", "fedforest", "train",
                             "--config", job], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave_fd)
    os.close(slave_fd)
    seen = b""
    while True:
        ready, _, _ = select.select([master_fd], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master_fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
        if proc.poll() is not None and not select.select([master_fd], [], [], 0.5)[0]:
            break
    proc.communicate(timeout=120)
    os.close(master_fd)
    assert proc.returncode == 0, seen
    assert b"training trees" in seen and b"5/5" in seen, seen
    # without a terminal anywhere: no bar
    proc = subprocess.run([find_mpiexec(), "-n", "3", sys.executable, "-m", "fedforest", "train", "--config",
                           job, "--overwrite"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "training trees" not in proc.stdout + proc.stderr, proc.stderr
