"""The TCP transport: identities, pinning, party policy and faults, over
loopback with one process per participant (``fedforest serve`` / ``join``)."""
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pandas as pd
import pytest

from fedforest.crypto.identity import (Certificate, client_context, keygen, normalize_fingerprint,
                                       server_context)
from fedforest.errors import FedForestError, InputError
from fedforest.federation.network import Policy, join, serve
from fedforest.horizontal.model_files import load_model
from fedforest.jobs import run_horizontal, run_vertical
from fedforest.transport.base import Comm
from fedforest.transport.tcp import DEFAULT_MAX_FRAME, Party, PeerLost, accept_parties, connect_master

from _util import ROOT, TREE_KEYS, assert_same_trees, complete_trees, party_frames

N_TREES = 3
GROUPS = [[0, 2, 4], [1, 3, 5]]


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    out = {name: keygen(str(folder), name) for name in ("master", "p1", "p2")}
    out["impostor"] = keygen(str(folder / "other"), "p1")      # another key under p1's name
    return out


@pytest.fixture(scope="module")
def frames():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(160, 6))
    y = (X[:, 0] + X[:, 1] * X[:, 3] > 0).astype(int)
    return party_frames(X, y, GROUPS)


def _fp(keys, name):
    return keys[name][2]


def write_job(folder, keys, forest="", network="", parties=("p1", "p2"), pin_files=None):
    pin_files = pin_files or {}
    lines = ['[job]', 'task = "classification"', 'label_column = "y"', 'model_dir = "model"',
             'progress = false', '', '[forest]', f'n_estimators = {N_TREES}', 'max_depth = 3',
             'random_state = 11', 'n_jobs = 1', forest, '', '[network]', 'listen = "127.0.0.1:0"',
             f'certificate = "{keys["master"][1]}"', f'key = "{keys["master"][0]}"', network]
    for p in parties:
        lines += ['[[network.parties]]', f'name = "{p}"', f'fingerprint = "{_fp(keys, p)}"',
                  f'certificate = "{pin_files.get(p, keys[p][1])}"']
    path = os.path.join(folder, "job.toml")
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


# the party holding the label says so in its file (label_column); its labels leave it in the
# clear only where its policy allows it (allow_plain_labels)
HOLDER = 'label_column = "y"'
PLAIN = 'label_privacy = "plain"'
PLAIN_OK = "allow_plain_labels = true"


def write_party(folder, keys, name, frame, port, identity=None, master_pin=None, policy="", data=None, job=""):
    key, cert, _ = keys[identity or name]
    if data is None:
        data = os.path.join(folder, f"{name}.csv")
        frame.to_csv(data, index=False)
    path = os.path.join(folder, f"{name}.toml")
    with open(path, "w") as fh:
        fh.write(f'[job]\ndata = "{data}"\nmodel_dir = "model-{name}"\nn_jobs = 1\n{job}\n\n'
                 f'[network]\nname = "{name}"\nmaster = "127.0.0.1:{port}"\n'
                 f'master_fingerprint = "{master_pin or _fp(keys, "master")}"\n'
                 f'certificate = "{cert}"\nkey = "{key}"\nconnect_timeout = 20\n\n[policy]\n{policy}\n')
    return path


