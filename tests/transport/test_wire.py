"""The wire format and error reports under hostile input: a peer holding valid
channel keys may send any bytes; whatever they are, the receiver answers with
a decoded message, a WireError, or (for an error report) a RemoteError naming
the rank, and never with another exception."""
import json
import re
import math
import struct
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedforest.errors import RemoteError
from fedforest.transport.base import TAG_ERROR, Comm, ProtocolError, WireError, decode, encode
from fedforest.transport.inprocess import InProcessNetwork, InProcessTransport

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NUMERIC = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
           np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
           np.complex128, np.clongdouble]
SHAPES = [(), (0,), (5,), (2, 3), (0, 4), (3, 0, 2), (1, 1, 1, 2)]


def _same(a, b):
    """Equality of decoded values: arrays by dtype, shape and contents, NaN equal to NaN."""
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, dict):
        return (isinstance(b, dict) and list(a) == list(b)
                and all(_same(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(a, b)))
    return type(a) is type(b) and a == b


def _frame(header, body=b"", hlen=None):
    """A message frame around ``header`` (JSON text, or a value to dump)."""
    h = header if isinstance(header, bytes) else (
        header.encode() if isinstance(header, str) else json.dumps(header).encode())
    out = b"FFW1" + struct.pack("<Q", len(h) if hlen is None else hlen) + h
    return bytearray(out + b"\0" * (-len(out) % 16) + body)


# -- (a) valid messages still travel ------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_numeric_dtype_and_shape_round_trips(dtype, shape):
    rng = np.random.default_rng(0)
    a = np.asarray(rng.random(shape) * 100).astype(dtype)
    msg = {"op": "x", "a": a, "swapped": a.astype(np.dtype(dtype).newbyteorder())}
    for data in (encode(msg), bytes(encode(msg))):
        out = decode(data)
        assert _same(msg, out)
        assert out["a"].flags.writeable and out["a"].flags.aligned


def test_nested_containers_bytes_and_text_arrays_round_trip():
    msg = {"op": "final", "t": (1, (2, [b"", b"\x00\xff"]), None), 5: {"k": [np.arange(3)]},
           (1, "a"): -2.5, None: True, 2.5: float("inf"), "s": np.array(["ab", "", "c\u00e9"]),
           "deep": {"a": [[[[{"b": (np.zeros((2, 0)),)}]]]]}, "e": [], "d": {}, "u": ""}
    assert _same(msg, decode(encode(msg)))


def _deep(levels):
    """A message of ``levels`` nested containers (itself included) around an array."""
    v = np.arange(2)
    for i in range(levels - 1):
        v = ([v], (v,), {"k": v})[i % 3]
    return {"v": v}


def test_sixty_four_levels_of_nesting_travel_sixty_five_do_not():
    msg = _deep(64)
    assert _same(msg, decode(encode(msg)))
    with pytest.raises(WireError, match="nested deeper than 64 levels"):
        decode(encode(_deep(65)))


scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats()
           | st.text(max_size=6) | st.binary(max_size=6))
arrays = st.builds(lambda dt, shape, seed: np.asarray(np.random.default_rng(seed).random(shape) * 50)
                   .astype(dt), st.sampled_from(NUMERIC),
                   st.lists(st.integers(0, 3), max_size=3).map(tuple), st.integers(0, 10))
texts = st.lists(st.text(max_size=3), min_size=1, max_size=4).map(np.array)
keys = st.text(max_size=4) | st.integers(-5, 5)
messages = st.dictionaries(keys, st.recursive(
    scalars | arrays | texts,
    lambda inner: (st.lists(inner, max_size=3) | st.lists(inner, max_size=3).map(tuple)
                   | st.dictionaries(keys, inner, max_size=3)),
    max_leaves=12), max_size=4)


@SETTINGS
@given(msg=messages)
def test_any_message_round_trips(msg):
    assert _same(msg, decode(encode(msg)))


# -- (b) crafted malformed messages -------------------------------------------

