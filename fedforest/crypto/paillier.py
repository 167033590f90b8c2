"""Paillier encryption for label statistics, on raw gmpy2 integers.

Key generation and decryption (with the CRT speed-up, which only the key
holder can use) come from ``phe``; the hot operations of the parties —
encryption, homomorphic addition, multiplication by small scalars and the
shift used to pack several values into one ciphertext — work on plain
``gmpy2.mpz`` values, which is about ten times cheaper per addition than
phe's object layer.

Encryption is the textbook scheme with ``g = n + 1``:
``Enc(m) = (1 + m n) · r^n mod n²`` with a fresh uniformly random ``r``;
no reused randomness.  The factor ``r^n mod n²`` is the expensive part; the
key holder (the label holder, which encrypts its own rows) computes it several
times faster with the CRT and fixed-base tables (:meth:`PrivateKey.randomness`)
and uses it with :meth:`PublicKey.encrypt_with`, see docs/protocol.md.

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


def generate_keypair(key_length=2048, insecure=False):
    """A fresh key pair (see :func:`check_key_length` for the allowed lengths)."""
    check_key_length(key_length, insecure)
    pub, priv = paillier.generate_paillier_keypair(n_length=key_length)
    return PublicKey(pub.n), PrivateKey(priv)


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
    """The key holder's part (the label holder): decryption with the CRT speed-up."""

    def __init__(self, phe_private_key):
        self._key = phe_private_key
        self.public = PublicKey(phe_private_key.public_key.n)

    def decrypt(self, c):
        return gmpy2.mpz(self._key.raw_decrypt(int(c)))

    def randomness(self, count, workers=1):
        """``count`` fresh encryption factors ``r^n mod n²`` (uniform ``r``),
        computed with the CRT from fixed-base tables of generators of the
        ``n``-th powers mod ``p²`` and ``q²`` (:func:`_crt_factors`; the
        generators are found once per key); ``workers`` > 1 uses that many
        processes."""
        with RandomnessMaker(self, workers) as maker:
            return maker.take(count)

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
    """Encryption factors (:meth:`PrivateKey.randomness`) made in ``workers``
    worker processes that live as long as the maker, so each builds its
    fixed-base tables once.  :meth:`start` begins a batch in the background
    (a key holder that waits while the parties grow a tree can make the next
    round's factors then); :meth:`take` returns that batch, or
    makes one now.  Use it as a context manager, or call :meth:`close`."""

    CHUNK = 1024   # factors per task: a cancelled batch stops within one chunk

    def __init__(self, private_key, workers=1):
        self.args = private_key._crt_args()
        self.workers = max(1, int(workers))
        self._pool = None
        self._ahead = None   # (count, futures) of the batch started in the background

    def _executor(self):
        if self._pool is None:
            self._pool = worker_pool(self.workers)
        return self._pool

    def start(self, count):
        """Begin making ``count`` factors in the background (one batch at a time)."""
        if self._ahead is not None:
            raise RuntimeError("a batch of randomness is already being made")
        size = max(1, min(self.CHUNK, -(-count // self.workers)))
        pool = self._executor()
        futures = [pool.submit(_crt_factors_cached, *self.args[:2], min(size, count - i), *self.args[2:])
                   for i in range(0, count, size)]
        self._ahead = (count, futures)

    def take(self, count):
        """``count`` fresh factors: the batch :meth:`start` began (it must be
        of this size), or one made now."""
        if self._ahead is None:
            if self.workers == 1 or count < 2 * self.workers:
                p, q, bp, bq = self.args
                return [gmpy2.mpz(v) for v in _crt_factors(p, q, count, bp, bq)]
            self.start(count)
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
WINDOW = 8              # bits of the exponent per fixed-base table row


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


def _power_table(base, modulus, bits):
    """``table[i][j] = base^(j · 2^(WINDOW·i)) mod modulus`` for exponents of ``bits`` bits."""
    table = []
    row_base = base
    for _ in range(-(-bits // WINDOW)):
        row = [gmpy2.mpz(1), row_base]
        for _ in range(2, 1 << WINDOW):
            row.append(row[-1] * row_base % modulus)
        table.append(row)
        row_base = row[-1] * row_base % modulus
    return table


def _fixed_power(table, exponent, modulus):
    """``base^exponent mod modulus`` from :func:`_power_table`: one
    multiplication per non-zero window of the exponent."""
    acc = gmpy2.mpz(1)
    for i, digit in enumerate(int(exponent).to_bytes(len(table), "little")):
        if digit:
            acc = acc * table[i][digit] % modulus
    return acc


_TABLES = {}   # a worker process's fixed-base tables, by (prime, base)


def _cached_table(prime, base):
    key = (int(prime), int(base))
    if key not in _TABLES:
        _TABLES.clear()   # one key at a time
        prime = gmpy2.mpz(prime)
        _TABLES[key] = _power_table(gmpy2.mpz(base), prime * prime, int(prime - 1).bit_length())
    return _TABLES[key]


def _crt_factors_cached(p, q, count, base_p, base_q):
    """:func:`_crt_factors` with the tables kept for the process's next call."""
    return _crt_factors(p, q, count, base_p, base_q, (_cached_table(p, base_p), _cached_table(q, base_q)))


def _crt_factors(p, q, count, base_p=None, base_q=None, tables=None):
    """``count`` uniform random ``n``-th residues mod ``n²`` (the factors
    ``r^n mod n²`` of uniform ``r``), built with the CRT.

    Mod ``p²`` the ``n``-th powers form a cyclic subgroup of order ``p - 1``
    (when ``q`` does not divide ``p - 1``); with a generator ``b`` of it
    (:func:`_generator_base`), ``b^a`` for a uniform ``a`` in ``[0, p - 1)``
    is a uniform element, likewise mod ``q²``, and the CRT combination has the
    distribution of ``r^n mod n²`` for a uniform ``r``.  Both powers come
    from fixed-base tables (:data:`WINDOW`-bit windows): about ``bits(p)/8``
    multiplications modulo ``p²`` each, instead of a full exponentiation.
    ``base_p``, ``base_q``: the generators, when already found; ``tables``:
    their tables, when already built."""
    p, q = gmpy2.mpz(p), gmpy2.mpz(q)
    if gmpy2.gcd(q, p - 1) != 1 or gmpy2.gcd(p, q - 1) != 1:
        raise ValueError("key primes unsuitable for CRT randomness")
    psq, qsq = p * p, q * q
    psq_inv = gmpy2.invert(psq, qsq)
    bp = _generator_base(p) if base_p is None else gmpy2.mpz(base_p)
    bq = _generator_base(q) if base_q is None else gmpy2.mpz(base_q)
    if tables is None:
        tables = (_power_table(bp, psq, int(p - 1).bit_length()), _power_table(bq, qsq, int(q - 1).bit_length()))
    tp, tq = tables
    out = []
    for _ in range(count):
        yp = _fixed_power(tp, secrets.randbelow(int(p) - 1), psq)
        yq = _fixed_power(tq, secrets.randbelow(int(q) - 1), qsq)
        out.append(int(yp + psq * gmpy2.f_mod((yq - yp) * psq_inv, qsq)))
    return out


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
