"""A party's own ``max_key_length`` bounds the job's Paillier key from above
(issue 47, item 3): a huge ``key_length`` would tie up the label holder (key
generation, every decryption) and the parties that sum under that key.  The
label holder refuses it before it makes a key, a passive party before it
accepts the relayed public key, and in a network job the bound comes from the
party's own file only.  The jobs refused here stop before any key is made, so
they run the secure 3072-bit length against a bound of 2048 at no cost."""
import json
import os

import numpy as np
import pytest
from sklearn.datasets import make_classification

from fedforest.crypto import paillier as P
from fedforest.errors import InputError, RemoteError
from fedforest.federation.config import resolve
from fedforest.federation.network import Policy, _accept_job, _party_local
from fedforest.jobs import run_job
from fedforest.vertical.job_party import public_key

from _util import job_message, party_frames

GROUPS = [[0, 1], [2, 3]]
OPTS = dict(task="classification", label_column="y", n_estimators=2, random_state=3, max_depth=3, n_jobs=1)
MODES = ["vertical", "vertical_boost"]


def _frames(n=80, seed=0):
    X, y = make_classification(n, 4, n_informative=3, n_redundant=0, n_classes=2, random_state=seed)
    return party_frames(np.round(X, 2), y, GROUPS, label_party=1)   # party 2 holds the label


def _files(folder):
    return sorted(os.path.relpath(os.path.join(r, f), folder) for r, _, fs in os.walk(folder) for f in fs)


@pytest.mark.parametrize("mode", MODES)
def test_a_key_above_the_partys_bound_is_refused_before_training(tmp_path, mode, monkeypatch):
    made = []
    orig = P.generate_keypair
    monkeypatch.setattr(P, "generate_keypair", lambda *a, **k: made.append(a) or orig(*a, **k))
    with pytest.raises(RemoteError) as err:
        run_job("train", _frames(), mode=mode, model_dir=str(tmp_path / "m"), label_privacy="paillier",
                key_length=3072, max_key_length=2048, **OPTS)
    assert err.value.rank == 2 and err.value.exc_type == "InputError"
    assert "key_length: 3072 is above party 2's max_key_length 2048 (set max_key_length in party 2's own " \
           "file to allow it)" in err.value.remote_message
    assert made == []                                       # no key was made
    assert _files(tmp_path) == []                           # and no model file written


@pytest.mark.parametrize("mode", MODES)
def test_a_key_within_the_bound_trains(tmp_path, mode):
    summary = run_job("train", _frames(), mode=mode, model_dir=str(tmp_path / "m"), label_privacy="paillier",
                      key_length=512, insecure_key=True, max_key_length=2048, **OPTS)
    assert summary is not None
    assert any(f.endswith(".json") for f in _files(tmp_path / "m"))


def test_a_passive_party_refuses_a_relayed_key_above_its_bound():
    public, _ = P.generate_keypair(512, insecure=True)
    cfg = resolve(None, dict(task="classification", label_column="y", data=["a", "b"], label_privacy="paillier",
                             key_length=512, insecure_key=True, max_key_length=2048))
    assert public_key(public.to_bytes(), cfg).n == public.n          # within the bound: taken
    cfg.set("max_key_length", 256)     # below the validated range: only to reach the check with a small key
    with pytest.raises(InputError, match=r"^key_length: 512 is above this party's max_key_length 256 \(set "
                                         r"max_key_length in this party's own file to allow it\)$"):
        public_key(public.to_bytes(), cfg)


def test_check_key_bound():
    P.check_key_bound(4096, 4096)
    with pytest.raises(InputError, match="16384 is above party 3's max_key_length 4096"):
        P.check_key_bound(16384, 4096, "party 3")


# --- the setting ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_max_key_length_defaults_to_4096(mode):
    cfg = resolve(None, dict(mode=mode, task="classification", label_column="y", data=["a", "b"]))
    assert cfg.max_key_length == 4096


@pytest.mark.parametrize("value", [512, 2047, 16392, 3072.0, True, "4096", None])
def test_max_key_length_is_validated(value):
    with pytest.raises(InputError, match=r"^max_key_length: "):
        resolve(None, dict(task="classification", label_column="y", data=["a", "b"], max_key_length=value))


def test_max_key_length_is_a_setting_of_the_vertical_modes_only():
    with pytest.raises(InputError, match="max_key_length: is a setting of vertical modes"):
        resolve(None, dict(mode="icdta4fl", task="classification", label_column="y", data=["a", "b"],
                           max_key_length=4096))


def test_max_key_length_goes_in_the_job_table(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[job]\ndata = ["a.csv", "b.csv"]\nmax_key_length = 8192\n')
    assert resolve(str(path), {}).max_key_length == 8192


# --- network: the bound is the party's own ---------------------------------------------------------------
def _party(tmp_path, **job):
    (tmp_path / "p.csv").write_text("id,age\n" + "".join(f"{i},{20 + i}\n" for i in range(20)))
    doc = {"job": dict(data="p.csv", n_jobs=1, **job), "__base__": str(tmp_path)}
    policy = Policy(doc)
    return _party_local(doc, str(tmp_path / "p1.toml"), policy), policy


def _message(**changes):
    msg = job_message(table={"n_estimators": 3, "max_depth": 3, "label_privacy": "paillier",
                             "key_length": 3072}, label_column="y", **changes)
    return json.dumps(msg).encode("utf-8")


def test_the_master_never_sends_a_bound_and_a_party_takes_its_own(tmp_path):
    assert "max_key_length" not in json.loads(_message())["settings"]
    local, policy = _party(tmp_path)
    *_, cfg = _accept_job(_message(), local, policy, "p1")
    assert cfg.key_length == 3072 and cfg.max_key_length == 4096      # the party's default
    local, policy = _party(tmp_path, max_key_length=2048)
    *_, cfg = _accept_job(_message(), local, policy, "p1")
    assert cfg.max_key_length == 2048
    with pytest.raises(InputError, match="3072 is above this party's max_key_length 2048"):
        public_key(np.zeros(3072 // 8, dtype=np.uint8), cfg)


def test_a_job_message_that_sets_the_bound_is_refused(tmp_path):
    local, policy = _party(tmp_path)
    with pytest.raises(InputError, match="the master sets max_key_length, which only this party's own file"):
        _accept_job(_message(max_key_length=16384), local, policy, "p1")
