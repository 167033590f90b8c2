"""AES-256-GCM channel between two ranks.

Each direction has its own key and a message counter.  The counter is never
sent: both ends track it, it forms the nonce and it is bound into the
associated data together with the two ranks, so a replayed, reordered,
dropped, truncated or modified message fails authentication.
"""
import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import ChannelError

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
