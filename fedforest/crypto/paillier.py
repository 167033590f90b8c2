"""Paillier encryption for label statistics, on raw gmpy2 integers.

Key generation and decryption (with the CRT speed-up, which only the key
holder can use) come from ``phe``; the hot operations of the parties —
encryption, homomorphic addition, multiplication by small scalars and the
shift used to pack several values into one ciphertext — work on plain
``gmpy2.mpz`` values, which is about ten times cheaper per addition than
phe's object layer.

Encryption is the textbook scheme with ``g = n + 1``:
``Enc(m) = (1 + m n) · f mod n²`` with a fresh ``n``-th residue ``f`` for
every encryption (no reused randomness): ``r^n mod n²`` for a uniformly
random ``r`` with the public key alone (:meth:`PublicKey.encrypt`).  The
factor is the expensive part; the key holder (the label holder, which
encrypts its own rows) makes it from its key's factorisation
(:meth:`PrivateKey.randomness`, used with :meth:`PublicKey.encrypt_with`):
by default as ``h_s^r mod n²`` for a fixed ``n``-th residue ``h_s`` of large
order and a fresh *short* uniform exponent ``r`` (Damgård–Jurik–Nielsen's
randomisation, ``r`` of twice the key's security strength: 224 bits for a
2048-bit key), six to seven times cheaper per factor than a uniform one;
``randomness = "full"`` keeps uniform factors (see :data:`RANDOMNESS_MODES`
and docs/protocol.md).

Several non-negative integers travel in one plaintext as fixed-width slots
(:class:`Slots`).  Sums stay correct as long as no slot overflows its width;
callers size the width from the largest possible sum and
:meth:`Slots.check_capacity` refuses a job whose sums could overflow.
Ciphertexts cross the transport as fixed-size big-endian byte blocks.
"""
import hashlib
import os
import secrets
import signal
from bisect import bisect_right
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from multiprocessing import get_context

import gmpy2
import numpy as np
from phe import paillier

from ..errors import InputError
from ..transport.watch import set_parent_death_signal

SECURE_KEY_LENGTHS = (2048, 3072)


def check_key_length(key_length, insecure=False):
    """Refuse a key length outside the policy: 2048 or 3072 bits, shorter ones
    (multiples of 8, at least 256) only with the explicit ``insecure`` flag."""
    if key_length not in SECURE_KEY_LENGTHS and not insecure:
        raise InputError("key_length", f"must be 2048 or 3072 bits, got {key_length!r} "
                                       "(shorter keys only with insecure_key = true, for tests)")
    if isinstance(key_length, bool) or not isinstance(key_length, int) or key_length < 256 \
            or key_length % 8:
        raise InputError("key_length", f"must be a multiple of 8 bits >= 256, got {key_length!r}")


def check_key_bound(key_length, max_key_length, who="this party"):
    """Refuse a job's Paillier key longer than ``max_key_length``, the bound a
    party's own file sets (``max_key_length``, default 4096): key generation
    and every decryption grow with the cube of the length, so a master that
    asks for a huge key could tie up the label holder and the other parties."""
    if key_length > max_key_length:
        raise InputError("key_length", f"{key_length} is above {who}'s max_key_length {max_key_length} "
                                       f"(set max_key_length in {who}'s own file to allow it)")


#: how the key holder makes its encryption factors (its own setting ``paillier_randomness``):
#: ``"short"``: ``h_s^r mod n²`` for a fresh uniform ``r`` of :func:`short_exponent_bits`
#: bits (the short-exponent assumption, see :func:`_short_factors`); ``"full"``: a uniform
#: ``n``-th residue, the distribution of ``r^n mod n²`` for a uniform ``r`` (:func:`_crt_factors`)
RANDOMNESS_MODES = ("short", "full")

#: NIST SP 800-57 Part 1 (rev. 5), table 2: the security strength (bits) of an
#: RSA-type modulus of at least that many bits
SECURITY_STRENGTHS = ((15360, 256), (7680, 192), (3072, 128), (2048, 112), (1024, 80))


def check_randomness(mode):
    """Refuse a ``paillier_randomness`` setting other than ``"short"`` and ``"full"``."""
    if mode not in RANDOMNESS_MODES:
        raise InputError("paillier_randomness", f"must be 'short' or 'full', got {mode!r}")
    return mode


