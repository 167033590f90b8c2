"""Cryptography: authenticated channels, key agreement, keyed ID hashing."""
