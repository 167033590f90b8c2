"""The round lifecycle: the client's message loop and the server's rounds, over the in-process transport."""
import pytest

from fedforest.federation.protocol import ProtocolError, expect
from fedforest.federation.rounds import Done, ask, messages, serve
from fedforest.transport.inprocess import run_inprocess


def test_messages_merge_common_and_per_client_parts():
    out = messages("fit", [1, 2], {"round": 3}, {2: {"extra": 1}})
    assert out == {1: {"op": "fit", "round": 3}, 2: {"op": "fit", "round": 3, "extra": 1}}


def test_serve_answers_until_done_and_ask_collects_one_reply_per_client():
    def server(comm):
        comm.handshake()
        first = ask(comm, "add", {"x": 2})
        second = ask(comm, "add", per_client={1: {"x": 10}, 2: {"x": 20}})
        final = ask(comm, "stop")
        return first, second, final, comm.rounds

    def client(comm):
        comm.handshake()
        state = {"total": 0}

        def add(msg):
            state["total"] += msg["x"] * comm.rank
            return {"total": state["total"]}

        return serve(comm, {"add": add, "stop": lambda msg: Done(state["total"], {"bye": comm.rank})})

    (first, second, final, rounds), _ = run_inprocess(2, server, client)
    assert first == {1: {"total": 2}, 2: {"total": 4}}
    assert second == {1: {"total": 12}, 2: {"total": 44}}
    assert final == {1: {"bye": 1}, 2: {"bye": 2}} and rounds == 3


def test_unexpected_message_is_a_protocol_error_naming_it():
    def server(comm):
        comm.handshake()
        return ask(comm, "bogus")

    def client(comm):
        comm.handshake()
        return serve(comm, {"fit": lambda msg: {}})

    from fedforest.errors import RemoteError
    with pytest.raises(RemoteError, match=r"unexpected message 'bogus' \(expected one of fit\)"):
        run_inprocess(1, server, client)


def test_expect():
    assert expect({"op": "a"}, "a") == {"op": "a"}
    with pytest.raises(ProtocolError, match="expected 'a', got 'b'"):
        expect({"op": "b"}, "a")
