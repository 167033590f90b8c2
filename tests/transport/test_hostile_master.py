"""A hostile master: a test double holding the master's valid key sends a
party crafted job messages over the real TCP transport.  Every request that
would let it decide something on the party's machine (paths, overwrite,
threads, oversized counts, a mode or settings the party does not run) is
refused with a reason the master receives, the party exits with code 2, and
nothing is written outside the party's folder."""
import json
import os
import re
import threading

import pytest

from fedforest.crypto.identity import Certificate, keygen, server_context
from fedforest.errors import InputError
from fedforest.federation.config import JOB_INDEX, load_toml
from fedforest.federation.network import TAG_JOB, Policy, _accept_job, _party_local, join, master_path
from fedforest.transport.tcp import Party, accept_parties

from _util import job_message


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    return {name: keygen(str(folder), name) for name in ("master", "p1")}


def _tree(folder):
    """Every file under ``folder`` with its bytes (what a test compares before and after)."""
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            path = os.path.join(root, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = fh.read()
    return out


@pytest.fixture
def machine(tmp_path):
    """The party's machine: its own folder (config, data) and a victim folder
    elsewhere holding a model and files the master must not touch."""
    party = tmp_path / "party"
    party.mkdir()
    (party / "p1.csv").write_text("id,x,y\n" + "".join(f"{i},{i % 7},{i % 2}\n" for i in range(40)))
    victim = tmp_path / "victim"
    (victim / "party-1").mkdir(parents=True)
    (victim / "party-1" / "manifest.json").write_text('{"precious": true}')
    (victim / "notes.txt").write_text("do not touch")
    return tmp_path


def _party_file(folder, keys, port, job="", policy=""):
    key, cert, _ = keys["p1"]
    path = os.path.join(folder, "p1.toml")
    with open(path, "w") as fh:
        fh.write(f'[job]\ndata = "p1.csv"\nn_jobs = 1\n{job}\n\n'
                 f'[network]\nname = "p1"\nmaster = "127.0.0.1:{port}"\n'
                 f'master_fingerprint = "{keys["master"][2]}"\n'
                 f'certificate = "{cert}"\nkey = "{key}"\nconnect_timeout = 20\n\n[policy]\n{policy}\n')
    return path



def hostile(keys, folder, message, job="", policy=""):
    """Run the party (``join``, in a thread) against a master double that sends
    ``message`` (a dict, or raw bytes) as the job message; returns (the
    party's answer, the party's exit code)."""
    ctx = server_context(keys["master"][1], keys["master"][0], [Certificate(keys["p1"][1], "p1")])
    codes, threads = {}, []

    def start_party(bound):
        config = _party_file(os.path.join(folder, "party"), keys, bound[1], job, policy)
        t = threading.Thread(target=lambda: codes.setdefault("p1", join(config)), daemon=True)
        t.start()
        threads.append(t)
    raw = accept_parties(("127.0.0.1", 0), ctx, [Party("p1", keys["p1"][2])], "master", 30,
                         on_listen=start_party)
    data = message if isinstance(message, bytes) else json.dumps(message).encode("utf-8")
    raw.send_bytes(1, data, TAG_JOB)
    answer = json.loads(raw.recv_bytes(1, TAG_JOB).decode("utf-8"))
    if answer.get("ok"):
        raw.abort(1)        # a double does not run the algorithm
    else:
        raw.finish(timeout=10)
    threads[0].join(60)
    assert not threads[0].is_alive()
    return answer, codes["p1"]


REFUSED = [
    # the reproduction: another folder of the party's machine, and overwrite
    ("model_dir", dict(model_dir="{victim}", overwrite=True), r"master sets model_dir, overwrite"),
    ("overwrite", dict(overwrite=True), r"master sets overwrite"),
    ("output", dict(output="{victim}/notes.txt"), r"master sets output"),
    ("summary_json", dict(summary_json="/tmp/x.json"), r"master sets summary_json"),
    ("threads", dict(n_jobs=100000), r"master sets n_jobs"),
    ("resume", dict(resume=True), r"master sets resume"),
    ("data", dict(data=["/etc/passwd", "b"]), r"master sets data"),
    ("logging", dict(verbose=True), r"master sets verbose"),
    ("trees", dict(n_estimators=10 ** 12), r"n_estimators: must be an int in \[1, "),
    ("depth", dict(max_depth=10 ** 6), r"max_depth: must be"),
    ("other mode", dict(max_rules=10), r"'max_rules' is a setting of mode 'icdta4fl'"),
    ("unknown key", dict(nonsense=1), r"unknown key 'nonsense'"),
    ("wrong type", dict(max_depth="3"), r"max_depth: must be"),
]


@pytest.mark.parametrize("name,changes,reason", REFUSED, ids=[r[0] for r in REFUSED])
def test_settings_a_master_must_not_decide_are_refused(keys, machine, name, changes, reason):
    victim = str(machine / "victim")
    before = _tree(victim)
    changes = {k: v.replace("{victim}", victim) if isinstance(v, str) else v for k, v in changes.items()}
    answer, code = hostile(keys, str(machine), job_message(**changes))
    assert code == 2 and answer["ok"] is False
    assert re.search(reason, answer["error"]), answer["error"]
    assert _tree(victim) == before
    assert sorted(os.listdir(machine / "party")) == ["p1.csv", "p1.toml"]


MALFORMED = [
    ("unknown mode", lambda m: dict(m, mode="evil_mode"), r"unknown mode 'evil_mode'"),
    ("mode not text", lambda m: dict(m, mode=["vertical"]), r"the mode is not a name"),
    ("unknown command", lambda m: dict(m, command="rm"), r"unknown command 'rm'"),
    ("huge size", lambda m: dict(m, size=10 ** 9), r"size must be an int"),
    ("rank out of range", lambda m: dict(m, rank=5), r"rank must be an int in \[1, 1\]"),
    ("rank as text", lambda m: dict(m, rank="1"), r"rank must be an int"),
    ("names too short", lambda m: dict(m, names=["master"]), r"names must list the 2 participants"),
    ("path in a name", lambda m: dict(m, names=["master", "../p1"]), r"names\[1\]: must be"),
    ("another party", lambda m: dict(m, names=["master", "p9"]), r"takes this party for 'p9'"),
    ("settings not a table", lambda m: dict(m, settings=[1, 2]), r"settings must be a table"),
    ("not a dict", lambda m: [m], r"not a job message"),
    ("version", lambda m: dict(m, version="0.0.1"), r"the master runs fedforest 0.0.1"),
]


@pytest.mark.parametrize("name,craft,reason", MALFORMED, ids=[r[0] for r in MALFORMED])
def test_malformed_job_messages_are_refused(keys, machine, name, craft, reason):
    answer, code = hostile(keys, str(machine), craft(job_message()))
    assert code == 2 and answer["ok"] is False
    assert re.search(reason, answer["error"]), answer["error"]


@pytest.mark.parametrize("data", [b"\xff\xfe not text", b"[" * 100000 + b"]" * 100000, b"{}", b"null"])
def test_bytes_that_are_no_job_message_are_refused(keys, machine, data):
    answer, code = hostile(keys, str(machine), data)
    assert code == 2 and answer["ok"] is False and "malformed job message" in answer["error"]


def test_a_master_path_setting_is_refused(keys, machine):
    msg = job_message(mode="efdt", table={"strategy": "sem", "proxy_data": "proxy.csv"})
    assert msg["settings"]["proxy_data"] == master_path("proxy_data")
    msg["settings"]["proxy_data"] = str(machine / "victim" / "notes.txt")
    answer, code = hostile(keys, str(machine), msg)
    assert code == 2 and "a party never takes a path from the master" in answer["error"]
    # the placeholder a well-behaved master sends in its place is accepted
    msg["settings"]["proxy_data"] = master_path("proxy_data")
    doc = load_toml(_party_file(str(machine / "party"), keys, 1))
    policy = Policy(doc)
    local = _party_local(doc, "p1.toml", policy)
    *_, cfg = _accept_job(json.dumps(msg).encode(), local, policy, "p1")
    assert cfg.proxy_data == master_path("proxy_data")


def test_an_accepted_job_writes_only_where_the_party_says(keys, machine):
    # the party holds the label 'y' and says so; its labels stay encrypted
    message = job_message(label_privacy="paillier")
    answer, code = hostile(keys, str(machine), message, job='label_column = "y"')
    assert answer == {"ok": True} and code == 1          # accepted, then stopped by the double
    doc = load_toml(_party_file(str(machine / "party"), keys, 1, job='label_column = "y"'))
    policy = Policy(doc)
    local = _party_local(doc, "p1.toml", policy)
    *_, cfg = _accept_job(json.dumps(message).encode(), local, policy, "p1")
    party = os.path.realpath(machine / "party")
    # the party file names no model_dir or output: the defaults lie in the party's folder
    assert cfg.model_dir == os.path.join(party, "fedforest-model")
    assert cfg.output == os.path.join(party, "predictions.csv")
    assert (cfg.overwrite, cfg.resume, cfg.n_jobs, cfg.verbose) == (False, False, 1, False)


@pytest.mark.parametrize("job,policy,reason", [
    ('model_dir = "../victim"', "", r"model_dir: .* outside this party's folder"),
    ('output = "/tmp/predictions.csv"', "", r"output: .* outside this party's folder"),
    ('model_dir = "link/model"', "", r"model_dir: .* outside this party's folder"),
    ('summary_json = "../s.json"', "", r"summary_json: .* outside this party's folder"),
    ('model_dir = "m"', 'base_dir = "sub"', r"model_dir: .*/m' resolves to .*, outside this party's folder"),
])
def test_party_paths_outside_its_folder_are_refused_before_connecting(tmp_path, keys, job, policy, reason):
    folder = tmp_path / "party"
    (folder / "sub").mkdir(parents=True)
    (tmp_path / "victim").mkdir()
    os.symlink(str(tmp_path / "victim"), str(folder / "link"))     # a link out of the party's folder
    config = _party_file(str(folder), keys, 1, job=job, policy=policy)
    with pytest.raises(InputError, match=reason):
        join(config)              # before any connection (port 1: nothing listens there)
    assert os.listdir(tmp_path / "victim") == []


def test_a_party_base_dir_admits_paths_inside_it(tmp_path, keys):
    folder = tmp_path / "party"
    folder.mkdir()
    config = _party_file(str(folder), keys, 1, job='model_dir = "models/m1"\noutput = "out/p.csv"',
                         policy='base_dir = "."')
    doc = load_toml(config)
    local = _party_local(doc, config, Policy(doc))
    assert local["model_dir"] == str(folder / "models" / "m1")
    assert local["output"] == str(folder / "out" / "p.csv")


def test_a_mode_without_the_command_or_from_a_package_is_refused(keys, machine):
    answer, code = hostile(keys, str(machine), job_message(mode="icdta4fl", command="predict",
                                                           table={"max_depth": 3}))
    assert code == 2 and "mode 'icdta4fl' has no predict job over the network" in answer["error"]
    from fedforest.federation.mode import HORIZONTAL, Mode
    from fedforest.federation.registry import REGISTRY
    REGISTRY.register(Mode("plugin_mode", HORIZONTAL, "a mode of another package", "plugin_mode", (),
                           "some_package.plugin_mode"))
    try:
        msg = job_message(mode="icdta4fl", table={"max_depth": 3})
        msg["mode"], msg["settings"] = "plugin_mode", {k: v for k, v in msg["settings"].items()
                                                       if k in JOB_INDEX}
        answer, code = hostile(keys, str(machine), msg)
        assert code == 2 and "comes from an installed package (some_package.plugin_mode)" in answer["error"]
        # named in the party's allowed_modes, the request passes this check (and then fails to
        # import the missing package, on the party, after accepting)
        doc = load_toml(_party_file(str(machine / "party"), keys, 1, policy='allowed_modes = ["plugin_mode"]'))
        policy = Policy(doc)
        *_, cfg = _accept_job(json.dumps(msg).encode(), _party_local(doc, "p1.toml", policy), policy, "p1")
        assert cfg.spec.name == "plugin_mode"
    finally:
        REGISTRY._modes.pop("plugin_mode")
