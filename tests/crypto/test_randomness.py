"""The label holder's randomness for its encryptions: it holds the key's
factorisation, so it makes each factor with the CRT from fixed-base tables:
``h_s^r mod n²`` for a short uniform ``r`` (``paillier_randomness = "short"``,
the default) or a uniform ``n``-th residue (``"full"``); valid, fresh factors
of the stated construction."""
import secrets

import gmpy2
import numpy as np
import pytest

from fedforest.crypto import paillier as P
from fedforest.errors import InputError

KEY = 512


@pytest.fixture(scope="module")
def keys():
    return P.generate_keypair(KEY, insecure=True)


@pytest.mark.parametrize("mode", P.RANDOMNESS_MODES)
@pytest.mark.parametrize("workers", [1, 2])
def test_crt_factors_are_fresh_nth_residues(keys, workers, mode):
    pub, priv = keys
    with P.RandomnessMaker(priv, workers, mode) as maker:
        factors = maker.take(40)
    assert len(factors) == 40 and len(set(int(f) for f in factors)) == 40
    for f in factors:
        assert 1 < f < pub.nsq and gmpy2.gcd(f, pub.n) == 1
        assert priv.decrypt(f) == 0                   # an encryption of 0: an n-th residue
    values = list(range(40))
    cts = pub.encrypt_with(values, factors)
    assert [int(priv.decrypt(c)) for c in cts] == values


def test_the_key_makes_short_factors_by_default(keys):
    pub, priv = keys
    assert priv.randomness_mode == "short"
    # the low bits of fresh factors look uniform (a weak sanity check of the CRT recombination)
    factors = priv.randomness(400)
    bits = np.array([int(f) & 1 for f in factors])
    assert 0.4 < bits.mean() < 0.6
    # short factors are powers of h_s: their Jacobi symbol mod n is always +1 (uniform ones: either sign)
    assert {gmpy2.jacobi(f % pub.n, pub.n) for f in factors} == {1}
    with P.RandomnessMaker(priv, 1, "full") as maker:
        assert {gmpy2.jacobi(f % pub.n, pub.n) for f in maker.take(200)} == {1, -1}


def test_short_exponents_are_twice_the_keys_security_strength():
    # NIST SP 800-57 part 1, table 2: 2048 bits -> 112, 3072 -> 128, 7680 -> 192, 15360 -> 256
    assert [P.short_exponent_bits(k) for k in (2048, 3072, 4096, 7680, 15360, 16384)] == \
        [224, 256, 256, 384, 512, 512]
    assert P.short_exponent_bits(512) == P.short_exponent_bits(1024) == 160      # test keys
    exps = P.short_exponents(3000, 224)
    assert all(0 <= r < 2 ** 224 for r in exps) and len(set(exps)) == 3000
    top = np.array([r >> 223 for r in exps])
    assert max(r.bit_length() for r in exps) == 224 and 0.45 < top.mean() < 0.55   # every bit used


def test_a_maker_draws_exponents_of_the_stated_length(keys, monkeypatch):
    pub, priv = keys
    asked = []
    draw = P.short_exponents
    monkeypatch.setattr(P, "short_exponents", lambda count, bits: asked.append((count, bits)) or draw(count, bits))
    with P.RandomnessMaker(priv) as maker:
        assert maker.mode == "short" and maker.bits == P.short_exponent_bits(KEY) == 160
        maker.take(5)
    assert asked == [(5, 160)]