def _nested(levels, leaf='["A",0]'):
    return '["D",[["k",' + '["L",[' * levels + leaf + ']]' * levels + ']]]'


def _nested_dicts(levels):
    return '["D",[["k",' * levels + '1' + ']]]' * levels


CRAFTED = {
    "deep nesting, 10,000 levels": _frame(f'[{_nested(10000, "1")},[]]'),
    "deep nesting, 400 levels": _frame(f'[{_nested(400, "1")},[]]'),
    "deep dicts, 300 levels": _frame(f'[{_nested_dicts(300)},[]]'),
    "deep nesting, 65 levels": _frame(f'[{_nested(65, "1")},[]]'),
    "deep specs": _frame('[["D",[]],' + '[' * 10000 + ']' * 10000 + ']'),
    "overflowing shape": _frame([["D", [["a", ["A", 0]]]], [["<f8", [2**40, 2**40]]]], b"\0" * 16),
    "shape wraps to zero": _frame([["D", [["a", ["A", 0]]]], [["<f8", [2**32, 2**32, 0]]]]),
    "shape of 2**64": _frame([["D", [["a", ["A", 0]]]], [["|u1", [2**64]]]], b"\0" * 16),
    "huge empty shape": _frame([["D", [["a", ["A", 0]]]], [["<f8", [0, 2**62]]]]),
    "empty shape with a dimension of 2**40": _frame([["D", [["a", ["A", 0]]]], [["|u1", [0, 2**40]]]]),
    "100 dimensions": _frame([["D", [["a", ["A", 0]]]], [["<f8", [1] * 100]]], b"\0" * 16),
    "negative dimension": _frame([["D", [["a", ["A", 0]]]], [["<f8", [-1]]]], b"\0" * 16),
    "float dimension": _frame([["D", [["a", ["A", 0]]]], [["<f8", [1.0]]]], b"\0" * 16),
    "bool dimension": _frame([["D", [["a", ["A", 0]]]], [["<f8", [True]]]], b"\0" * 16),
    "sub-array dtype": _frame([["D", [["a", ["A", 0]]]], [["(2,)<i4", [1]]]], b"\0" * 16),
    "sub-array dtype, wrong count": _frame([["D", [["a", ["A", 0]]]], [["(2,)<i4", [2]]]], b"\0" * 16),
    "structured dtype": _frame([["D", [["a", ["A", 0]]]], [["i4,i4", [1]]]], b"\0" * 16),
    "structured dtype, list": _frame([["D", [["a", ["A", 0]]]], [[[["f", "<i4"]], [1]]]], b"\0" * 16),
    "object dtype": _frame([["D", [["a", ["A", 0]]]], [["O", [1]]]], b"\0" * 16),
    "void dtype": _frame([["D", [["a", ["A", 0]]]], [["|V8", [1]]]], b"\0" * 16),
    "datetime dtype": _frame([["D", [["a", ["A", 0]]]], [["<M8[ns]", [1]]]], b"\0" * 16),
    "timedelta dtype": _frame([["D", [["a", ["A", 0]]]], [["<m8[s]", [1]]]], b"\0" * 16),
    "byte-string dtype": _frame([["D", [["a", ["A", 0]]]], [["|S8", [1]]]], b"\0" * 16),
    "zero-size dtype": _frame([["D", [["a", ["A", 0]]]], [["<U0", [2**40]]]], b"\0" * 16),
    "huge text dtype": _frame([["D", [["a", ["A", 0]]]], [["<U99999999999", [1]]]], b"\0" * 16),
    "invalid character": _frame([["D", [["a", ["A", 0]]]], [["<U2", [1]]]], b"a\0\0\0\xff\xff\xff\xff"),
    "invalid character, big-endian": _frame([["D", [["a", ["A", 0]]]], [[">U1", []]]], b"\0\x11\0\0"),
    "dtype alias": _frame([["D", [["a", ["A", 0]]]], [["a", [1]]]], b"\0" * 16),
    "dtype not text": _frame([["D", [["a", ["A", 0]]]], [[8, [1]]]], b"\0" * 16),
    "spec not a pair": _frame([["D", []], [["<f8"]]]),
    "specs not a list": _frame([["D", []], {"a": 1}]),
    "truncated body": _frame([["D", [["a", ["A", 0]]]], [["<f8", [3]]]], b"\0" * 16),
    "second array truncated": _frame([["D", [["a", ["A", 0]], ["b", ["A", 1]]]],
                                      [["<f8", [2]], ["<f8", [1]]]], b"\0" * 16),
    "negative header length": bytearray(b"FFW1" + struct.pack("<q", -1) + b"[]" * 8),
    "huge header length": _frame('[["D",[]],[]]', hlen=2**63),
    "header longer than message": _frame('[["D",[]],[]]', hlen=100),
    "wrong magic": bytearray(b"FFW2" + bytes(_frame('[["D",[]],[]]'))[4:]),
    "too short": bytearray(b"FFW1\0\0"),
    "empty": bytearray(),
    "header not utf-8": _frame(b'[["D",[]],["\xff"]]'),
    "header not json": _frame('[["D",[]],[]'),
    "header a dict": _frame('{"a":1,"b":2}'),
    "header a string": _frame('"ab"'),
    "header a number": _frame('5'),
    "header of three": _frame('[["D",[]],[],[]]'),
    "huge integer": _frame('[["D",[["a",' + "9" * 5000 + ']]],[]]'),
    "array referenced twice": _frame([["D", [["a", ["A", 0]], ["b", ["A", 0]]]], [["<f8", [1]]]],
                                     b"\0" * 16),
    "bytes referenced twice": _frame([["L", [["B", 0]] * 3], [["|u1", [16]]]], b"\0" * 16),
    "array never referenced": _frame([["D", []], [["<f8", [1]]]], b"\0" * 16),
    "bool reference": _frame([["D", [["a", ["A", True]]]], [["<f8", [1]]]], b"\0" * 16),
    "negative reference": _frame([["D", [["a", ["A", -1]]]], [["<f8", [1]]]], b"\0" * 16),
    "unhashable key": _frame([["D", [[["T", [["L", []]]], 1]]], []]),
    "array in a key": _frame([["D", [[["T", [["A", 0]]], 1]]], [["<f8", [1]]]], b"\0" * 16),
    "dict in the header": _frame([["D", [["a", {"x": 1}]]], []]),
    "bad item": _frame([["D", [["a"]]], []]),
    "bad tag": _frame([["Q", []], []]),
    "not a dict": _frame([["L", []], []]),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_malformed_message_is_refused_with_a_wire_error(name):
    with pytest.raises(WireError):
        decode(CRAFTED[name])


def test_a_wire_error_is_a_protocol_error():
    assert issubclass(WireError, ProtocolError)


def test_arrays_of_other_than_plain_dtypes_cannot_be_sent():
    for a in (np.zeros(2, dtype="i4,i4"), np.zeros(2, dtype="<M8[ns]"), np.zeros(2, dtype="|V4"),
              np.zeros(1, dtype="(2,)i4").view("V8")):
        with pytest.raises(WireError, match="cannot travel"):
            encode({"a": a})


# -- (c) properties: whatever the bytes, a message or a WireError --------------

def _arrays_in(v):
    if isinstance(v, np.ndarray):
        yield v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _arrays_in(k)
            yield from _arrays_in(x)
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _arrays_in(x)


def _decode_or_wire_error(data):
    try:
        out = decode(data)
    except WireError:
        return None
    assert isinstance(out, dict)
    for a in _arrays_in(out):
        a.tolist()  # the contents are usable values (text arrays hold valid characters)
    return out


@SETTINGS
@given(data=st.binary(max_size=400))
def test_any_bytes_decode_or_raise_wire_error(data):
    _decode_or_wire_error(bytearray(data))
    _decode_or_wire_error(bytearray(b"FFW1" + data))
    _decode_or_wire_error(data)


@SETTINGS
@given(msg=messages, edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=4),
       cut=st.integers(0, 10**6) | st.none())
