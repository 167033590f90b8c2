"""What a party's own file decides in a network job, against crafted job
messages of a master: which of its columns is the label (and whether that
label may leave it in the clear), which columns it offers, and its memory;
and what the master defaults to.  Unit tests of the start-up exchange
(``_accept_job``, ``_party_local``, the master's defaults), plus one run of
``serve`` and ``join`` over real TLS in which the master names a column a
party does not declare as the label."""
import json
import re
import socket
import threading
import time

import pytest

from fedforest.errors import InputError
from fedforest.federation.config import resolve
from fedforest.federation import network
from fedforest.federation.network import (NETWORK, Policy, _accept_job, _offered, _party_local, join, serve,
                                          shared_settings)

from _util import job_message as shared_job_message

ROWS = 30
VERTICAL_JOBS = [("vertical", "plain"), ("vertical", "paillier"),
                 ("vertical_boost", "plain"), ("vertical_boost", "paillier")]
TABLE = {"vertical": {"n_estimators": 3, "max_depth": 3}, "vertical_boost": {"n_estimators": 3, "max_depth": 3},
         "icdta4fl": {"max_depth": 3}}


@pytest.fixture
def folder(tmp_path):
    """A party's folder: its data (an ID, two features and the column 'salary')
    and a table with the label column 'y'."""
    (tmp_path / "p.csv").write_text("id,age,salary\n" + "".join(f"{i},{20 + i % 40},{1000 + 7 * i}\n"
                                                                 for i in range(ROWS)))
    (tmp_path / "holder.csv").write_text("id,age,y\n" + "".join(f"{i},{20 + i % 40},{i % 2}\n"
                                                                for i in range(ROWS)))
    return tmp_path


def job_message(mode="vertical", command="train", label_column="salary", **changes):
    """The job message of a well-behaved master as it travels (``changes`` as in :func:`_util.job_message`)."""
    return json.dumps(shared_job_message(mode, command, TABLE[mode], label_column, **changes)).encode("utf-8")


def party(folder, data="p.csv", policy=None, **job):
    """(local settings, policy) of a party file's [job] and [policy] tables."""
    doc = {"job": dict(data=data, n_jobs=1, **job), "policy": dict(policy or {}), "__base__": str(folder)}
    pol = Policy(doc)
    return _party_local(doc, str(folder / "p1.toml"), pol), pol


def accept(folder, message, data="p.csv", policy=None, **job):
    local, pol = party(folder, data, policy, **job)
    return _accept_job(message, local, pol, "p1")[-1]


# --- the label is the label holder's own decision ---------------------------------------------------------
@pytest.mark.parametrize("mode,privacy", VERTICAL_JOBS)
def test_a_column_the_party_does_not_declare_is_refused_as_the_label(folder, mode, privacy):
    msg = job_message(mode, label_privacy=privacy)
    with pytest.raises(InputError, match=r"the job names column 'salary' of this party as the label, but this "
                                         r"party's file does not declare a label column; .*\(label_column = "
                                         r"\"salary\"\); refused"):
        accept(folder, msg)
    with pytest.raises(InputError, match=r"column 'salary' of this party as the label, but this party's file "
                                         r"says it does not hold the label \(holds_label = false\)"):
        accept(folder, msg, holds_label=False)
    # offering the column as a feature does not make it the label
    with pytest.raises(InputError, match="column 'salary' of this party as the label"):
        accept(folder, msg, policy={"offered_columns": ["age", "salary"]})
    # the prediction of a job that names it is refused as well
    with pytest.raises(InputError, match="column 'salary' of this party as the label"):
        accept(folder, job_message(mode, command="predict", label_privacy=privacy))


@pytest.mark.parametrize("mode,privacy", VERTICAL_JOBS)
def test_a_party_without_the_label_column_accepts_and_a_declared_one_must_match(folder, mode, privacy):
    # the job's label lies with another party: this one takes part with its features
    cfg = accept(folder, job_message(mode, label_column="y", label_privacy=privacy))
    assert cfg.label_column == "y" and cfg.data[0] == str(folder / "p.csv")
    cfg = accept(folder, job_message(mode, label_column="y", label_privacy=privacy), holds_label=False)
    assert cfg.label_column == "y"
    # the label holder declares its column; the job must name that one
    ok = {"policy": {"allow_plain_labels": True}}
    cfg = accept(folder, job_message(mode, label_column="y", label_privacy=privacy), data="holder.csv",
                 label_column="y", **ok)
    assert cfg.label_column == "y"
    with pytest.raises(InputError, match=r"the job names label column 'age'; this party's label column is 'y'"):
        accept(folder, job_message(mode, label_column="age", label_privacy=privacy), data="holder.csv",
               label_column="y", **ok)


