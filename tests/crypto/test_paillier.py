"""Paillier layer on raw gmpy2 integers (small insecure keys for speed, one 2048-bit run)."""
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import gmpy2
import numpy as np
import pytest
from phe import paillier as phe_paillier

from fedforest.crypto import paillier
from fedforest.crypto.paillier import (PublicKey, Slots, fixed_point, generate_keypair,
                                       one_hot_plaintexts)
from fedforest.errors import InputError


@pytest.fixture(scope="module")
def keys():
    return generate_keypair(512, insecure=True)


def test_roundtrip_and_homomorphic_operations(keys):
    pub, priv = keys
    rng = np.random.default_rng(0)
    a, b, k = (int(x) for x in rng.integers(0, 10 ** 6, 3))
    ca, cb = pub.encrypt(a), pub.encrypt(b)
    assert ca != pub.encrypt(a)                       # fresh randomness every time
    assert priv.decrypt(ca) == a
    assert priv.decrypt(pub.add(ca, cb)) == a + b
    assert priv.decrypt(pub.scale(ca, k)) == a * k
    assert priv.decrypt(pub.shift(ca, 40)) == a << 40
    assert priv.decrypt(pub.subtract(pub.add(ca, cb), cb)) == a
    assert priv.decrypt(pub.zero()) == 0


def test_interoperates_with_phe(keys):
    pub, priv = keys
    phe_pub = phe_paillier.PaillierPublicKey(int(pub.n))
    c = phe_pub.raw_encrypt(12345)
    assert priv.decrypt(c) == 12345
    assert priv._key.raw_decrypt(int(pub.encrypt(777))) == 777


def test_one_hot_counts_add_up_per_class_in_slots(keys):
    pub, priv = keys
    codes = np.array([0, 2, 1, 2, 2, 0, 1, 2])
    weights = np.array([1, 3, 0, 2, 1, 1, 2, 1])     # bootstrap multiplicities
    slots = Slots(Slots.width_for(weights.sum()), pub.key_length)
    enc = pub.encrypt_many(one_hot_plaintexts(codes, 3, slots))
    acc = pub.zero()
    for c, w in zip(enc, weights):
        acc = pub.add(acc, pub.scale(c, int(w)))
    got = slots.unpack(priv.decrypt(acc), 3)
    assert got == [int(weights[codes == k].sum()) for k in range(3)]


def test_horner_packing_puts_many_sums_in_one_ciphertext(keys):
    pub, priv = keys
    slots = Slots(20, pub.key_length)
    values = list(range(1000, 1000 + slots.per_plaintext))
    packed = pub.pack(pub.encrypt_many(values), slots.width)
    assert slots.unpack(priv.decrypt(packed), len(values)) == values
    assert priv.decrypt(pub.encrypt(int(slots.pack_plain(values[:3])))) == slots.pack_plain(values[:3])


def test_slot_overflow_is_refused_before_work_and_detected_after(keys):
    pub, priv = keys
    slots = Slots(8, pub.key_length)
    with pytest.raises(InputError, match="overflow 8-bit slots: too many rows"):
        slots.check_capacity(300)
    slots.check_capacity(255)
    with pytest.raises(InputError, match="does not fit a 8-bit slot"):
        slots.pack_plain([256])
    # a sum that ran over its slot shows up when unpacking the top slot
    over = pub.add(pub.encrypt(200 << 8), pub.encrypt(100 << 8))
    with pytest.raises(InputError, match="overflows its slots"):
        slots.unpack(priv.decrypt(over), 2)


def test_serialization_is_fixed_size_and_validated(keys):
    pub, priv = keys
    cts = pub.encrypt_many([1, 2, 3])
    blocks = pub.serialize(cts)
    assert blocks.shape == (3, pub.ciphertext_bytes) and blocks.dtype == np.uint8
    assert [priv.decrypt(c) for c in pub.deserialize(blocks)] == [1, 2, 3]
    bad = blocks.copy()
    bad[1] = 0xFF                                     # >= n^2: not a ciphertext
    with pytest.raises(InputError, match="not a valid value under this public key"):
        pub.deserialize(bad)
    with pytest.raises(InputError, match="do not match the 512-bit key"):
        pub.deserialize(blocks[:, 1:])
    assert PublicKey.from_bytes(pub.to_bytes()).n == pub.n