def test_a_damaged_encoding_decodes_or_raises_wire_error(msg, edits, cut):
    data = encode(msg)
    for pos, x in edits:
        data[pos % len(data)] ^= x
    if cut is not None:
        data = data[:cut % (len(data) + 1)]
    _decode_or_wire_error(data)
    _decode_or_wire_error(bytes(data))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=5)
    | st.sampled_from(["A", "B", "L", "T", "D", "<f8", "|u1", "<U3", "(2,)<i4", "i4,i4", "O", "<M8[s]"])
    | st.integers(-2, 3),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=25)
tagged = st.deferred(lambda: (
    json_values
    | st.tuples(st.sampled_from(["A", "B"]), st.integers(-1, 3)).map(list)
    | st.tuples(st.sampled_from(["L", "T"]), st.lists(tagged, max_size=3)).map(list)
    | st.tuples(st.just("D"), st.lists(st.tuples(tagged, tagged).map(list), max_size=3)).map(list)))
specs = st.lists(st.tuples(
    st.sampled_from(["<f8", "|u1", "|b1", "<i4", ">c16", "<U2", "|S2", "(2,)<i4", "i4,i4", "|V4", "O",
                     "<f16", "<U0", "", "x"]) | st.text(max_size=6),
    st.lists(st.integers(-1, 4) | st.integers(2**31, 2**70), max_size=4)
    | st.lists(st.just(1), min_size=30, max_size=70)).map(list), max_size=4)