def test_horizontal_modes_keep_their_label_rules(folder):
    # every client of a horizontal job holds the label: nothing to declare
    cfg = accept(folder, job_message("icdta4fl", label_column="salary"))
    assert cfg.label_column == "salary"


def test_holds_label_and_label_column_must_agree(folder):
    with pytest.raises(InputError, match=r"holds_label: holds_label = true, but \[job\] names no label_column"):
        party(folder, holds_label=True)
    with pytest.raises(InputError, match=r"holds_label: holds_label = false, but \[job\] names label_column = 'y'"):
        party(folder, holds_label=False, label_column="y")
    with pytest.raises(InputError, match="holds_label: must be"):
        party(folder, holds_label="no")
    local, _ = party(folder, holds_label=True, label_column="y")
    assert local["label_column"] == "y"


def test_the_label_column_must_be_an_offered_column(folder, tmp_path):
    with pytest.raises(InputError, match=r"policy.offered_columns: the label column 'y' .* is not in "
                                         r"offered_columns; list the label column in offered_columns to offer it"):
        party(folder, data="holder.csv", label_column="y", policy={"offered_columns": ["age"]})
    # so join stops before it connects (port 1: nothing listens there)
    config = tmp_path / "p1.toml"
    config.write_text('[job]\ndata = "holder.csv"\nlabel_column = "y"\n\n[network]\nname = "p1"\n'
                      f'master = "127.0.0.1:1"\nmaster_fingerprint = "{"AB" * 32}"\ncertificate = "p1.crt"\n'
                      'key = "p1.key"\n\n[policy]\noffered_columns = ["age"]\n')
    with pytest.raises(InputError, match="list the label column in offered_columns to offer it"):
        join(str(config))
    # listed, the label holder's table keeps it
    cfg = accept(folder, job_message(label_column="y", label_privacy="paillier"), data="holder.csv",
                 label_column="y", policy={"offered_columns": ["age", "y"]})
    assert cfg.data[0] == str(folder / "holder.csv")       # every column offered: the file as it is


def test_offered_columns_keep_the_label_only_where_the_party_declares_it(folder):
    cfg = resolve(None, dict(mode="vertical", task="classification", label_column="salary",
                             data=[str(folder / "p.csv")]))
    pol = Policy({"policy": {"offered_columns": ["age"]}, "__base__": str(folder)})
    assert list(_offered(cfg, 1, pol, "vertical")) == ["id", "age"]
    # declared, it stays (the file as it is: nothing else to leave out)
    assert _offered(cfg, 1, pol, "vertical", label="salary") == str(folder / "p.csv")


# --- label privacy is the label holder's choice ----------------------------------------------------------
@pytest.mark.parametrize("mode", ["vertical", "vertical_boost"])
def test_the_label_holder_refuses_plain_labels_unless_its_policy_allows_them(folder, mode):
    holder = dict(data="holder.csv", label_column="y")
    plain = job_message(mode, label_column="y", label_privacy="plain")
    with pytest.raises(InputError, match=r"policy: the job runs label_privacy = 'plain', which sends this party's "
                                         r"labels \('y'\) out in the clear; .*allow_plain_labels = true"):
        accept(folder, plain, **holder)
    assert accept(folder, plain, policy={"allow_plain_labels": True}, **holder).label_privacy == "plain"
    # a policy that requires plain labels allows them
    assert accept(folder, plain, policy={"require_label_privacy": "plain"}, **holder).label_privacy == "plain"
    assert accept(folder, job_message(mode, label_column="y", label_privacy="paillier"),
                  **holder).label_privacy == "paillier"
    # a party without the label has no labels to protect
    assert accept(folder, plain).label_privacy == "plain"
    # require_label_privacy works as before, for every party
    with pytest.raises(InputError, match=r"the job runs label_privacy = 'plain'; this party requires 'paillier'"):
        accept(folder, plain, policy={"require_label_privacy": "paillier"})
    with pytest.raises(InputError, match="policy.allow_plain_labels: must be"):
        Policy({"policy": {"allow_plain_labels": "yes"}})


