"""Vertical boosting over the TCP transport: master and parties as separate
``fedforest serve`` / ``join`` processes on loopback grow the trees of the
in-process run, with encrypted gradients."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from fedforest.crypto.identity import keygen
from fedforest.jobs import run_job

from _util import ROOT, assert_same_trees, complete_trees, make_table, party_frames

GROUPS = [[0, 2, 4, 6], [1, 3, 5, 7]]
SETTINGS = {"n_estimators": 3, "max_depth": 3, "random_state": 5, "learning_rate": 0.5,
            "label_privacy": "paillier", "key_length": 512, "insecure_key": True, "n_jobs": 1}


def _toml(value):
    return str(value).lower() if isinstance(value, bool) else (f'"{value}"' if isinstance(value, str) else value)


def _start(args):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "fedforest"] + args, cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return {name: keygen(str(folder), name) for name in ("master", "p1", "p2")}


def test_boosting_over_tcp_equals_the_in_process_run(tmp_path, keys):
    X, y = make_table("classification", 2, 3, 200, 8, 0.05)
    frames = party_frames(X, y, GROUPS)
    job = ['[job]', 'mode = "vertical_boost"', 'task = "classification"', 'label_column = "y"',
           'model_dir = "model"', 'progress = false', '', '[boost]']
    job += [f"{k} = {_toml(v)}" for k, v in SETTINGS.items()]
    job += ['', '[network]', 'listen = "127.0.0.1:0"', f'certificate = "{keys["master"][1]}"',
            f'key = "{keys["master"][0]}"']
    for p in ("p1", "p2"):
        job += ['[[network.parties]]', f'name = "{p}"', f'fingerprint = "{keys[p][2]}"',
                f'certificate = "{keys[p][1]}"']
    (tmp_path / "job.toml").write_text("\n".join(job) + "\n")
    master = _start(["serve", "--config", str(tmp_path / "job.toml")])
    m = re.search(r"listening on [\d.]+:(\d+)", master.stdout.readline())
    assert m, master.stderr.read()
    parties = []
    for name, frame in zip(("p1", "p2"), frames):
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
        key, cert, _ = keys[name]
        (tmp_path / f"{name}.toml").write_text(
            f'[job]\ndata = "{tmp_path / (name + ".csv")}"\nmodel_dir = "{tmp_path / ("model-" + name)}"\n'
            + ('label_column = "y"\n' if name == "p1" else "") +
            f'n_jobs = 1\n\n[network]\nname = "{name}"\nmaster = "127.0.0.1:{m.group(1)}"\n'
            f'master_fingerprint = "{keys["master"][2]}"\ncertificate = "{cert}"\nkey = "{key}"\n'
            f'connect_timeout = 20\n')
        parties.append(_start(["join", "--config", str(tmp_path / f"{name}.toml")]))
    out, err = master.communicate(timeout=480)
    ends = [(p.wait(timeout=60), *p.communicate(timeout=60)) for p in parties]
    assert master.returncode == 0, err
    assert all(e[0] == 0 for e in ends), ends
    assert "boosted 3 rounds" in out + err
    ref = str(tmp_path / "ref")
    run_job("train", frames, mode="vertical_boost", task="classification", label_column="y",
            model_dir=ref, **SETTINGS)
    for rank, name in ((1, "p1"), (2, "p2")):
        os.rename(str(tmp_path / f"model-{name}" / f"party-{rank}"), str(tmp_path / "model" / f"party-{rank}"))
    offsets = np.cumsum([0] + [len(g) for g in GROUPS])
    trees = complete_trees(str(tmp_path / "model"), 2, offsets)
    assert len(trees) == 3 and sum(int((t["children_left"] >= 0).sum()) for t in trees) >= 3
    assert_same_trees(trees, complete_trees(ref, 2, offsets))