@SETTINGS
@given(body=tagged, spec=specs | json_values, tail=st.binary(max_size=64),
       fill=st.integers(0, 96))
def test_any_json_header_decodes_or_raises_wire_error(body, spec, tail, fill):
    data = _frame(json.dumps([body, spec]), b"\x01" * fill + tail)
    _decode_or_wire_error(data)
    _decode_or_wire_error(bytes(data))


@SETTINGS
@given(header=json_values, tail=st.binary(max_size=64))
def test_any_json_value_as_header_decodes_or_raises_wire_error(header, tail):
    _decode_or_wire_error(_frame(json.dumps(header), tail))


# -- (d) error reports --------------------------------------------------------

def _comms(n_parties=2):
    """Comms of an in-process job, after the handshake."""
    net = InProcessNetwork(n_parties + 1)
    comms = [Comm(InProcessTransport(net, r)) for r in range(n_parties + 1)]
    threads = [threading.Thread(target=c.handshake, daemon=True) for c in comms[1:]]
    for t in threads:
        t.start()
    comms[0].handshake()
    for t in threads:
        t.join(timeout=30)
    return comms


def _report(comms, rank, payload, sealed=True):
    """Send ``payload`` (bytes) as rank's error report; the RemoteError the master raises."""
    party = comms[rank]
    data = party.error_channels[0].seal(payload) if sealed else payload
    party.raw.send_bytes(0, data, TAG_ERROR)
    with pytest.raises(RemoteError) as err:
        comms[0].recv(rank)
    return err.value


def _bounded(e, rank):
    assert e.rank == rank and str(e).startswith(f"rank {rank} failed with ")
    assert all(isinstance(x, str) for x in (e.exc_type, e.remote_message, e.remote_traceback))
    assert len(e.exc_type) <= 300 and len(e.remote_message) <= 10_100
    assert len(e.remote_traceback) <= 100_100 and len(str(e)) <= 111_000


