"""ID alignment of vertical parties without revealing IDs to the master.

The parties agree on a secret the master cannot read (relayed by the master,
sealed for each party), send keyed hashes (HMAC-SHA256) of their IDs; the
master intersects them and sends each party the positions of the shared rows
in a common order.
"""
import numpy as np

from ..crypto.channel import SecureChannel
from ..crypto.ids import hash_ids
from ..crypto.keys import KeyPair, pair_keys, random_secret
from ..errors import InputError

MASTER = 0


def _log(cfg, text):
    if not cfg.quiet:
        print(text, flush=True)


def expect(msg, op):
    if msg.get("op") != op:
        raise RuntimeError(f"protocol error: expected {op!r}, got {msg.get('op')!r}")
    return msg

def master_align(comm, cfg, n_rows_by_party):
    """Parties agree on a secret the master cannot read, send keyed hashes of
    their IDs; the master intersects and sends each party its aligned order."""
    parties = comm.clients
    pubs = {r: m["public"] for r, m in comm.exchange({r: {"op": "group_public"} for r in parties}).items()}
    first = parties[0]
    others = parties[1:]
    comm.send(first, {"op": "group_lead", "peers": others,
                      **{f"pub{r}": pubs[r] for r in others}})
    sealed = comm.recv(first)
    for r in others:
        comm.send(r, {"op": "group_member", "lead": first, "lead_public": pubs[first],
                      "sealed": sealed[f"sealed{r}"]})
    digests = {r: m["digests"] for r, m in comm.exchange({r: {"op": "hash_ids"} for r in parties}).items()}
    index = {}
    for r in parties:
        keys = [d.tobytes() for d in digests[r]]
        index[r] = dict(zip(keys, range(len(keys))))
    order = [k for k in (d.tobytes() for d in digests[first]) if all(k in index[r] for r in others)]
    if not order:
        raise InputError("ID alignment", "no ID is shared by all parties")
    positions = {r: np.fromiter((index[r][k] for k in order), dtype=np.int64, count=len(order))
                 for r in parties}
    comm.scatter({r: {"op": "align", "positions": positions[r]} for r in parties})
    lost = {r: n_rows_by_party[r] - len(order) for r in parties}
    _log(cfg, f"ID alignment: {len(order)} rows shared by all parties; rows dropped per party: "
         + ", ".join(f"party {r}: {lost[r]}" for r in parties))
    return len(order), lost


def party_align(comm, rank, ids):
    kp = KeyPair()
    expect(comm.recv(MASTER), "group_public")
    comm.send(MASTER, {"public": np.frombuffer(kp.public, dtype=np.uint8)})
    msg = comm.recv(MASTER)
    if msg["op"] == "group_lead":
        secret = random_secret()
        out = {}
        for r in msg["peers"]:
            key, _ = pair_keys(kp, msg[f"pub{r}"].tobytes(), rank, r, b"group")
            out[f"sealed{r}"] = np.frombuffer(SecureChannel(rank, r, key, key).seal(secret), dtype=np.uint8)
        comm.send(MASTER, out)
    else:
        expect(msg, "group_member")
        # the lead sealed with its send key, which is this party's receive key
        lead = msg["lead"]
        _, recv_key = pair_keys(kp, msg["lead_public"].tobytes(), rank, lead, b"group")
        secret = SecureChannel(rank, lead, recv_key, recv_key).open(msg["sealed"].tobytes())
    expect(comm.recv(MASTER), "hash_ids")
    comm.send(MASTER, {"digests": hash_ids(ids, secret)})
    return expect(comm.recv(MASTER), "align")["positions"]