def _start(args, env=None):
    full = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.Popen([sys.executable, "-m", "fedforest"] + args, cwd=ROOT, env=full, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _port(master):
    """The port the master listens on (it prints it before waiting for parties)."""
    line = master.stdout.readline()
    m = re.search(r"listening on [\d.]+:(\d+)", line)
    assert m, line + master.stderr.read()
    return int(m.group(1))


def run_network_job(folder, keys, frames, timeout=480):
    """The master and each party as processes of their own; returns the master's
    (returncode, stdout, stderr) and each party's, after all ended."""
    master = _start(["serve", "--config", write_job(folder, keys, forest=PLAIN)])
    port = _port(master)
    procs = {name: _start(["join", "--config", write_party(folder, keys, name, frame, port,
                                                           **(dict(job=HOLDER, policy=PLAIN_OK) if name == "p1"
                                                              else {}))])
             for name, frame in zip(("p1", "p2"), frames)}
    out = master.communicate(timeout=timeout)
    done = {n: (p.wait(timeout=60), *p.communicate(timeout=60)) for n, p in procs.items()}
    return (master.returncode, *out), done


def test_vertical_forest_over_tcp_equals_in_process_run(tmp_path, keys, frames):
    (code, out, err), parties = run_network_job(str(tmp_path), keys, frames)
    assert code == 0, err
    assert all(p[0] == 0 for p in parties.values()), parties
    assert "party 'p1' (rank 1) joined" in out and "party 'p2' (rank 2) joined" in out
    ref_dir = str(tmp_path / "ref")
    run_vertical("train", frames, task="classification", label_column="y", model_dir=ref_dir,
                 n_estimators=N_TREES, max_depth=3, random_state=11, n_jobs=1)
    # prediction on other rows with the same party files: join --data names them
    new_rows = [f.iloc[::3].drop(columns=["y"], errors="ignore") for f in frames]
    master = _start(["serve", "--config", str(tmp_path / "job.toml"), "--predict"])
    port = _port(master)
    procs = []
    for name, rows in zip(("p1", "p2"), new_rows):
        rows.to_csv(tmp_path / f"{name}-new.csv", index=False)
        party = write_party(str(tmp_path), keys, name, None, port, data=str(tmp_path / f"{name}.csv"),
                            **(dict(job=HOLDER, policy=PLAIN_OK) if name == "p1" else {}))
        procs.append(_start(["join", "--config", party, "--data", str(tmp_path / f"{name}-new.csv")]))
    _, err = master.communicate(timeout=300)
    assert master.returncode == 0 and all(p.wait(timeout=60) == 0 for p in procs), err
    written = [p for p in tmp_path.rglob("predictions*.csv")]
    assert len(written) == 1, written
    got = pd.read_csv(written[0])
    ref = run_vertical("predict", new_rows, model_dir=ref_dir, output=str(tmp_path / "ref.csv"))
    assert len(got) == len(new_rows[0])
    assert np.allclose(got[["proba_0", "proba_1"]].to_numpy(), ref["values"], rtol=0, atol=1e-12)
    # each party keeps its part of the model in its own folder; gather them as one model folder
    for rank, name in ((1, "p1"), (2, "p2")):
        os.rename(str(tmp_path / f"model-{name}" / f"party-{rank}"),
                  str(tmp_path / "model" / f"party-{rank}"))
    offsets = np.cumsum([0] + [len(g) for g in GROUPS])
    trees = complete_trees(str(tmp_path / "model"), 2, offsets)
    assert len(trees) == N_TREES
    assert_same_trees(trees, complete_trees(ref_dir, 2, offsets))


class InProcess:
    """``serve`` and ``join`` as threads of this process (their exit codes in ``codes``)."""

    def __init__(self, job, flags=None):
        self.codes, self.ended, self.bound, self.threads = {}, {}, [], []
        self._go("master", lambda: serve(job, flags or {}, on_listen=self.bound.append))
        deadline = time.monotonic() + 30
        while not self.bound and time.monotonic() < deadline and self.threads[0].is_alive():
            time.sleep(0.01)
        self.port = self.bound[0][1] if self.bound else None

    def _go(self, name, fn):
        def run():
            self.codes[name] = fn()
            self.ended[name] = time.monotonic()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def join(self, name, config):
        self._go(name, lambda: join(config))

    def wait(self, timeout=60):
        for t in self.threads:
            t.join(timeout)
        return self.codes


def test_impostor_and_wrong_certificates_are_refused_by_name(tmp_path, keys, frames, capsys):
    # a certificate file that is not the one pinned for p2: refused before listening
    job = write_job(str(tmp_path), keys, pin_files={"p2": keys["p1"][1]})
    with pytest.raises(InputError, match="party 'p2': certificate .* not the one that was agreed on"):
        serve(job, {})
    # an impostor key under p1's name: refused at the TLS handshake, where the master cannot tell
    # who it was, so it waits out connect_timeout; p2, accepted, learns why the job cannot start
    job = write_job(str(tmp_path), keys, network="connect_timeout = 3")
    run = InProcess(job)
    run.join("p1", write_party(str(tmp_path), keys, "p1", frames[0], run.port, identity="impostor"))
    run.join("p2", write_party(str(tmp_path), keys, "p2", frames[1], run.port))
    codes = run.wait()
    err = capsys.readouterr().err
    assert codes == {"master": 1, "p1": 1, "p2": 1}
    assert "party 'p1' (rank 1) did not join within 3 s" in err
    assert "refused connections: 127.0.0.1:" in err and "TLS handshake failed" in err
    assert re.search(r"party 'p1': the master \(127.0.0.1:\d+\) (closed the connection|dropped the connection "
                     r"\(reset\)|connection broke .*) "
                     r"before the job started: the master refused this party's certificate, or stopped; its "
                     f"job file must pin fingerprint {_fp(keys, 'impostor')} for 'p1'", err), err
    assert re.search(r"error: party 'p2': the master \(127.0.0.1:\d+\) refused this connection: the job "
                     r"cannot start: party 'p1' \(rank 1\) did not join within 3 s.*\(nothing is wrong with "
                     r"party 'p2'\)", err), err
    assert f"for 'p2'" not in err                   # p2 is not told to pin its own fingerprint


def test_a_party_that_refuses_the_master_ends_the_start_at_once(tmp_path, keys, frames, capsys):
    """p2 pins another certificate than the master's: it hangs up; the master stops
    waiting at once (not after connect_timeout), and p1, already accepted, is told that
    p2 is the problem, not asked to check its own fingerprint."""
    job = write_job(str(tmp_path), keys, network="connect_timeout = 60")
    run = InProcess(job)
    started = time.monotonic()
    run.join("p1", write_party(str(tmp_path), keys, "p1", frames[0], run.port))
    time.sleep(2.0)                                 # p1 is in before p2 knocks
    run.join("p2", write_party(str(tmp_path), keys, "p2", frames[1], run.port, master_pin=_fp(keys, "p2")))
    codes = run.wait()
    err = capsys.readouterr().err
    assert codes == {"master": 1, "p1": 1, "p2": 1}
    assert run.ended["master"] - started < 20
    assert "error: the job cannot start: party 'p2' closed the connection without its hello" in err
    assert f"party 'p2': the master at 127.0.0.1:{run.port} presented certificate {_fp(keys, 'master')}, " \
           f"but this party's file pins {_fp(keys, 'p2')}: refused" in err
    assert re.search(r"error: party 'p1': the master \(127.0.0.1:\d+\) refused this connection: the job cannot "
                     r"start: party 'p2' closed the connection without its hello .*\(nothing is wrong with "
                     r"party 'p1'\)", err), err
    assert "must pin fingerprint" not in err


def _expired_identity(folder, name):
    """A key and a self-signed certificate whose validity ended a year ago."""
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    from fedforest.crypto.identity import fingerprint
    os.makedirs(folder, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=800))
            .not_valid_after(now - datetime.timedelta(days=365))
            .sign(key, hashes.SHA256()))
    key_path, cert_path = os.path.join(folder, f"{name}.key"), os.path.join(folder, f"{name}.crt")
    with open(key_path, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    with open(cert_path, "wb") as fh:
        fh.write(cert.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path, fingerprint(cert.public_bytes(serialization.Encoding.DER))


def test_an_expired_pinned_certificate_is_accepted_as_docs_say(tmp_path, keys, frames, capsys):
    """The pin decides, not the validity period, on both sides (docs/network.md)."""
    ids = dict(keys, p2=_expired_identity(str(tmp_path / "old"), "p2"))
    job = write_job(str(tmp_path), ids)
    run = InProcess(job)
    run.join("p1", write_party(str(tmp_path), ids, "p1", frames[0], run.port, job=HOLDER))
    run.join("p2", write_party(str(tmp_path), ids, "p2", frames[1], run.port))
    assert run.wait(timeout=120) == {"master": 0, "p1": 0, "p2": 0}, capsys.readouterr().err


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path, keys):
    import socket
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        job = write_job(str(tmp_path), keys)
        with open(job) as fh:
            text = fh.read().replace('listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{port}"')
        with open(job, "w") as fh:
            fh.write(text)
        proc = subprocess.run([sys.executable, "-m", "fedforest", "serve", "--config", job], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    finally:
        holder.close()
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        f"error: network.listen: cannot listen on 127.0.0.1:{port}: Address already in use (another "
        "process, an earlier serve perhaps, holds it: stop it or pick another port)"], proc.stderr


def test_dropped_party_is_named_within_reply_timeout(tmp_path, keys, frames, capsys):
    job = write_job(str(tmp_path), keys, forest=f"tree_batch = 1\n{PLAIN}", network="")
    run = InProcess(job, {"reply_timeout": 60.0})
    run.join("p1", write_party(str(tmp_path), keys, "p1", frames[0], run.port, job=HOLDER, policy=PLAIN_OK))
    # p2 is a process of its own that vanishes when its 6th message arrives
    p2 = _start(["join", "--config", write_party(str(tmp_path), keys, "p2", frames[1], run.port)],
                env={"FEDFOREST_FAULT_DROP": "6"})
    assert p2.wait(timeout=180) == 9
    gone = time.monotonic()
    codes = run.wait()
    err = capsys.readouterr().err
    assert codes == {"master": 3, "p1": 3}      # a party that died: the exit code of a dead rank
    assert re.search(r"error: party 'p2' \(rank 2\) on host 127.0.0.1 (closed|dropped) the connection", err), err
    assert re.search(r"party 'p1': the master \('master' at 127.0.0.1:\d+\) stopped the job \(exit code 3\)",
                     err), err
    assert run.ended["master"] - gone < 60         # found at once, within reply_timeout


def test_party_policy_refusal_reaches_the_master(tmp_path, keys, frames, capsys):
    job = write_job(str(tmp_path), keys)
    run = InProcess(job)
    run.join("p1", write_party(str(tmp_path), keys, "p1", frames[0], run.port, policy="max_trees = 2"))
    run.join("p2", write_party(str(tmp_path), keys, "p2", frames[1], run.port,
                               policy='allowed_modes = ["vertical"]'))
    codes = run.wait()
    err = capsys.readouterr().err
    assert codes == {"master": 2, "p1": 2, "p2": 2}
    assert "error: policy: party 'p1' (rank 1) refuses the job: policy: the job asks n_estimators = 3, " \
           "above this party's max_trees = 2" in err
    assert "party 'p2' (rank 2) refuses" not in err
    assert "party 'p2': the master" in err and "stopped the job (exit code 2)" in err
    assert not os.path.exists(str(tmp_path / "model"))


def test_horizontal_mode_over_tcp_equals_in_process_run(tmp_path, keys):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(240, 4))
    y = np.where(X[:, 0] - X[:, 2] > 0, "yes", "no")
    paths = []
    for c in (1, 2):
        rows = slice(c - 1, None, 2)
        df = pd.DataFrame({f"f{j}": X[rows, j] for j in range(4)}).assign(y=y[rows])
        paths.append(str(tmp_path / f"c{c}.csv"))
        df.to_csv(paths[-1], index=False)
    settings = dict(task="classification", label_column="y", random_state=4, max_depth=3)
    run_horizontal(paths, mode="icdta4fl", model_dir=str(tmp_path / "ref"), **settings)
    job = write_job(str(tmp_path), keys)
    with open(job) as fh:          # the same job file, for mode icdta4fl
        text = fh.read().replace("[job]", '[job]\nmode = "icdta4fl"').replace("[forest]", "[icdta4fl]")
    text = re.sub(r"n_estimators = \d+\n|n_jobs = 1\n|random_state = 11", "", text)
    with open(job, "w") as fh:
        fh.write(text.replace("max_depth = 3", "max_depth = 3\nrandom_state = 4"))
    run = InProcess(job)
    for c, name in ((1, "p1"), (2, "p2")):
        party = write_party(str(tmp_path), keys, name, None, run.port, data=paths[c - 1])
        run.join(name, party)
    assert run.wait() == {"master": 0, "p1": 0, "p2": 0}
    ours = load_model(str(tmp_path / "model"))
    ref = load_model(str(tmp_path / "ref"))
    assert len(ref["tree"]["feature"]) > 1               # a tree with splits, compared array by array
    for k in TREE_KEYS:
        if k in ref["tree"]:
            assert np.array_equal(np.asarray(ours["tree"][k]), np.asarray(ref["tree"][k]), equal_nan=True), k