MALFORMED_REPORTS = {
    "a list": b"[1, 2]",
    "null": b"null",
    "a string": b'"boom"',
    "a number": b"12",
    "empty dict": b"{}",
    "missing keys": b'{"type": "ValueError"}',
    "type not text": b'{"type": 1, "message": "m", "traceback": ""}',
    "message not text": b'{"type": "ValueError", "message": null, "traceback": ""}',
    "traceback a list": b'{"type": "ValueError", "message": "m", "traceback": ["x"]}',
    "type a dict": b'{"type": {"a": 1}, "message": "m", "traceback": ""}',
    "deep nesting": b"[" * 10000 + b"]" * 10000,
    "deep dict": b'{"type": ' + b"[" * 10000 + b"]" * 10000 + b"}",
    "huge integer": b"9" * 5000,
    "type forging a log line": b'{"type": "ValueError\\nerror on rank 1", "message": "m", "traceback": ""}',
    "type not a name": b'{"type": "", "message": "m", "traceback": ""}',
}


@pytest.mark.parametrize("name", list(MALFORMED_REPORTS))
def test_malformed_error_report_becomes_a_remote_error_naming_the_rank(name):
    comms = _comms()
    e = _report(comms, 2, MALFORMED_REPORTS[name])
    _bounded(e, 2)
    assert e.exc_type == "ProtocolError" and "rank 2 sent a malformed error report" in str(e)


def test_unsealed_malformed_report_before_the_handshake_becomes_a_remote_error():
    net = InProcessNetwork(2)
    master, party = Comm(InProcessTransport(net, 0)), Comm(InProcessTransport(net, 1))
    party.raw.send_bytes(0, b'["not", "a", "report"]', TAG_ERROR)
    with pytest.raises(RemoteError) as err:
        master._poll_errors()
    assert err.value.rank == 1 and err.value.exc_type == "ProtocolError"


def test_well_formed_report_is_kept_as_sent():
    comms = _comms()
    payload = {"type": "ZeroDivisionError", "message": "party one cannot do this",
               "traceback": "Traceback (most recent call last):\n  boom\n"}
    e = _report(comms, 1, json.dumps(payload).encode())
    assert (e.rank, e.exc_type, e.remote_message, e.remote_traceback) == (
        1, payload["type"], payload["message"], payload["traceback"])


def test_a_report_from_report_error_reaches_the_master():
    comms = _comms()
    try:
        raise KeyError("missing")
    except KeyError as exc:
        comms[2].report_error(exc)
    with pytest.raises(RemoteError) as err:
        comms[0].recv(2)
    e = err.value
    assert e.rank == 2 and e.exc_type == "KeyError" and "missing" in e.remote_message
    assert "Traceback" in e.remote_traceback and "raise KeyError" in e.remote_traceback


def test_huge_report_is_truncated_with_a_note():
    comms = _comms()
    payload = {"type": "T" * 10**6, "message": "m" * 10**7, "traceback": "t" * 10**7}
    e = _report(comms, 1, json.dumps(payload).encode())
    _bounded(e, 1)
    assert e.exc_type.startswith("T" * 200) and e.remote_message.startswith("m" * 10_000)
    assert e.remote_traceback.startswith("t" * 100_000)
    for text in (e.exc_type, e.remote_message, e.remote_traceback):
        assert "more characters cut" in text


def test_a_report_failing_authentication_still_names_the_rank():
    comms = _comms()
    e = _report(comms, 2, b'{"type": "X", "message": "m", "traceback": ""}', sealed=False)
    assert e.rank == 2 and e.exc_type == "ChannelError"


report_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=3),
    max_leaves=10)
reports = report_values | st.fixed_dictionaries(
    {"type": report_values | st.text(), "message": report_values | st.text(),
     "traceback": report_values | st.text()},
    optional={"extra": report_values})


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=reports, rank=st.sampled_from([1, 2]))
def test_any_json_error_report_becomes_a_remote_error(payload, rank):
    comms = _comms()
    e = _report(comms, rank, json.dumps(payload).encode())
    _bounded(e, rank)
    if isinstance(payload, dict) and all(isinstance(payload.get(k), str)
                                         for k in ("type", "message", "traceback")) \
            and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", payload["type"]):
        assert (e.exc_type, e.remote_message, e.remote_traceback) == (
            payload["type"], payload["message"], payload["traceback"])
    else:
        assert e.exc_type == "ProtocolError" and f"rank {rank} sent a malformed error report" in str(e)