def test_a_party_can_require_the_hidden_instance_space(folder):
    from fedforest.vertical.paillier.hidden import SHARED
    hidden = job_message("vertical_boost", label_column="y", label_privacy="paillier", instance_space="hidden")
    shared = job_message("vertical_boost", label_column="y", label_privacy="paillier")
    pol = {"require_instance_space": "hidden"}
    assert accept(folder, hidden, policy=pol).instance_space == "hidden"
    with pytest.raises(InputError, match=rf"the job runs instance_space = {SHARED!r}; this party requires 'hidden'"):
        accept(folder, shared, policy=pol)
    with pytest.raises(InputError, match=rf"instance_space = {SHARED!r}; this party requires 'hidden' \(mode 'vertical'"):
        accept(folder, job_message("vertical", label_column="y", label_privacy="paillier"), policy=pol)
    with pytest.raises(InputError, match="policy.require_instance_space"):
        Policy({"policy": {"require_instance_space": "secret"}})


# --- memory is the party's own ---------------------------------------------------------------------------
@pytest.mark.parametrize("key,value", [("tree_batch", 1000), ("batch_memory_mb", 10 ** 6)])
def test_a_master_that_sets_a_party_memory_setting_is_refused(folder, key, value):
    with pytest.raises(InputError, match=rf"job message: the master sets {key}, which only this party's own file "
                                         r"decides .*: refused"):
        accept(folder, job_message(label_column="y", **{key: value}))


def test_memory_settings_come_from_the_party_file_or_its_defaults(folder):
    cfg = resolve(None, dict(mode="vertical", task="classification", label_column="y", data=["a"],
                             tree_batch=7, batch_memory_mb=99))
    sent = shared_settings(cfg)
    assert "tree_batch" not in sent and "batch_memory_mb" not in sent
    cfg = accept(folder, job_message(label_column="y"), tree_batch=2, batch_memory_mb=512)
    assert (cfg.tree_batch, cfg.batch_memory_mb) == (2, 512)
    cfg = accept(folder, job_message(label_column="y"))
    assert (cfg.tree_batch, cfg.batch_memory_mb) == (None, 4096)


# --- the master's default label privacy in a network job -------------------------------------------------
def _master_cfg(tmp_path, forest="", command="train"):
    path = tmp_path / "job.toml"
    path.write_text(f'[job]\ntask = "classification"\nlabel_column = "y"\n\n[forest]\nn_estimators = 2\n{forest}\n'
                    '[network]\nlisten = "127.0.0.1:0"\n')
    flags = {"n_parties": 2, "data": ["<a>", "<b>"]}
    cfg = resolve(str(path), flags, skip_tables=(NETWORK,))
    return network._network_defaults(cfg, str(path), flags, command)


def test_a_vertical_network_job_defaults_to_paillier_labels(tmp_path):
    assert _master_cfg(tmp_path).label_privacy == "paillier"
    assert _master_cfg(tmp_path, 'label_privacy = "plain"').label_privacy == "plain"
    assert _master_cfg(tmp_path, command="predict").label_privacy == "plain"     # the model's own
    # under MPI the mode's default stays
    assert resolve(None, dict(mode="vertical", data=["a", "b"])).label_privacy == "plain"
    with pytest.raises(InputError, match=r"label_privacy: a network job of mode 'vertical' runs label_privacy = "
                                         r"'paillier' unless its job file says otherwise, and label_privacy = "
                                         r"'paillier' needs split_method = 'hist' \(this job sets 'exact'\); .*"
                                         r"label_privacy = \"plain\" in \[forest\].*allow_plain_labels = true"):
        _master_cfg(tmp_path, 'split_method = "exact"')
    with pytest.raises(InputError, match=r"paillier' is not available with class_weight"):
        _master_cfg(tmp_path, 'class_weight = "balanced"')
    with pytest.raises(InputError, match=r"^label_privacy: label_privacy = 'paillier' needs split_method = 'hist'"):
        _master_cfg(tmp_path, 'split_method = "exact"\nlabel_privacy = "paillier"')
    assert _master_cfg(tmp_path, 'split_method = "exact"\nlabel_privacy = "plain"').split_method == "exact"


# --- over TLS: serve and join --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    from fedforest.crypto.identity import keygen
    out = tmp_path_factory.mktemp("keys")
    return {name: keygen(str(out), name) for name in ("master", "p1", "p2")}