def security_strength(key_length):
    """The security strength of a ``key_length``-bit modulus (NIST SP 800-57:
    2048 -> 112 bits, 3072 -> 128; 80 below 2048, for test keys)."""
    return next((s for bits, s in SECURITY_STRENGTHS if key_length >= bits), SECURITY_STRENGTHS[-1][1])


def short_exponent_bits(key_length):
    """The length of the short exponents (``randomness = "short"``): twice the
    key's security strength, so that finding one (Pollard's kangaroo, baby
    steps and giant steps: square-root time) costs as much as the key's
    strength: 224 bits for a 2048-bit key, 256 for a 3072-bit key."""
    return 2 * security_strength(int(key_length))


def generate_keypair(key_length=2048, insecure=False, randomness="short"):
    """A fresh key pair (see :func:`check_key_length` for the allowed lengths);
    ``randomness``: how the private key makes encryption factors
    (:data:`RANDOMNESS_MODES`)."""
    check_key_length(key_length, insecure)
    check_randomness(randomness)
    pub, priv = paillier.generate_paillier_keypair(n_length=key_length)
    return PublicKey(pub.n), PrivateKey(priv, randomness)


class PublicKey:
    """The public part: everything a party needs to encrypt and add."""

    def __init__(self, n):
        self.n = gmpy2.mpz(n)
        self.nsq = self.n * self.n
        self.key_length = int(self.n.bit_length())
        self.ciphertext_bytes = (int(self.nsq.bit_length()) + 7) // 8

    @property
    def fingerprint(self):
        """A short digest identifying the key (to refuse ciphertexts under another key)."""
        return hashlib.sha256(int(self.n).to_bytes((self.key_length + 7) // 8, "big")).hexdigest()[:32]

    def to_bytes(self):
        return np.frombuffer(int(self.n).to_bytes((self.key_length + 7) // 8, "big"), dtype=np.uint8)

    @classmethod
    def from_bytes(cls, data):
        return cls(int.from_bytes(bytes(np.asarray(data, dtype=np.uint8)), "big"))

    # -- arithmetic -------------------------------------------------------
    def encrypt(self, m):
        """Encryption of an integer ``0 <= m < n`` with fresh randomness."""
        m = gmpy2.mpz(m)
        if m < 0 or m >= self.n:
            raise ValueError("plaintext out of range")
        r = gmpy2.mpz(secrets.randbelow(int(self.n) - 1) + 1)
        return gmpy2.f_mod((1 + m * self.n) * gmpy2.powmod(r, self.n, self.nsq), self.nsq)

    def encrypt_many(self, values):
        return [self.encrypt(int(v)) for v in values]

    def encrypt_with(self, values, factors, what="randomness"):
        """Encryptions of ``values`` with the ready-made randomness factors
        ``factors`` (each ``r^n mod n²`` for a fresh ``r``, one per value).
        Refuses factors that are not valid ciphertext factors or that repeat
        (a repeated factor would show equal plaintexts as equal ciphertexts)."""
        if len(factors) != len(values):
            raise InputError(what, f"{len(factors)} randomness factors for {len(values)} values")
        seen = set()
        out = []
        n, nsq = self.n, self.nsq
        for m, f in zip(values, factors):
            m = gmpy2.mpz(m)
            if m < 0 or m >= n:
                raise ValueError("plaintext out of range")
            if f <= 1 or f >= nsq or gmpy2.gcd(f, n) != 1 or f in seen:
                raise InputError(what, "a randomness factor is invalid or repeated")
            seen.add(f)
            out.append(gmpy2.f_mod((1 + m * n) * f, nsq))
        return out

    def zero(self):
        """A fixed encryption of 0 (``r = 1``), the neutral start of a sum."""
        return gmpy2.mpz(1)

    def add(self, a, b):
        return gmpy2.f_mod(a * b, self.nsq)

    def scale(self, c, k):
        """Encryption of ``k`` times the plaintext (``k`` a non-negative integer)."""
        return gmpy2.powmod(c, int(k), self.nsq)

    def shift(self, c, bits):
        """Encryption of the plaintext times ``2**bits``."""
        return gmpy2.powmod(c, gmpy2.mpz(1) << bits, self.nsq)

    def subtract(self, a, b):
        return gmpy2.f_mod(a * gmpy2.invert(b, self.nsq), self.nsq)

    def pack(self, ciphertexts, width):
        """One ciphertext holding the plaintexts of ``ciphertexts`` in slots of
        ``width`` bits, the first in the highest slot (Horner: shift and add)."""
        it = iter(ciphertexts)
        acc = next(it)
        for c in it:
            acc = self.add(self.shift(acc, width), c)
        return acc

    # -- transport --------------------------------------------------------
    def serialize(self, ciphertexts):
        """(k, ciphertext_bytes) uint8 blocks, big-endian."""
        w = self.ciphertext_bytes
        out = np.empty((len(ciphertexts), w), dtype=np.uint8)
        for i, c in enumerate(ciphertexts):
            out[i] = np.frombuffer(int(c).to_bytes(w, "big"), dtype=np.uint8)
        return out

    def factors_from_blocks(self, blocks, what="randomness"):
        """Randomness factors sent as :meth:`serialize` blocks, taken mod ``n²``
        (:meth:`encrypt_with` checks each one before use)."""
        blocks = np.asarray(blocks, dtype=np.uint8)
        if blocks.ndim != 2 or blocks.shape[1] != self.ciphertext_bytes:
            raise InputError(what, f"blocks of {blocks.shape[-1] if blocks.ndim else 0} bytes do not "
                                   f"match the {self.key_length}-bit key ({self.ciphertext_bytes} bytes)")
        nsq = self.nsq
        return [gmpy2.f_mod(gmpy2.mpz(int.from_bytes(row.tobytes(), "big")), nsq) for row in blocks]

    def deserialize(self, blocks, what="ciphertexts"):
        """Ciphertexts from :meth:`serialize` blocks; refuses malformed ones."""
        blocks = np.asarray(blocks, dtype=np.uint8)
        if blocks.ndim != 2 or blocks.shape[1] != self.ciphertext_bytes:
            raise InputError(what, f"blocks of {blocks.shape[-1] if blocks.ndim else 0} bytes do not "
                                   f"match the {self.key_length}-bit key ({self.ciphertext_bytes} bytes)")
        out = []
        for row in blocks:
            c = gmpy2.mpz(int.from_bytes(row.tobytes(), "big"))
            if c <= 0 or c >= self.nsq or gmpy2.gcd(c, self.n) != 1:
                raise InputError(what, "a ciphertext is not a valid value under this public key")
            out.append(c)
        return out


class PrivateKey:
    """The key holder's part (the label holder): decryption with the CRT
    speed-up (phe's, on gmpy2: its two exponentiations release the GIL in
    :func:`gil_free_threads`), and the randomness of its own encryptions
    (``randomness``: one of :data:`RANDOMNESS_MODES`)."""

    def __init__(self, phe_private_key, randomness="short"):
        self._key = phe_private_key
        self.public = PublicKey(phe_private_key.public_key.n)
        self.randomness_mode = check_randomness(randomness)

    def decrypt(self, c):
        return gmpy2.mpz(self._key.raw_decrypt(int(c)))

    def randomness(self, count, workers=1):
        """``count`` fresh encryption factors, ``n``-th residues mod ``n²``
        made with the CRT from fixed-base tables (the key's
        :attr:`randomness_mode`: :func:`_short_factors` or
        :func:`_crt_factors`; the generators are found once per key);
        ``workers`` > 1 uses that many processes."""
        with RandomnessMaker(self, workers) as maker:
            return maker.take(count)

    def short_base(self):
        """``h_s``, the base of the short-exponent factors: the ``n``-th residue
        mod ``n²`` that is the generator base ``b_p`` mod ``p²`` and ``b_q``
        mod ``q²`` (:func:`_generator_base`), of order ``lcm(p - 1, q - 1)``
        (but for a chance below 10⁻⁴, see there).  It stays with the key holder."""
        p, q, bp, bq = (gmpy2.mpz(v) for v in self._crt_args())
        return _crt_combine(bp, bq, p * p, q * q, gmpy2.invert(p * p, q * q))

    def _crt_args(self):
        p, q = int(self._key.p), int(self._key.q)
        if getattr(self, "_bases", None) is None:
            self._bases = (int(_generator_base(gmpy2.mpz(p))), int(_generator_base(gmpy2.mpz(q))))
        return (p, q) + self._bases


#: signals a worker leaves to its rank: Ctrl-C reaches every process of the terminal's
#: group and a batch system's SIGTERM every process of the job, but only the rank
#: stops (in one line) and shuts its workers down
_RANK_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _worker_start(parent):
    """A worker process of :func:`worker_pool`: it ignores the signals that
    stop its rank (its rank ends it) and dies with its parent (a rank killed
    with SIGKILL leaves no worker behind)."""
    for signum in _RANK_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)     # a signal that came while it started is dropped
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _RANK_SIGNALS)
    set_parent_death_signal()
    if os.getppid() != parent:      # the parent went before the death signal was set
        os._exit(1)


class WorkerPool(ProcessPoolExecutor):
    """:class:`ProcessPoolExecutor` whose workers start with the rank's stop
    signals blocked (until :func:`_worker_start` ignores them: a Ctrl-C while
    one starts prints nothing there) and that, when the block it runs
    leaves by a signal (KeyboardInterrupt, :class:`~fedforest.errors.Stopped`),
    ends its workers at once instead of waiting for their tasks."""

    def submit(self, fn, /, *args, **kwargs):
        # the workers start from the submitting thread: they inherit its signal mask
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _RANK_SIGNALS)
        try:
            return super().submit(fn, *args, **kwargs)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def stop_now(self):
        """End the workers now (a stopped rank does not wait for their tasks)."""
        processes = list((self._processes or {}).values())
        self.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            try:
                process.kill()
            except (OSError, ValueError):
                pass

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, Exception):
            self.stop_now()
            return False
        return super().__exit__(exc_type, exc, tb)