def _tcp_star(keys, n=2, reply_timeout=None):
    """Master and parties as threads of this process, over loopback TLS; returns the comms."""
    ctx = server_context(keys["master"][1], keys["master"][0],
                         [Certificate(keys[f"p{r}"][1], "t") for r in range(1, n + 1)])
    bound, comms = [], {}

    def party(r):
        while not bound:
            time.sleep(0.01)
        raw = connect_master(bound[0], client_context(keys[f"p{r}"][1], keys[f"p{r}"][0]),
                             _fp(keys, "master"), f"p{r}", 10)
        raw.rank, raw.size, raw.max_frame = r, n + 1, DEFAULT_MAX_FRAME
        comms[r] = Comm(raw)
    threads = [threading.Thread(target=party, args=(r,)) for r in range(1, n + 1)]
    for t in threads:
        t.start()
    raw = accept_parties(("127.0.0.1", 0), ctx, [Party(f"p{r}", _fp(keys, f"p{r}")) for r in range(1, n + 1)],
                         "master", 10, on_listen=bound.append)
    for t in threads:
        t.join()
    raw.max_frame = DEFAULT_MAX_FRAME
    comms[0] = Comm(raw)
    comms[0].reply_timeout = reply_timeout
    return comms


def _handshake(comms):
    threads = [threading.Thread(target=c.handshake) for r, c in comms.items() if r]
    for t in threads:
        t.start()
    comms[0].handshake()
    for t in threads:
        t.join()


