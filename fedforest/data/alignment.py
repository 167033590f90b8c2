"""ID alignment of vertical parties without revealing IDs to the master.

The parties agree on a secret the master cannot read (relayed by the master,
sealed for each party), send keyed hashes (HMAC-SHA256) of their IDs; the
master intersects them and sends each party the positions of the shared rows
in a common order.
"""
import numpy as np

from cryptography.exceptions import InvalidTag

from ..crypto.ids import hash_ids
from ..crypto.keys import KeyPair, random_secret, seal_to
from ..errors import ChannelError, InputError
from ..logs import status
from ..transport.base import expect

MASTER = 0
GROUP_PUBLIC = "group_public"  # master -> party: send your public key for the group secret
GROUP_LEAD = "group_lead"      # master -> first party: seal a fresh secret for each other party
GROUP_MEMBER = "group_member"  # master -> other party: the lead's sealed secret for you
HASH_IDS = "hash_ids"          # master -> party: send keyed hashes of your IDs
ALIGN = "align"                # master -> party: the positions of the shared rows



def master_align(comm, cfg, n_rows_by_party):
    """Parties agree on a secret the master cannot read, send keyed hashes of
    their IDs; the master intersects and sends each party its aligned order."""
    parties = comm.clients
    pubs = {r: m["public"] for r, m in comm.exchange({r: {"op": GROUP_PUBLIC} for r in parties}).items()}
    first = parties[0]
    others = parties[1:]
    comm.send(first, {"op": GROUP_LEAD, "peers": others,
                      **{f"pub{r}": pubs[r] for r in others}})
    sealed = comm.recv(first)
    for r in others:
        comm.send(r, {"op": GROUP_MEMBER, "lead": first,
                      "sealed": sealed[f"sealed{r}"]})
    digests = {r: m["digests"] for r, m in comm.exchange({r: {"op": HASH_IDS} for r in parties}).items()}
    index = {}
    for r in parties:
        keys = [d.tobytes() for d in digests[r]]
        index[r] = dict(zip(keys, range(len(keys))))
    order = [k for k in (d.tobytes() for d in digests[first]) if all(k in index[r] for r in others)]
    if not order:
        raise InputError("ID alignment", "no ID is shared by all parties")
    positions = {r: np.fromiter((index[r][k] for k in order), dtype=np.int64, count=len(order))
                 for r in parties}
    comm.scatter({r: {"op": ALIGN, "positions": positions[r]} for r in parties})
    lost = {r: n_rows_by_party[r] - len(order) for r in parties}
    status(cfg, f"ID alignment: {len(order)} rows shared by all parties; rows dropped per party: "
         + ", ".join(f"party {r}: {lost[r]}" for r in parties))
    return len(order), lost


def _group_info(lead, member):
    return b"fedforest/v1/group-secret/%d->%d" % (lead, member)


def party_align(comm, rank, ids):
    kp = KeyPair()
    expect(comm.recv(MASTER), GROUP_PUBLIC)
    comm.send(MASTER, {"public": np.frombuffer(kp.public, dtype=np.uint8)})
    msg = comm.recv(MASTER)
    if msg["op"] == GROUP_LEAD:
        # the lead draws the ID secret and seals it to each other party's key (HPKE):
        # the master relays the boxes but cannot open them
        secret = random_secret()
        out = {f"sealed{r}": np.frombuffer(seal_to(msg[f"pub{r}"].tobytes(), secret, _group_info(rank, r)),
                                           dtype=np.uint8)
               for r in msg["peers"]}
        comm.send(MASTER, out)
    else:
        expect(msg, GROUP_MEMBER)
        lead = msg["lead"]
        try:
            secret = kp.open_sealed(msg["sealed"].tobytes(), _group_info(lead, rank))
        except InvalidTag:
            raise ChannelError(lead, rank, "the ID secret sealed by the lead party failed "
                                           "authentication") from None
    expect(comm.recv(MASTER), HASH_IDS)
    comm.send(MASTER, {"digests": hash_ids(ids, secret)})
    return expect(comm.recv(MASTER), ALIGN)["positions"]