def worker_pool(workers):
    """Processes for the big-integer work (spawned: ranks hold MPI and kernel
    threads, which a fork would copy half-made); each dies with this process
    and leaves signals to it (:class:`WorkerPool`)."""
    return WorkerPool(max_workers=workers, mp_context=get_context("spawn"),
                      initializer=_worker_start, initargs=(os.getpid(),))


#: big-integer products modulo ``n²`` that pay for one more thread of
#: :func:`group_products` (one costs microseconds; waking a thread, tens)
PRODUCTS_PER_THREAD = 512


def _release_gil():
    gmpy2.get_context().allow_release_gil = True


class _Threads(ThreadPoolExecutor):
    """A block left by a signal (KeyboardInterrupt, :class:`~fedforest.errors.Stopped`)
    does not wait for the threads' work: the rank says its line at once."""

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not issubclass(exc_type, Exception):
            self.shutdown(wait=False, cancel_futures=True)
            return False
        return super().__exit__(exc_type, exc, tb)


def gil_free_threads(workers):
    """Threads whose gmpy2 arithmetic on big numbers releases the GIL (a
    context setting of each thread), so that products and powers modulo
    ``n²`` run on ``workers`` cores at once within one process."""
    return _Threads(max_workers=workers, initializer=_release_gil)