def test_messages_and_a_stalled_party_over_tls(keys):
    comms = _tcp_star(keys, reply_timeout=0.5)
    _handshake(comms)
    big = np.arange(3_000_000, dtype=np.float64)
    comms[0].bcast({"op": "x", "a": big})
    for r in (1, 2):
        got = comms[r].recv(0)
        assert np.array_equal(got["a"], big)
        comms[r].send(0, {"op": "y", "s": float(got["a"].sum()) + r})
    assert {r: m["s"] for r, m in comms[0].gather().items()} == {1: big.sum() + 1, 2: big.sum() + 2}
    comms[1].send(0, {"op": "y"})                   # party 2 stays silent
    t0 = time.monotonic()
    with pytest.raises(FedForestError, match=r"party 'p2' \(rank 2\) sent nothing for 0.5 s"):
        comms[0].gather()
    assert time.monotonic() - t0 < 5
    comms[0].raw.abort(1)                           # every party is told to stop
    for r in (1, 2):
        deadline = time.monotonic() + 5
        while not comms[r].raw.aborted and time.monotonic() < deadline:
            time.sleep(0.01)
        assert comms[r].raw.aborted and comms[r].raw.abort_code == 1
        comms[r].raw.close()


def test_a_closed_party_connection_is_named(keys):
    comms = _tcp_star(keys)
    _handshake(comms)
    comms[1].raw.close()
    with pytest.raises(PeerLost, match=r"party 'p1' \(rank 1\) on host 127.0.0.1 "
                                  r"(closed the connection|connection broke)"):
        comms[0].recv(1)
    comms[0].raw.abort(1)
    comms[2].raw.close()


