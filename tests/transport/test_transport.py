"""Channels, message encoding and failure propagation (in-process transport)."""
import time

import numpy as np
import pytest

from fedforest.crypto.channel import SecureChannel
from fedforest.crypto.keys import KeyPair, pair_keys
from fedforest.errors import ChannelError, RemoteError
from fedforest.transport.base import Comm, WireError, decode, encode
from fedforest.transport.inprocess import run_inprocess


def _pair():
    a, b = KeyPair(), KeyPair()
    ka = pair_keys(a, b.public, 0, 1)
    kb = pair_keys(b, a.public, 1, 0)
    return SecureChannel(0, 1, *ka), SecureChannel(1, 0, *kb)


def test_directional_keys_agree_and_differ():
    a, b = KeyPair(), KeyPair()
    send_a, recv_a = pair_keys(a, b.public, 0, 3)
    send_b, recv_b = pair_keys(b, a.public, 3, 0)
    assert send_a == recv_b and send_b == recv_a and send_a != send_b


def test_channel_roundtrip_and_ciphertext_hides_plaintext():
    ca, cb = _pair()
    msg = b"secret payload" * 10
    ct = ca.seal(msg)
    assert msg not in ct
    assert cb.open(ct) == msg


@pytest.mark.parametrize("attack", ["flip", "replay", "reorder", "truncate", "reflect"])
def test_channel_rejects_tampering(attack):
    ca, cb = _pair()
    m1, m2 = ca.seal(b"first"), ca.seal(b"second")
    if attack == "flip":
        bad = bytearray(m1)
        bad[3] ^= 1
        seq = [bytes(bad)]
    elif attack == "replay":
        assert cb.open(m1) == b"first"
        seq = [m1]
    elif attack == "reorder":
        seq = [m2]
    elif attack == "truncate":
        seq = [m1[:-1]]
    else:  # a message sent back to its sender
        with pytest.raises(ChannelError) as err:
            ca.open(m1)
        assert "rank 1 to rank 0" in str(err.value)
        return
    with pytest.raises(ChannelError) as err:
        for m in seq:
            cb.open(m)
    assert "from rank 0 to rank 1" in str(err.value)


def test_encode_decode_keeps_arrays_and_control_values():
    msg = {"op": "x", "n": 3, "nested": {"a": [1, 2]}, "f": np.arange(7, dtype=np.float32),
           "m": np.ones((3, 4), dtype=np.uint8), "empty": np.empty((0, 5), dtype=np.int64),
           "u": np.array(["a", "bc"])}
    out = decode(encode(msg))
    assert decode(bytes(encode(msg)))["f"].flags.writeable  # read-only input: arrays are copied
    assert out["op"] == "x" and out["n"] == 3 and out["nested"] == {"a": [1, 2]}
    for k in ("f", "m", "empty", "u"):
        assert out[k].dtype == msg[k].dtype and out[k].shape == msg[k].shape
        assert np.array_equal(out[k], msg[k])
        assert out[k].flags.writeable and out[k].flags.aligned


def test_nested_values_keep_their_types_and_arrays_travel_as_buffers():
    tree = {"feature": np.array([0, -2, -2], dtype=np.int32), "value": np.eye(3)}
    msg = {"op": "final", "tree": tree, "trees": [tree, None], "pair": (1, "a", 2.5), 3: "int key",
           "raw": b"\x00\x01", "n": np.int64(7), "x": np.float32(0.5), "flag": np.bool_(True),
           "nan": float("nan"), "by_rank": {1: [0.5], 2: {"deep": np.arange(3)}}}
    data = encode(msg)
    assert bytes(data[:4]) == b"FFW1"
    out = decode(data)
    assert np.array_equal(out["tree"]["value"], np.eye(3)) and out["tree"]["feature"].dtype == np.int32
    assert np.array_equal(out["trees"][0]["feature"], tree["feature"]) and out["trees"][1] is None
    assert out["pair"] == (1, "a", 2.5) and out[3] == "int key" and out["raw"] == b"\x00\x01"
    assert type(out["n"]) is int and out["n"] == 7 and type(out["x"]) is float and out["flag"] is True
    assert np.isnan(out["nan"])
    assert out["by_rank"][1] == [0.5] and np.array_equal(out["by_rank"][2]["deep"], np.arange(3))
    # array contents never pass through the header
    assert b"deep" in data and np.arange(3).tobytes() in bytes(data)


@pytest.mark.parametrize("value", [object(), {1, 2}, np.array([{}, 1], dtype=object), lambda: 0])
def test_values_that_are_not_data_are_refused_when_sent(value):
    with pytest.raises(WireError, match="cannot travel"):
        encode({"op": "x", "v": value})


def _frame(header, body=b""):
    import json
    import struct
    h = json.dumps(header).encode()
    out = b"FFW1" + struct.pack("<Q", len(h)) + h
    return bytearray(out + b"\0" * (-len(out) % 16) + body)