def test_short_factors_are_h_s_to_the_short_exponent(keys):
    pub, priv = keys
    p, q, bp, bq = priv._crt_args()
    h = priv.short_base()
    assert h % (p * p) == bp and h % (q * q) == bq and priv.decrypt(h) == 0      # an n-th residue
    lam = (p - 1) * (q - 1) // int(gmpy2.gcd(p - 1, q - 1))
    assert pow(int(h), lam, int(pub.nsq)) == 1 and pow(int(h), lam // 2, int(pub.nsq)) != 1
    with P.RandomnessMaker(priv, 1, "short") as maker:
        exps = maker.draw(25) + [0, 1, 2 ** 160 - 1, 2 ** 12, 2 ** 12 - 1]
        assert [int(f) for f in maker.factors_for(exps)] == [pow(int(h), r, int(pub.nsq)) for r in exps]


def test_full_factors_are_independent_uniform_powers(keys):
    pub, priv = keys
    p, q, bp, bq = priv._crt_args()
    with P.RandomnessMaker(priv, 1, "full") as maker:
        exps = maker.draw(25)
        assert all(0 <= a < p - 1 and 0 <= c < q - 1 for a, c in exps)
        got = maker.factors_for(exps)
    for f, (a, c) in zip(got, exps):
        assert f % (p * p) == pow(bp, a, p * p) and f % (q * q) == pow(bq, c, q * q)


@pytest.mark.parametrize("mode", P.RANDOMNESS_MODES)
def test_factors_of_given_exponents_do_not_depend_on_the_workers(keys, mode):
    _, priv = keys
    with P.RandomnessMaker(priv, 1, mode) as one, P.RandomnessMaker(priv, 2, mode) as two:
        two.CHUNK = 7                        # several tasks per worker
        exps = one.draw(40)
        assert [int(f) for f in two.factors_for(exps)] == [int(f) for f in one.factors_for(exps)]


def test_a_bad_randomness_setting_is_refused(keys):
    _, priv = keys
    with pytest.raises(InputError, match=r"^paillier_randomness: must be 'short' or 'full', got 'half'$"):
        P.generate_keypair(KEY, insecure=True, randomness="half")
    with pytest.raises(InputError, match=r"^paillier_randomness: must be 'short' or 'full', got None$"):
        P.check_randomness(None)
    with pytest.raises(InputError, match="paillier_randomness: must be 'short' or 'full'"):
        P.RandomnessMaker(priv, 1, "Short")
    _, full = P.generate_keypair(KEY, insecure=True, randomness="full")
    assert full.randomness_mode == "full"


@pytest.mark.parametrize("mode", P.RANDOMNESS_MODES)
def test_factors_cover_every_nth_power_evenly(mode):
    """Toy primes: the fixed-base factors take every n-th power mod p² and mod q²
    (the subgroups of order p - 1 and q - 1), about equally often, as r^n of a
    uniform r does (short exponents of 64 bits are uniform mod p - 1 here)."""
    p, q = 1019, 1187
    if mode == "full":
        factors = P._crt_factors(p, q, 30_000)
    else:
        factors = P._short_factors(p, q, P.short_exponents(30_000, 64), bits=64)
    for prime in (p, q):
        group = {pow(x, prime, prime * prime) for x in range(1, prime)}
        seen = np.unique([f % (prime * prime) for f in factors], return_counts=True)
        assert set(seen[0].tolist()) == group
        expected = len(factors) / len(group)
        assert seen[1].min() > 0.25 * expected and seen[1].max() < 2.5 * expected


@pytest.mark.parametrize("window", [P.WINDOW, 11, P.SHORT_WINDOW])
def test_fixed_base_tables_equal_modular_powers(keys, window):
    _, priv = keys
    p = gmpy2.mpz(priv._key.p)
    base = P._generator_base(p)
    bits = 160
    table = P._power_table(base, p * p, bits, window)
    rows = -(-bits // window)
    assert len(table) == rows and all(len(row) == 1 << window for row in table)
    rng = np.random.default_rng(window)
    for i in range(rows):
        for j in [0, 1, 2, (1 << window) - 1] + rng.integers(0, 1 << window, 5).tolist():
            assert table[i][j] == pow(int(base), j << (window * i), int(p * p))
    edges = [0, 1, 255, 256, 2 ** bits - 1, 2 ** (rows * window) - 1]
    exps = edges + [secrets.randbits(bits) for _ in range(20)]
    digits = P._digits(exps, window, rows)
    assert digits.shape == (len(exps), rows) and digits.min() >= 0 and digits.max() < 1 << window
    assert [sum(int(d) << (window * i) for i, d in enumerate(row)) for row in digits] == exps
    assert [int(v) for v in P._table_powers(table, digits, p * p)] == [pow(int(base), e, int(p * p)) for e in exps]
    assert P._fixed_power(table, exps[-1], p * p, window) == gmpy2.powmod(base, exps[-1], p * p)
    assert P._table_powers(table, P._digits([], window, rows), p * p) == []
    for bad in (-1, 2 ** (rows * window)):
        with pytest.raises(ValueError, match="beyond the table"):
            P._digits([5, bad], window, rows)


def test_short_tables_stay_within_their_memory_bound():
    assert P.short_window(224, 2048) == 12 and P.short_window(256, 3072) == 11
    for bits, modulus in [(224, 2048), (256, 3072), (256, 4096), (384, 8192)]:
        w = P.short_window(bits, modulus)
        assert -(-bits // w) * (1 << w) * modulus // 8 <= P.TABLE_BYTES


def test_trial_division_finds_the_small_primes():
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
