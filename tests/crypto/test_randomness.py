"""The label holder's randomness for its encryptions: it holds the key's
factorisation, so it makes each ``r^n mod n²`` with the CRT from fixed-base
tables; valid, fresh and uniform factors."""
import gmpy2
import numpy as np
import pytest

from fedforest.crypto import paillier as P
from fedforest.errors import InputError

KEY = 512


@pytest.fixture(scope="module")
def keys():
    return P.generate_keypair(KEY, insecure=True)


@pytest.mark.parametrize("workers", [1, 2])
def test_crt_factors_are_fresh_nth_residues(keys, workers):
    pub, priv = keys
    factors = priv.randomness(40, workers)
    assert len(factors) == 40 and len(set(int(f) for f in factors)) == 40
    for f in factors:
        assert 1 < f < pub.nsq and gmpy2.gcd(f, pub.n) == 1
        assert priv.decrypt(f) == 0                   # an encryption of 0: an n-th residue
    values = list(range(40))
    cts = pub.encrypt_with(values, factors)
    assert [int(priv.decrypt(c)) for c in cts] == values


def test_factors_are_uniform_enough_to_hide_equal_plaintexts(keys):
    pub, priv = keys
    # the low bits of fresh factors look uniform (a weak sanity check of the CRT recombination)
    bits = np.array([int(f) & 1 for f in priv.randomness(400)])
    assert 0.4 < bits.mean() < 0.6


def test_factors_cover_every_nth_power_evenly():
    """Toy primes: the fixed-base factors take every n-th power mod p² and mod q²
    (the subgroups of order p - 1 and q - 1), about equally often, as r^n of a
    uniform r does."""
    p, q = 1019, 1187
    factors = P._crt_factors(p, q, 30_000)
    for prime in (p, q):
        group = {pow(x, prime, prime * prime) for x in range(1, prime)}
        seen = np.unique([f % (prime * prime) for f in factors], return_counts=True)
        assert set(seen[0].tolist()) == group
        expected = len(factors) / len(group)
        assert seen[1].min() > 0.25 * expected and seen[1].max() < 2.5 * expected


def test_fixed_base_powers_equal_modular_powers(keys):
    import secrets
    _, priv = keys
    p = gmpy2.mpz(priv._key.p)
    base = P._generator_base(p)
    table = P._power_table(base, p * p, int(p - 1).bit_length())
    for a in [0, 1, 255, 256, int(p) - 2] + [secrets.randbelow(int(p) - 1) for _ in range(20)]:
        assert P._fixed_power(table, a, p * p) == gmpy2.powmod(base, a, p * p)
    big = gmpy2.next_prime(P.TRIAL_BOUND)   # not searched for
    assert P._small_prime_factors(2 * 3 * 3 * 7 * big) == [2, 3, 7]


def test_repeated_or_invalid_factors_are_refused(keys):
    pub, priv = keys
    f = priv.randomness(2)
    with pytest.raises(InputError, match="invalid or repeated"):
        pub.encrypt_with([1, 1], [f[0], f[0]])
    with pytest.raises(InputError, match="invalid or repeated"):
        pub.encrypt_with([1], [gmpy2.mpz(1)])
    with pytest.raises(InputError, match="2 randomness factors for 1 values"):
        pub.encrypt_with([1], f)


def test_factors_made_ahead_are_fresh_and_sized(keys):
    pub, priv = keys
    with P.RandomnessMaker(priv, workers=2) as maker:
        maker.CHUNK = 7                      # several tasks per worker
        maker.start(30)
        with pytest.raises(RuntimeError, match="already being made"):
            maker.start(30)
        first = maker.take(30)
        second = maker.take(30)              # nothing started: made now, in the workers
        maker.start(10)
        with pytest.raises(RuntimeError, match="10 factors were made ahead, 12 are needed"):
            maker.take(12)
        maker.start(5)                       # closing cancels a batch nobody takes
    allf = [int(f) for f in first + second]
    assert len(first) == len(second) == 30 and len(set(allf)) == 60
    assert all(priv.decrypt(f) == 0 and gmpy2.gcd(f, pub.n) == 1 for f in first + second)