@pytest.mark.parametrize("data,match", [
    (bytearray(b"\x80\x05\x95" + b"\0" * 40), "wrong magic"),          # a pickle is not a message
    (_frame([["D", []], [["|O", [1]]]], b"\0" * 16), "not plain data"),
    (_frame([["D", []], [["<f8", [100]]]], b"\0" * 16), "truncated message body"),
    (_frame([["A", 5], []]), "malformed array reference"),
    (_frame([["X", []], []]), "unknown value tag"),
    (_frame([["L", [1]], []]), "a message must be a dict"),
    (bytearray(b"FFW1" + b"\xff" * 8 + b"{}"), "truncated message header"),
])
def test_malformed_messages_are_refused_with_a_clear_error(data, match):
    with pytest.raises(WireError, match=match):
        decode(data)


def _slow_first_party(comm):
    import time
    comm.handshake()
    msg = comm.recv(0)
    if comm.rank == 1:
        time.sleep(0.4)
    comm.send(0, {"rank": comm.rank, "x": msg["x"]})


def test_gather_takes_replies_as_they_arrive_and_returns_them_in_rank_order(monkeypatch):
    from fedforest.transport.base import Comm
    opened = []
    original = Comm._open

    def spy(self, src, data):
        if self.rank == 0:
            opened.append(src)
        return original(self, src, data)

    monkeypatch.setattr(Comm, "_open", spy)

    def master(comm):
        comm.handshake()
        comm.bcast({"op": "go", "x": np.arange(4)})
        return comm.gather()

    out, comms = run_inprocess(3, master, _slow_first_party)
    assert list(out) == [1, 2, 3] and [m["rank"] for m in out.values()] == [1, 2, 3]
    assert opened[-1] == 1 and sorted(opened[-3:]) == [1, 2, 3]   # the slow party came last
    assert all(np.array_equal(m["x"], np.arange(4)) for m in out.values())


def test_a_broadcast_is_encoded_once(monkeypatch):
    import fedforest.transport.base as base
    calls = []
    original = base.encode
    monkeypatch.setattr(base, "encode", lambda msg: calls.append(msg.get("op")) or original(msg))

    def master(comm):
        comm.handshake()
        comm.bcast({"op": "go", "x": np.arange(4)})
        return comm.gather()

    run_inprocess(4, master, _slow_first_party)
    assert calls.count("go") == 1


def _echo_master(comm):
    comm.handshake()
    replies = comm.exchange({r: {"op": "ping", "x": np.arange(r + 1)} for r in comm.clients})
    comm.exchange({r: {"op": "stop"} for r in comm.clients})
    return replies


def _echo_party(comm):
    comm.handshake()
    while True:
        msg = comm.recv(0)
        if msg["op"] == "stop":
            comm.send(0, {})
            return
        if comm.rank == 2 and msg["op"] == "ping":
            raise ZeroDivisionError("party two cannot do this")
        comm.send(0, {"y": msg["x"] * 2})


def test_party_exception_reaches_master_with_rank_and_traceback():
    with pytest.raises(RemoteError) as err:
        run_inprocess(3, _echo_master, _echo_party)
    e = err.value
    assert e.rank == 2 and e.exc_type == "ZeroDivisionError"
    assert "party two cannot do this" in str(e)
    assert "_echo_party" in e.remote_traceback and "Traceback" in e.remote_traceback


def _ok_party(comm):
    comm.handshake()
    while True:
        msg = comm.recv(0)
        comm.send(0, {"y": msg.get("x", np.zeros(1)) * 2})
        if msg["op"] == "stop":
            return


def test_exchange_counts_rounds_and_bytes():
    out, comms = run_inprocess(2, _echo_master, _ok_party)
    assert np.array_equal(out[2]["y"], np.arange(3) * 2)
    assert comms[0].rounds == 2
    # every message is its frame plus the 16-byte GCM tag, nothing else
    sent = [{"op": "ping", "x": np.arange(r + 1)} for r in (1, 2)] + [{"op": "stop"}] * 2
    assert comms[0].bytes_sent == sum(len(encode(m)) + 16 for m in sent)
    assert comms[0].messages_sent == 4


@pytest.mark.parametrize("tamper,sender,receiver", [((0, 2, 0), 0, 2), ((1, 0, 0), 1, 0)])
def test_tampered_message_stops_the_job_naming_both_ranks(tamper, sender, receiver):
    with pytest.raises((ChannelError, RemoteError)) as err:
        run_inprocess(2, _echo_master, _ok_party, tamper=tamper)
    assert f"from rank {sender} to rank {receiver}" in str(err.value)