def parallel_map(fn, items, workers=1):
    """``[fn(x) for x in items]``, in ``workers`` :func:`gil_free_threads`
    when there are at least two items per thread (order kept)."""
    items = list(items)
    workers = max(1, min(int(workers), len(items) // 2))
    if workers == 1:
        return [fn(x) for x in items]
    size = -(-len(items) // workers)
    with gil_free_threads(workers) as pool:
        parts = pool.map(lambda i: [fn(x) for x in items[i:i + size]], range(0, len(items), size))
        return [y for part in parts for y in part]


def _products(items, index, starts, a, b, modulus):
    """The products modulo ``modulus`` of the groups of ``index[a:b]``
    (:func:`group_products`): the first group's number and the products."""
    g = first = bisect_right(starts, a) - 1
    out = []
    while a < b:
        end = min(starts[g + 1], b)
        acc = items[index[a]]
        for r in index[a + 1:end]:
            acc = acc * items[r] % modulus
        out.append(acc)
        a, g = end, g + 1
    return first, out


def group_products(items, index, starts, modulus, workers=1):
    """Per group ``g``, the product modulo ``modulus`` of ``items[r]`` for the
    ``r`` in ``index[starts[g]:starts[g + 1]]`` (every group non-empty;
    ``starts`` ends with ``len(index)``): the homomorphic sums of ciphertexts.
    With ``workers`` > 1 the positions are cut into equal runs, one per
    :func:`gil_free_threads` thread (a group cut in two is multiplied back
    together); the products are the same numbers for any ``workers``."""
    index, starts = list(index), [int(s) for s in starts]
    n_groups, total = len(starts) - 1, len(index)
    workers = max(1, min(int(workers), total // PRODUCTS_PER_THREAD))
    if workers == 1:
        return _products(items, index, starts, 0, total, modulus)[1] if n_groups else []
    cuts = [total * i // workers for i in range(workers + 1)]
    out = [None] * n_groups
    with gil_free_threads(workers) as pool:
        for first, part in pool.map(lambda i: _products(items, index, starts, cuts[i], cuts[i + 1], modulus),
                                    range(workers)):
            for g, v in enumerate(part, start=first):
                out[g] = v if out[g] is None else out[g] * v % modulus
    return out


class RandomnessMaker:
    """Encryption factors (:meth:`PrivateKey.randomness`) of the key's
    :attr:`~PrivateKey.randomness_mode` (``mode`` when given) made in
    ``workers`` worker processes that live as long as the maker, so each
    builds its fixed-base tables once.  :meth:`start` begins a batch in the
    background (a key holder that waits while the parties grow a tree can make
    the next round's factors then); :meth:`take` returns that batch, or makes
    one now.  The exponents are drawn here (:meth:`draw`) and raised to in the
    workers (:meth:`factors_for`): the factors of given exponents are the same
    numbers for any ``workers``.  Use it as a context manager, or call
    :meth:`close`."""

    CHUNK = 1024   # factors per task: a cancelled batch stops within one chunk

    def __init__(self, private_key, workers=1, mode=None):
        self.mode = check_randomness(private_key.randomness_mode if mode is None else mode)
        #: the length of the short exponents (``mode`` "short")
        self.bits = short_exponent_bits(private_key.public.key_length)
        self.args = private_key._crt_args()
        self.workers = max(1, int(workers))
        self._pool = None
        self._ahead = None   # (count, futures) of the batch started in the background

    def _executor(self):
        if self._pool is None:
            self._pool = worker_pool(self.workers)
        return self._pool

    def draw(self, count):
        """``count`` fresh exponents: in short mode uniform integers of
        :attr:`bits` bits (:func:`short_exponents`); in full mode pairs
        ``(a_p, a_q)``, uniform in ``[0, p - 1)`` and ``[0, q - 1)``."""
        if self.mode == "short":
            return short_exponents(count, self.bits)
        p, q = self.args[:2]
        return [(secrets.randbelow(p - 1), secrets.randbelow(q - 1)) for _ in range(count)]

    def _submit(self, exponents):
        size = max(1, min(self.CHUNK, -(-len(exponents) // self.workers)))
        pool = self._executor()
        return [pool.submit(_factors_task, self.mode, self.bits, *self.args, exponents[i:i + size])
                for i in range(0, len(exponents), size)]

    def factors_for(self, exponents):
        """The factors of ``exponents`` (as :meth:`draw` gives them), made now:
        in this process when ``workers`` is 1 or they are few, else in the workers."""
        exponents = list(exponents)
        if self.workers == 1 or len(exponents) < 2 * self.workers:
            return [gmpy2.mpz(v) for v in _factors_task(self.mode, self.bits, *self.args, exponents)]
        return [gmpy2.mpz(v) for f in self._submit(exponents) for v in f.result()]

    def start(self, count):
        """Begin making ``count`` factors in the background (one batch at a time)."""
        if self._ahead is not None:
            raise RuntimeError("a batch of randomness is already being made")
        self._ahead = (count, self._submit(self.draw(count)))

    def take(self, count):
        """``count`` fresh factors: the batch :meth:`start` began (it must be
        of this size), or one made now."""
        if self._ahead is None:
            return self.factors_for(self.draw(count))
        started, futures = self._ahead
        self._ahead = None
        if started != count:
            for f in futures:
                f.cancel()
            raise RuntimeError(f"{started} factors were made ahead, {count} are needed")
        return [gmpy2.mpz(v) for f in futures for v in f.result()]

    def close(self, now=False):
        """Shut the workers down (``now``: without waiting for their tasks)."""
        if self._ahead is not None:
            for f in self._ahead[1]:
                f.cancel()
            self._ahead = None
        if self._pool is not None:
            if now:
                self._pool.stop_now()
            else:
                self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close(now=exc_type is not None and not issubclass(exc_type, Exception))


TRIAL_BOUND = 1 << 20   # p - 1 is searched for prime factors below this (see _generator_base)
WINDOW = 8              # bits of the exponent per fixed-base table row (full mode)
#: the widest window of the short mode's tables: 12 bits (19 rows for a 224-bit
#: exponent, 36 multiplications modulo p² or q² per factor) was the fastest of 10 to 13
#: at 2048 bits within :data:`TABLE_BYTES` (13 bits doubles the table for 2 fewer rows)
SHORT_WINDOW = 12
#: the most bytes of residues in one short-mode table (one per prime and process:
#: about 22 MiB of Python objects at 2048 bits, built in about 0.2 s)
TABLE_BYTES = 24 << 20


def _small_prime_factors(m, bound=TRIAL_BOUND):
    """The distinct primes below ``bound`` that divide ``m``."""
    out, ell = [], gmpy2.mpz(2)
    while ell < bound:
        if m % ell == 0:
            out.append(ell)
        ell = gmpy2.next_prime(ell)
    return out


def _generator_base(p):
    """``x^p mod p²`` for a random ``x`` whose order mod ``p`` is divisible by
    every prime power of ``p - 1`` whose prime is below :data:`TRIAL_BOUND`.

    ``x ↦ x^p mod p²`` is an isomorphism from the units mod ``p`` onto the
    ``n``-th powers mod ``p²`` (their subgroup of order ``p - 1``), so the
    base generates that whole subgroup exactly when ``x`` is a primitive
    root mod ``p``.  ``x`` is one unless it is an ``ℓ``-th power for some
    prime ``ℓ | p - 1``; the small ``ℓ`` are ruled out here, and a large
    ``ℓ`` (at least 2²⁰) makes a random ``x`` an ``ℓ``-th power with
    probability ``1/ℓ``, so the base generates the whole subgroup except
    with probability below ``log2(p) / 2²⁰`` (5·10⁻⁵ for a 1024-bit prime),
    and otherwise a subgroup of index at least 2²⁰."""
    small = _small_prime_factors(p - 1)
    while True:
        x = gmpy2.mpz(secrets.randbelow(int(p) - 2) + 2)
        if all(gmpy2.powmod(x, (p - 1) // ell, p) != 1 for ell in small):
            return gmpy2.powmod(x, p, p * p)


def short_window(bits, modulus_bits):
    """The window of short-mode tables for ``bits``-bit exponents modulo a
    ``modulus_bits``-bit number: :data:`SHORT_WINDOW`, or narrower where the
    table would hold more than :data:`TABLE_BYTES` (12 bits at 2048 bits,
    11 at 3072)."""
    size = -(-int(modulus_bits) // 8)
    for w in range(SHORT_WINDOW, 1, -1):
        if -(-int(bits) // w) * (1 << w) * size <= TABLE_BYTES:
            return w
    return 1


def _power_table(base, modulus, bits, window=WINDOW):
    """``table[i][j] = base^(j · 2^(window·i)) mod modulus`` for exponents of ``bits`` bits."""
    table = []
    row_base = base
    for _ in range(-(-bits // window)):
        row = [gmpy2.mpz(1), row_base]
        for _ in range(2, 1 << window):
            row.append(row[-1] * row_base % modulus)
        table.append(row)
        row_base = row[-1] * row_base % modulus
    return table


def _digits(exponents, window, rows):
    """``(len(exponents), rows)`` array: the base-``2^window`` digits of each
    exponent, the lowest first; refuses a negative exponent or one with more
    than ``rows`` digits."""
    nbytes = (rows * window + 7) // 8
    try:
        raw = b"".join(int(e).to_bytes(nbytes, "little") for e in exponents)
    except OverflowError:
        raise ValueError("an exponent is negative or beyond the table") from None
    bits = np.unpackbits(np.frombuffer(raw, dtype=np.uint8).reshape(-1, nbytes), axis=1, bitorder="little")
    if bits[:, rows * window:].any():
        raise ValueError("an exponent is beyond the table")
    bits = bits[:, :rows * window].reshape(-1, rows, window).astype(np.int64)
    return (bits << np.arange(window, dtype=np.int64)).sum(axis=2)


def _table_powers(table, digits, modulus):
    """``base^e mod modulus`` for each exponent ``e`` given by its row of
    ``digits`` (:func:`_digits`), from :func:`_power_table`: one
    multiplication per non-zero digit after the first, a table row at a time
    over all the exponents (the row stays in the cache)."""
    if not len(digits):
        return []
    acc = [table[0][d] for d in digits[:, 0].tolist()]
    for i in range(1, len(table)):
        row = table[i]
        acc = [a * row[d] % modulus if d else a for a, d in zip(acc, digits[:, i].tolist())]
    return acc


def _fixed_power(table, exponent, modulus, window=WINDOW):
    """``base^exponent mod modulus`` from :func:`_power_table` (one exponent)."""
    return gmpy2.mpz(_table_powers(table, _digits([exponent], window, len(table)), modulus)[0])


_TABLES = {}   # a process's fixed-base tables, by (prime, base, bits, window): one key's at a time


def _cached_table(prime, base, bits, window):
    key = (int(prime), int(base), int(bits), int(window))
    table = _TABLES.get(key)
    if table is None:
        if len(_TABLES) >= 4:    # one key's tables at a time (both modes)
            _TABLES.clear()
        prime = gmpy2.mpz(prime)
        table = _TABLES[key] = _power_table(gmpy2.mpz(base), prime * prime, int(bits), int(window))
    return table


def _crt_combine(yp, yq, psq, qsq, psq_inv):
    """The number mod ``p² q²`` that is ``yp`` mod ``p²`` and ``yq`` mod ``q²``."""
    return yp + psq * gmpy2.f_mod((yq - yp) * psq_inv, qsq)


def _crt_setup(p, q, base_p, base_q):
    p, q = gmpy2.mpz(p), gmpy2.mpz(q)
    if gmpy2.gcd(q, p - 1) != 1 or gmpy2.gcd(p, q - 1) != 1:
        raise ValueError("key primes unsuitable for CRT randomness")
    bp = _generator_base(p) if base_p is None else gmpy2.mpz(base_p)
    bq = _generator_base(q) if base_q is None else gmpy2.mpz(base_q)
    psq, qsq = p * p, q * q
    return p, q, bp, bq, psq, qsq, gmpy2.invert(psq, qsq)


def _factors_task(mode, bits, p, q, base_p, base_q, exponents):
    """A worker's (or this process's) factors of ``exponents``, as ints
    (:meth:`RandomnessMaker.factors_for`); the tables stay for its next call."""
    if mode == "short":
        return _short_factors(p, q, exponents, base_p, base_q, bits)
    return _full_factors(p, q, exponents, base_p, base_q)


def short_exponents(count, bits):
    """``count`` fresh uniform exponents of ``bits`` bits (in ``[0, 2^bits)``)."""
    return [secrets.randbits(bits) for _ in range(count)]


def _short_factors(p, q, exponents, base_p=None, base_q=None, bits=None):
    """``h_s^r mod n²`` for each ``r`` of ``exponents`` (short uniform
    exponents, :func:`short_exponents`), ``h_s`` the number that is the
    generator base ``b_p`` mod ``p²`` and ``b_q`` mod ``q²``
    (:meth:`PrivateKey.short_base`): ``b_p^r mod p²`` and ``b_q^r mod q²``
    from fixed-base tables of :func:`short_window`-bit windows over
    ``bits``-bit exponents (default :func:`short_exponent_bits` of the key:
    36 multiplications modulo ``p²`` or ``q²`` in all for a 2048-bit key),
    combined with the CRT.

    This is Damgård–Jurik–Nielsen's randomisation with a short exponent:
    every factor is an ``n``-th residue (an encryption of 0) of the
    subgroup ``h_s`` generates, of order ``lcm(p - 1, q - 1)``, and the
    assumption is that for a uniform ``r`` of twice the key's security
    strength in bits ``h_s^r`` cannot be told from a uniform ``n``-th
    residue (finding such an ``r`` takes about ``2^(bits/2)`` steps; see
    docs/protocol.md).  ``base_p``, ``base_q``: the generators, when already
    found (else fresh ones)."""
    p, q, bp, bq, psq, qsq, psq_inv = _crt_setup(p, q, base_p, base_q)
    bits = short_exponent_bits(int((p * q).bit_length())) if bits is None else int(bits)
    window = short_window(bits, max(int(psq.bit_length()), int(qsq.bit_length())))
    digits = _digits(exponents, window, -(-bits // window))
    yp = _table_powers(_cached_table(p, bp, bits, window), digits, psq)
    yq = _table_powers(_cached_table(q, bq, bits, window), digits, qsq)
    return [int(_crt_combine(a, b, psq, qsq, psq_inv)) for a, b in zip(yp, yq)]


def _full_factors(p, q, exponents, base_p=None, base_q=None):
    """``b_p^a_p mod p²`` and ``b_q^a_q mod q²`` combined with the CRT for each
    pair ``(a_p, a_q)`` of ``exponents`` (:func:`_crt_factors`), from
    :data:`WINDOW`-bit fixed-base tables."""
    p, q, bp, bq, psq, qsq, psq_inv = _crt_setup(p, q, base_p, base_q)
    bits_p, bits_q = int(p - 1).bit_length(), int(q - 1).bit_length()
    yp = _table_powers(_cached_table(p, bp, bits_p, WINDOW),
                       _digits([a for a, _ in exponents], WINDOW, -(-bits_p // WINDOW)), psq)
    yq = _table_powers(_cached_table(q, bq, bits_q, WINDOW),
                       _digits([b for _, b in exponents], WINDOW, -(-bits_q // WINDOW)), qsq)
    return [int(_crt_combine(a, b, psq, qsq, psq_inv)) for a, b in zip(yp, yq)]


def _crt_factors(p, q, count, base_p=None, base_q=None):
    """``count`` uniform random ``n``-th residues mod ``n²`` (the factors
    ``r^n mod n²`` of uniform ``r``; ``randomness = "full"``), built with the CRT.

    Mod ``p²`` the ``n``-th powers form a cyclic subgroup of order ``p - 1``
    (when ``q`` does not divide ``p - 1``); with a generator ``b`` of it
    (:func:`_generator_base`), ``b^a`` for a uniform ``a`` in ``[0, p - 1)``
    is a uniform element, likewise mod ``q²``, and the CRT combination has the
    distribution of ``r^n mod n²`` for a uniform ``r``.  Both powers come
    from fixed-base tables (:data:`WINDOW`-bit windows): about ``bits(p)/8``
    multiplications modulo ``p²`` each, instead of a full exponentiation.
    ``base_p``, ``base_q``: the generators, when already found."""
    p, q = int(p), int(q)
    exponents = [(secrets.randbelow(p - 1), secrets.randbelow(q - 1)) for _ in range(count)]
    return _full_factors(p, q, exponents, base_p, base_q)


class Slots:
    """Fixed-width slots of one plaintext: ``per_plaintext`` non-negative
    integers of at most ``width`` bits each (one bit of the plaintext is kept
    free so a packed value stays below ``n``)."""

    def __init__(self, width, key_length):
        if width < 1:
            raise ValueError("slot width must be positive")
        self.width = int(width)
        self.per_plaintext = (int(key_length) - 1) // self.width
        if self.per_plaintext < 1:
            raise InputError("slot width", f"{width} bits do not fit a {key_length}-bit key")

    @staticmethod
    def width_for(max_sum):
        """Bits a slot needs to hold sums up to ``max_sum``."""
        return max(1, int(max_sum).bit_length())

    def check_capacity(self, max_sum, what="label statistics"):
        if int(max_sum) >= (1 << self.width):
            raise InputError(what, f"sums up to {int(max_sum)} overflow {self.width}-bit slots: too "
                                   "many rows (or too large weights) for the slot width")

    def pack_plain(self, values):
        """The plaintext with ``values`` in slots, the first in the highest slot."""
        acc = gmpy2.mpz(0)
        for v in values:
            v = gmpy2.mpz(v)
            if v < 0 or v >> self.width:
                raise InputError("slot value", f"{int(v)} does not fit a {self.width}-bit slot")
            acc = (acc << self.width) | v
        return acc

    def unpack(self, plaintext, k):
        """The ``k`` slot values of a plaintext, first slot first."""
        mask = (gmpy2.mpz(1) << self.width) - 1
        plaintext = gmpy2.mpz(plaintext)
        if plaintext >> (self.width * k):
            raise InputError("slot value", "a decrypted value overflows its slots")
        return [int((plaintext >> (self.width * (k - 1 - i))) & mask) for i in range(k)]


def one_hot_plaintexts(codes, n_classes, slots):
    """Per row, the plaintext with a 1 in the slot of its class (class 0 highest)."""
    if n_classes > slots.per_plaintext:
        raise InputError("classes", f"{n_classes} classes do not fit one plaintext of "
                                    f"{slots.per_plaintext} slots")
    unit = [gmpy2.mpz(1) << (slots.width * (n_classes - 1 - k)) for k in range(n_classes)]
    return [unit[int(c)] for c in codes]


def fixed_point(values, frac_bits):
    """Non-negative fixed-point integers of ``values - min(values)`` with
    ``frac_bits`` fractional bits, and the offset that was removed."""
    values = np.asarray(values, dtype=np.float64)
    offset = float(values.min()) if values.size else 0.0
    scaled = np.rint((values - offset) * float(1 << frac_bits))
    return [int(v) for v in scaled], offset
