"""The label holder's ``paillier_randomness`` (issue 48, item 4): how it makes
the randomness of its own encryptions, ``"short"`` (``h_s^r`` for a short
uniform ``r``, the default) or ``"full"`` (uniform factors).  It is the label
holder's own setting, as ``max_key_length`` is a party's own bound: the one
job file decides it in an MPI job, a network party takes it from its own file
only, and a master that sends it is refused."""
import json

import numpy as np
import pytest
from sklearn.datasets import make_classification

from fedforest.crypto import paillier as P
from fedforest.errors import InputError
from fedforest.federation.config import resolve
from fedforest.federation.network import LOCAL, _accept_job
from fedforest.jobs import run_job

from _util import party_frames
from test_key_length_bound import _message, _party   # a network party's own file, the master's job message

OPTS = dict(task="classification", label_column="y", n_estimators=2, random_state=3, max_depth=3, n_jobs=1,
            label_privacy="paillier", key_length=512, insecure_key=True)


def _frames(n=60, seed=0):
    X, y = make_classification(n, 4, n_informative=3, n_redundant=0, n_classes=2, random_state=seed)
    return party_frames(np.round(X, 2), y, [[0, 1], [2, 3]], label_party=1)   # party 2 holds the label


@pytest.mark.parametrize("mode, setting", [("vertical", "full"), ("vertical_boost", "full"),
                                           ("vertical_boost", None)])
def test_the_label_holder_makes_its_factors_as_its_setting_says(tmp_path, mode, setting, monkeypatch):
    keys, made = [], []
    generate, task = P.generate_keypair, P._factors_task
    monkeypatch.setattr(P, "generate_keypair", lambda *a, **k: keys.append(generate(*a, **k)) or keys[-1])
    monkeypatch.setattr(P, "_factors_task", lambda m, *a: made.append(m) or task(m, *a))
    extra = {} if setting is None else {"paillier_randomness": setting}
    summary = run_job("train", _frames(), mode=mode, model_dir=str(tmp_path / "m"), **OPTS, **extra)
    assert summary is not None
    want = setting or "short"
    assert len(keys) == 1 and keys[0][1].randomness_mode == want
    assert made and set(made) == {want}              # every batch of factors of the label holder


# --- the setting ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
def test_the_default_is_short(mode):
    cfg = resolve(None, dict(mode=mode, task="classification", label_column="y", data=["a", "b"]))
    assert cfg.paillier_randomness == "short"
    cfg = resolve(None, dict(mode=mode, task="classification", label_column="y", data=["a", "b"],
                             paillier_randomness="full"))
    assert cfg.paillier_randomness == "full"


@pytest.mark.parametrize("value", ["half", "Short", "", 1, True, None])
def test_a_bad_value_names_the_setting(value):
    with pytest.raises(InputError, match=r"^paillier_randomness: must be one of 'short', 'full', got "):
        resolve(None, dict(task="classification", label_column="y", data=["a", "b"], paillier_randomness=value))


def test_it_is_a_setting_of_the_vertical_modes_only():
    with pytest.raises(InputError, match="paillier_randomness: is a setting of vertical modes"):
        resolve(None, dict(mode="icdta4fl", task="classification", label_column="y", data=["a", "b"],
                           paillier_randomness="full"))


def test_it_goes_in_the_job_table(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text('[job]\ndata = ["a.csv", "b.csv"]\npaillier_randomness = "full"\n')
    assert resolve(str(path), {}).paillier_randomness == "full"


# --- network: the label holder's own ----------------------------------------------------------------------
def test_the_master_never_sends_it_and_a_party_takes_its_own(tmp_path):
    assert "paillier_randomness" in LOCAL
    assert "paillier_randomness" not in json.loads(_message())["settings"]
    local, policy = _party(tmp_path)
    *_, cfg = _accept_job(_message(), local, policy, "p1")
    assert cfg.key_length == 3072 and cfg.paillier_randomness == "short"      # the party's default
    local, policy = _party(tmp_path, paillier_randomness="full")
    *_, cfg = _accept_job(_message(), local, policy, "p1")
    assert cfg.paillier_randomness == "full"


def test_a_job_message_that_sets_it_is_refused(tmp_path):
    local, policy = _party(tmp_path)
    with pytest.raises(InputError, match="the master sets paillier_randomness, which only this party's own file"):
        _accept_job(_message(paillier_randomness="full"), local, policy, "p1")