def test_fingerprints_and_policy_checks():
    fp = "ab" * 32
    assert normalize_fingerprint(fp, "x") == ":".join(["AB"] * 32)
    assert normalize_fingerprint("SHA256 Fingerprint=" + ":".join(["ab"] * 32), "x") == ":".join(["AB"] * 32)
    with pytest.raises(InputError, match="fp: must be a SHA-256 fingerprint"):
        normalize_fingerprint("ab" * 31, "fp")
    pol = Policy({"policy": {"max_trees": 10, "require_label_privacy": "paillier",
                             "allowed_modes": ["vertical"]}})
    ok = {"n_estimators": 10, "label_privacy": "paillier", "label_column": "y"}
    assert pol.refusals("train", "vertical", ok, None) == []
    out = pol.refusals("train", "vertical", dict(ok, n_estimators=11, label_privacy="plain",
                                                 master_full_model=True), "target")
    assert len(out) == 4 and "max_trees = 10" in out[0] and "'paillier'" in out[1]
    assert "master_full_model" in out[2] and "'target'" in out[3]
    assert "not allowed" in pol.refusals("train", "icdta4fl", {}, None)[0]
    with pytest.raises(InputError, match="policy.max_trees"):
        Policy({"policy": {"max_trees": 0}})
    with pytest.raises(InputError, match="unknown key 'max_tree'"):
        Policy({"policy": {"max_tree": 3}})