def _party_file(folder, keys, name, data, port, job=""):
    key, cert, _ = keys[name]
    path = folder / f"{name}.toml"
    path.write_text(f'[job]\ndata = "{data}"\nmodel_dir = "model-{name}"\nn_jobs = 1\n{job}\n\n[network]\n'
                    f'name = "{name}"\nmaster = "127.0.0.1:{port}"\nmaster_fingerprint = "{keys["master"][2]}"\n'
                    f'certificate = "{cert}"\nkey = "{key}"\nconnect_timeout = 20\n')
    return str(path)


def test_a_master_naming_an_undeclared_column_as_the_label_stops_every_process(tmp_path, keys, capsys):
    (tmp_path / "p1.csv").write_text("id,f0,f1\n" + "".join(f"{i},{i % 5},{i % 3}\n" for i in range(ROWS)))
    (tmp_path / "p2.csv").write_text("id,f2,salary\n" + "".join(f"{i},{i % 4},{1000 + i}\n" for i in range(ROWS)))
    lines = ['[job]', 'task = "classification"', 'label_column = "salary"', 'model_dir = "model"',
             'progress = false', '', '[forest]', 'n_estimators = 2', 'max_depth = 2', '', '[network]',
             'listen = "127.0.0.1:0"', f'certificate = "{keys["master"][1]}"', f'key = "{keys["master"][0]}"',
             'connect_timeout = 20']
    for p in ("p1", "p2"):
        lines += ['[[network.parties]]', f'name = "{p}"', f'fingerprint = "{keys[p][2]}"',
                  f'certificate = "{keys[p][1]}"']
    (tmp_path / "job.toml").write_text("\n".join(lines) + "\n")
    codes, bound, threads = {}, [], []

    def go(name, fn):
        threads.append(threading.Thread(target=lambda: codes.setdefault(name, fn()), daemon=True))
        threads[-1].start()
    go("master", lambda: serve(str(tmp_path / "job.toml"), {}, on_listen=bound.append))
    deadline = time.monotonic() + 30
    while not bound and time.monotonic() < deadline:
        time.sleep(0.01)
    port = bound[0][1]
    go("p1", lambda: join(_party_file(tmp_path, keys, "p1", tmp_path / "p1.csv", port)))
    go("p2", lambda: join(_party_file(tmp_path, keys, "p2", tmp_path / "p2.csv", port)))
    for t in threads:
        t.join(60)
    err = capsys.readouterr().err
    assert codes == {"master": 2, "p1": 2, "p2": 2}, err
    refusal = "the job names column 'salary' of this party as the label, but this party's file does not declare " \
              "a label column"
    # the party at fault says why; the master names it; the other party learns it was not at fault
    assert f"error: party 'p2' refuses the job: label_column: {refusal}" in err
    assert f"error: policy: party 'p2' (rank 2) refuses the job: label_column: {refusal}" in err
    assert re.search(r"error: party 'p1': the master \('master' at 127\.0\.0\.1:\d+\) stopped the job \(exit code "
                     rf"2\): the job cannot start: party 'p2' \(rank 2\) refuses the job: label_column: "
                     rf"{re.escape(refusal)}.* \(nothing is wrong with party 'p1'\)", err), err
    assert "must pin fingerprint" not in err
    assert sorted(p.name for p in tmp_path.iterdir() if "model" in p.name) == []


def test_a_master_that_vanishes_before_the_job_is_not_blamed_on_the_party(tmp_path, keys, capsys):
    """The master takes the party's connection, then stops (another party failed) without
    a word: the party says the master stopped, and is not told to check its own pin."""
    from fedforest.crypto.identity import Certificate, server_context
    ctx = server_context(keys["master"][1], keys["master"][0], [Certificate(keys["p1"][1], "p1")])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def master():
        conn, _ = listener.accept()
        with ctx.wrap_socket(conn, server_side=True) as tls:
            tls.recv(64)                     # the party's hello
            listener.close()                 # the master stops: no listener, then no connection
    t = threading.Thread(target=master, daemon=True)
    t.start()
    code = join(_party_file(tmp_path, keys, "p1", tmp_path / "p1.csv", port))
    t.join(10)
    err = capsys.readouterr().err
    assert code == 1
    assert re.search(r"error: party 'p1': the master \(127\.0\.0\.1:\d+\) .* before the job started and no longer "
                     r"listens: it stopped without telling this party why \(another party failed or was refused",
                     err), err
    assert "must pin fingerprint" not in err