def test_evaluate_command_prints_metrics(tmp_path, capsys):
    import pandas as pd
    from fedforest.cli import main
    pd.DataFrame({"id": ["a", "b", "c", "d"], "prediction": ["x", "y", "y", "x"],
                  "proba_x": [0.9, 0.2, 0.4, 0.7], "proba_y": [0.1, 0.8, 0.6, 0.3]}
                 ).to_csv(tmp_path / "pred.csv", index=False)
    pd.DataFrame({"id": ["d", "c", "b", "a", "e"], "label": ["x", "x", "y", "x", "y"]}
                 ).to_csv(tmp_path / "truth.csv", index=False)
    assert main(["evaluate", "--predictions", str(tmp_path / "pred.csv"), "--truth",
                 str(tmp_path / "truth.csv"), "--label-column", "label"]) == 0
    out = capsys.readouterr().out
    assert "accuracy: 0.7500" in out and "rows: 4" in out and "f1_binary" in out


def test_evaluate_matches_number_forms_and_skips_missing_truth(tmp_path, capsys):
    import pandas as pd
    from fedforest.cli import main
    pd.DataFrame({"id": ["1", "2", "3"], "prediction": [1, 0, 1], "proba_0": [0.1, 0.9, 0.2],
                  "proba_1": [0.9, 0.1, 0.8]}).to_csv(tmp_path / "pred.csv", index=False)
    pd.DataFrame({"id": [1, 2, 3], "y": [1.0, 0.0, None]}).to_parquet(tmp_path / "truth.parquet")
    assert main(["evaluate", "--predictions", str(tmp_path / "pred.csv"), "--truth",
                 str(tmp_path / "truth.parquet"), "--label-column", "y"]) == 0
    out = capsys.readouterr().out
    assert "accuracy: 1.0000" in out and "rows: 2" in out and "rows_without_truth: 1" in out


def test_master_reports_a_stuck_party_after_reply_timeout():
    import time as _time
    from fedforest.errors import FedForestError

    def master(comm):
        comm.reply_timeout = 0.5
        comm.handshake()
        return comm.exchange({r: {"op": "ping", "x": np.arange(2)} for r in comm.clients})

    def party(comm):
        comm.handshake()
        comm.recv(0)
        if comm.rank == 2:
            _time.sleep(2)  # alive but silent (without the timeout the reply would come late)
        comm.send(0, {"y": np.zeros(1)})

    with pytest.raises(FedForestError, match="rank 2 sent nothing for 0.5 s"):
        run_inprocess(2, master, party)


# -- a stop every rank takes part in (what srun needs to report the job's own exit code) --
def _cooperative_comms(n_parties):
    from fedforest.transport.inprocess import InProcessNetwork, InProcessTransport
    net = InProcessNetwork(n_parties + 1)
    raws = [InProcessTransport(net, r) for r in range(n_parties + 1)]
    for raw in raws:
        raw.cooperative_stop = True
    return net, [Comm(raw) for raw in raws]


def _party_thread(comm, outcome, busy=None):
    import threading

    from fedforest.transport.runner import run_rank

    def role(c):
        c.handshake()
        if busy is not None:
            busy.wait(timeout=30)         # "in a kernel": receives nothing
        c.recv(0)
        return "returned"

    def run():
        try:
            outcome[comm.rank] = run_rank(comm, None, role)
        except SystemExit as exc:
            outcome[comm.rank] = exc.code
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_master_stop_ends_every_waiting_party_with_its_exit_code():
    net, comms = _cooperative_comms(3)
    outcome = {}
    threads = [_party_thread(c, outcome) for c in comms[1:]]
    comms[0].handshake()
    assert comms[0].stop_parties(2) is True
    for t in threads:
        t.join(timeout=10)
    assert outcome == {1: 2, 2: 2, 3: 2}
    assert not net.stopped.is_set()           # no abort: each rank ended by itself


def test_a_party_that_does_not_answer_a_stop_is_left_to_the_abort(monkeypatch):
    import threading
    from fedforest.transport import base
    monkeypatch.setattr(base, "STOP_ACK_SECONDS", 0.3)
    net, comms = _cooperative_comms(2)
    busy = threading.Event()
    outcome = {}
    threads = [_party_thread(comms[1], outcome), _party_thread(comms[2], outcome, busy)]
    comms[0].handshake()
    t0 = time.monotonic()
    assert comms[0].stop_parties(2) is False
    assert time.monotonic() - t0 < 3
    busy.set()
    for t in threads:
        t.join(timeout=10)
    assert outcome[1] == 2


def test_a_party_reporting_an_error_ends_with_the_masters_code():
    from fedforest.errors import RemoteError
    from fedforest.transport.runner import run_rank
    import threading
    net, comms = _cooperative_comms(1)
    codes = {}

    def party(comm):
        comm.handshake()
        raise ValueError("bad party file")

    def run():
        try:
            run_rank(comms[1], None, party)
        except SystemExit as exc:
            codes[1] = exc.code
    t = threading.Thread(target=run, daemon=True)
    t.start()
    comms[0].handshake()
    with pytest.raises(RemoteError):
        comms[0].recv(1)
    assert comms[0].stop_parties(2) is True
    t.join(timeout=10)
    assert codes == {1: 2}
