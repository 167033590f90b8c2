"""X25519 key agreement and HKDF key derivation."""
import os

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

KEY_BYTES = 32


class KeyPair:
    """An ephemeral X25519 key pair."""

    def __init__(self):
        self._private = X25519PrivateKey.generate()
        self.public = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def shared_secret(self, peer_public):
        return self._private.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))


def hkdf(secret, info, length):
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=info).derive(secret)


def pair_keys(keypair, peer_public, my_rank, peer_rank, purpose=b"channel"):
    """Directional AES-256 keys ``(send_key, recv_key)`` shared with one peer.
    Both sides derive the same two keys; each direction uses its own."""
    lo, hi = sorted((my_rank, peer_rank))
    okm = hkdf(keypair.shared_secret(peer_public),
               b"fedforest/v1/" + purpose + b"/%d-%d" % (lo, hi), 2 * KEY_BYTES)
    lo_to_hi, hi_to_lo = okm[:KEY_BYTES], okm[KEY_BYTES:]
    return (lo_to_hi, hi_to_lo) if my_rank == lo else (hi_to_lo, lo_to_hi)


def random_secret():
    return os.urandom(KEY_BYTES)
