"""AES-256-GCM channel between two ranks.

Each direction has its own key and a message counter.  The counter is never
sent: both ends track it, it forms the nonce and it is bound into the
associated data together with the two ranks, so a replayed, reordered,
dropped, truncated or modified message fails authentication.
"""
import os
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import ChannelError, FedForestError

TAG_BYTES = 16


class SecureChannel:
    def __init__(self, my_rank, peer_rank, send_key, recv_key):
        self.my_rank = my_rank
        self.peer_rank = peer_rank
        self._send = AESGCM(send_key)
        self._recv = AESGCM(recv_key)
        self.sent = 0
        self.received = 0

    @staticmethod
    def _nonce_aad(counter, src, dst):
        nonce = struct.pack(">IQ", 0, counter)
        aad = b"fedforest/v1" + struct.pack(">iiQ", src, dst, counter)
        return nonce, aad

    def seal(self, data):
        nonce, aad = self._nonce_aad(self.sent, self.my_rank, self.peer_rank)
        self.sent += 1
        out = bytearray(len(data) + TAG_BYTES)
        self._send.encrypt_into(nonce, data, aad, out)
        return out

    def open(self, data):
        if len(data) < TAG_BYTES:
            raise ChannelError(self.peer_rank, self.my_rank, "message shorter than its tag")
        nonce, aad = self._nonce_aad(self.received, self.peer_rank, self.my_rank)
        plain = bytearray(len(data) - TAG_BYTES)  # writable, so decoded arrays need no copy
        try:
            self._recv.decrypt_into(nonce, data, aad, plain)
        except InvalidTag:
            raise ChannelError(self.peer_rank, self.my_rank,
                               f"bad tag on message #{self.received}") from None
        self.received += 1
        return plain


NONCE_BYTES = 12


class PeerPayloadError(ChannelError):
    """A payload one party sealed for another failed authentication on the way
    (the master relays it): forged, altered, replayed or put in another place."""

    def __init__(self, src, dst, field, where):
        self.field, self.sender, self.receiver = field, src, dst
        FedForestError.__init__(self, f"protocol error: the {field!r} payload from rank {src} to rank {dst} "
                                      f"({where}) failed authentication: it was forged, altered, replayed "
                                      "or moved on its way through the master; the job stops")


class PeerSeal:
    """AES-256-GCM payloads between two parties that travel through the master.

    Unlike :class:`SecureChannel` (one message after another on a direct
    link), a party-to-party payload is opened where the protocol needs it, so
    it carries its own random nonce and is bound, in its associated data, to
    both ranks, its field name and its place in the job (``context``: for
    example the tree and the level).  A payload the master made up, altered,
    replayed from another tree or level, or moved to another field or party
    fails authentication; the keys are drawn afresh for every job, so a
    payload of another job fails too."""

    def __init__(self, my_rank, peer_rank, send_key, recv_key):
        self.my_rank = my_rank
        self.peer_rank = peer_rank
        self._send = AESGCM(send_key)
        self._recv = AESGCM(recv_key)

    @staticmethod
    def _aad(src, dst, field, context):
        return b"fedforest/v1/peer" + struct.pack(">ii", src, dst) + field.encode() + b"\0" + bytes(context)

    def seal(self, field, context, data):
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._send.encrypt(nonce, bytes(data), self._aad(self.my_rank, self.peer_rank, field, context))

    def open(self, field, context, data, where=""):
        data = bytes(data)
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise PeerPayloadError(self.peer_rank, self.my_rank, field, where or "too short")
        try:
            return self._recv.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:],
                                      self._aad(self.peer_rank, self.my_rank, field, context))
        except InvalidTag:
            raise PeerPayloadError(self.peer_rank, self.my_rank, field, where) from None
