"""X25519 key agreement, HKDF key derivation and HPKE sealing (RFC 9180)."""
import os

from cryptography.hazmat.primitives import hashes, hpke
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

KEY_BYTES = 32
# RFC 9180 base mode: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM
HPKE_SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)


class KeyPair:
    """An ephemeral X25519 key pair."""

    def __init__(self):
        self._private = X25519PrivateKey.generate()
        self.public = self._private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def shared_secret(self, peer_public):
        return self._private.exchange(X25519PublicKey.from_public_bytes(bytes(peer_public)))

    def open_sealed(self, sealed, info):
        """The plaintext of an HPKE box sealed to this key pair with :func:`seal_to`
        (``cryptography.exceptions.InvalidTag`` when it was sealed for another key,
        with another ``info``, or altered)."""
        return HPKE_SUITE.decrypt(bytes(sealed), self._private, info=info)


def seal_to(peer_public, plaintext, info):
    """An HPKE box only the holder of ``peer_public``'s private key can open;
    ``info`` binds the box to its purpose (who sealed it for whom)."""
    return HPKE_SUITE.encrypt(bytes(plaintext), X25519PublicKey.from_public_bytes(bytes(peer_public)),
                              info=info)


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
