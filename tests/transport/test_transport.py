"""Channels, message encoding and failure propagation (in-process transport)."""
import numpy as np
import pytest

from fedforest.crypto.channel import SecureChannel
from fedforest.crypto.keys import KeyPair, pair_keys
from fedforest.errors import ChannelError, RemoteError
from fedforest.transport.base import decode, encode
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
    assert comms[0].bytes_sent > 0


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