def test_foreign_key_is_told_apart_and_decrypts_to_garbage(keys):
    pub, priv = keys
    other_pub, _ = generate_keypair(512, insecure=True)
    assert other_pub.fingerprint != pub.fingerprint
    assert PublicKey(pub.n).fingerprint == pub.fingerprint
    assert priv.decrypt(other_pub.encrypt(5)) != 5   # why keys are checked by fingerprint


def test_key_length_policy():
    with pytest.raises(InputError, match="must be 2048 or 3072 bits"):
        generate_keypair(1024)
    with pytest.raises(InputError, match="multiple of 8 bits"):
        generate_keypair(100, insecure=True)


def test_fixed_point_shifts_to_non_negative():
    ints, offset = fixed_point([-1.5, 0.25, 2.0], 8)
    assert offset == -1.5 and ints == [0, 448, 896]


def test_a_2048_bit_key_round_trip():
    pub, priv = generate_keypair(2048)
    assert pub.key_length == 2048 and pub.ciphertext_bytes == 512
    c = pub.add(pub.encrypt(41), pub.encrypt(1))
    assert priv.decrypt(pub.deserialize(pub.serialize([c]))[0]) == 42


def _serial_group_products(items, index, starts, modulus):
    out = []
    for g in range(len(starts) - 1):
        acc = 1
        for r in index[starts[g]:starts[g + 1]]:
            acc = acc * int(items[r]) % modulus
        out.append(acc)
    return out


@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_group_products_are_the_same_numbers_for_any_thread_count(keys, workers, monkeypatch):
    pub, _ = keys
    rng = np.random.default_rng(workers)
    plain = rng.integers(0, 1000, 300).tolist()
    items = pub.encrypt_many(plain)
    index = rng.integers(0, 300, 4_000).tolist()
    # groups of 1 to 400 positions, one spanning several threads' runs
    sizes = [1, 400, 3, 1, 250] + rng.integers(1, 60, 60).tolist()
    sizes.append(len(index) - sum(sizes))
    assert sizes[-1] > 0
    starts = np.concatenate(([0], np.cumsum(sizes))).tolist()
    monkeypatch.setattr(paillier, "PRODUCTS_PER_THREAD", 1)   # let small work use the threads
    got = paillier.group_products(items, index, starts, pub.nsq, workers)
    assert [int(v) for v in got] == _serial_group_products(items, index, starts, int(pub.nsq))
    # the sums they encrypt
    _, priv = keys
    want = [sum(plain[r] for r in index[a:b]) for a, b in zip(starts[:-1], starts[1:])]
    assert [int(priv.decrypt(v)) for v in got] == want


def test_parallel_map_keeps_order(keys):
    pub, priv = keys
    cts = pub.encrypt_many(range(40))
    assert [int(v) for v in paillier.parallel_map(priv.decrypt, cts, 4)] == list(range(40))


def _other_thread_progress(pool, op):
    """How often this thread ran while ``op`` ran in a thread of ``pool``: the
    switch interval is raised above the op's time, so this thread, which
    waits for the GIL, runs during the op only if the op releases it."""
    started, span, stamps = threading.Event(), [], []

    def work():
        started.set()
        span.append(time.perf_counter())
        op()
        span.append(time.perf_counter())
    old = sys.getswitchinterval()
    sys.setswitchinterval(2.0)
    try:
        fut = pool.submit(work)
        started.wait()
        while not fut.done():
            stamps.append(time.perf_counter())
            time.sleep(0.0005)
        fut.result()
    finally:
        sys.setswitchinterval(old)
    return sum(span[0] < t < span[1] for t in stamps)


@pytest.mark.parametrize("what", ["powmod", "mulmod"])
def test_big_number_arithmetic_in_the_crypto_threads_releases_the_gil(what):
    """The decryptions (phe's CRT: two gmpy2 powmods) and the encrypted sums
    (products modulo n²) run on every core only if gmpy2 releases the GIL in
    :func:`gil_free_threads`: while one of their threads computes, another
    thread runs; in a plain thread it cannot."""
    modulus = gmpy2.mpz(2) ** 8_000 + 1235
    a = gmpy2.mpz(3) ** 5_000 % modulus
    big, mod = gmpy2.mpz(3) ** 1_000_000, gmpy2.mpz(7) ** 200_000 + 2
    op = (lambda: gmpy2.powmod(a, modulus - 2, modulus)) if what == "powmod" else (lambda: big * big % mod)
    with ThreadPoolExecutor(1) as plain:
        assert _other_thread_progress(plain, op) == 0           # the probe sees a held GIL
    with paillier.gil_free_threads(1) as pool:
        assert _other_thread_progress(pool, op) > 0
