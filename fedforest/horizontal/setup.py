"""The start-up every horizontal mode shares: clients share columns and hold
different rows.

Rank 0 is the server, ranks 1..K the clients; each client reads its own rows
file (features + label, an ID column is optional).  :func:`server_setup` /
:func:`client_setup`: every rank checks the job's settings and world, the
clients report their column names and kinds, classes and (for categorical
trees) category values; the server checks that the column sets agree and
sends back the common encoding (:class:`fedforest.horizontal.encoding.Encoding`:
class list, per-column categories), so every client codes its rows the same
way.  A mode with a set-up of its own builds it from :func:`server_load` /
:func:`client_load` (the checks, the handshake and the ``load`` message).

See docs/horizontal.md.
"""
import numpy as np

from ..errors import InputError
from ..logs import status
from ..federation import protocol
from .encoding import MAX_CATEGORIES, ClientTable, agree, client_what, table_settings
from .message_checks import check_categories, field_of, message_encoding, same_setting
from .model_files import check_model_folder, client_dir, server_dir


SERVER = 0


def log(cfg, text):
    """A summary line on the server (nothing when ``quiet``; see :mod:`fedforest.logs`)."""
    status(cfg, text)


def check_clients(cfg):
    """The job settings every horizontal mode reads: one data file (and
    optional test file) per client."""
    cfg.check_parties("client")
    if cfg.test_data is not None and len(cfg.test_data) != cfg.n_parties:
        raise InputError("test_data", f"must list one test file per client ({cfg.n_parties}), "
                                      f"got {cfg.test_data!r}")


def check_world(comm, cfg):
    cfg.check_world(comm.size, "client")


def job_seed(cfg):
    """The job's seed: ``random_state`` when set, else a fresh one drawn from
    the operating system (recorded in the summary, so a run can be repeated)."""
    if cfg.random_state is not None:
        return int(cfg.random_state)
    return int(np.random.SeedSequence().entropy % (2 ** 31))


def server_load(comm, cfg, tree_type, task="classification", **fields):
    """The server's checks of its settings and world, the handshake and the
    ``load`` message: ``tree_type`` and ``task`` (which :func:`client_load`
    checks) and a mode's further ``fields`` (its client checks them).  Returns
    the clients' descriptions of their tables ({rank: description})."""
    cfg.check_train()
    check_clients(cfg)
    check_world(comm, cfg)
    check_model_folder(server_dir(cfg.model_dir), cfg, "model_dir")
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    return comm.exchange({r: {"op": protocol.LOAD, "tree_type": tree_type, "task": task, **fields}
                          for r in comm.clients})


def server_setup(comm, cfg, tree_type, task="classification"):
    """Server start-up shared by every horizontal mode: world size, handshake,
    the clients' descriptions and the job-wide encoding.  Returns (infos, Encoding)."""
    infos = server_load(comm, cfg, tree_type, task)
    return infos, agree(infos, tree_type, task)


def client_load(comm, cfg, tree_type, task):
    """A client's checks of its settings and world, the handshake and the
    server's ``load`` message, checked for ``tree_type`` and ``task``; returns
    that message (a mode may check more of it)."""
    rank = comm.rank
    cfg.check_train()
    check_clients(cfg)
    check_world(comm, cfg)
    check_model_folder(client_dir(cfg.model_dir, rank), cfg, f"{client_what(rank)} model_dir")
    comm.reply_timeout = cfg.reply_timeout
    comm.handshake()
    msg = protocol.expect(comm.recv(SERVER), protocol.LOAD)
    same_setting("tree_type", field_of(msg, protocol.LOAD, "tree_type"), tree_type)
    same_setting("task", field_of(msg, protocol.LOAD, "task"), task)
    return msg


def client_setup(comm, cfg, tree_type, task="classification"):
    """Client start-up matching :func:`server_setup` (the same ``tree_type`` and
    ``task``, from this client's settings), up to the server's ``setup``
    message.  Returns (setup message, Encoding, X, y, test) where ``test`` is
    ``(X, y)`` of the client's ``test_data`` file or None.  The encoding is
    checked against this client's table; the rest of the set-up is the mode's
    to check."""
    rank = comm.rank
    client_load(comm, cfg, tree_type, task)
    table = ClientTable(cfg.data[rank - 1], rank, cfg.label_column, cfg.id_column, **table_settings(cfg))
    info = table.describe(tree_type, task)
    comm.send(SERVER, info)
    setup = protocol.expect(comm.recv(SERVER), protocol.SETUP)
    enc = message_encoding(protocol.SETUP, field_of(setup, protocol.SETUP, "encoding"), tree_type,
                         "classification" if tree_type == "id3" else task,
                         MAX_CATEGORIES if tree_type == "id3" else None)
    check_categories(protocol.SETUP, enc, info, tree_type == "id3")
    what = client_what(rank)
    X, y = enc.features(table.X, what), enc.labels(table.y, what)
    test = None
    if cfg.test_data:
        tt = ClientTable(cfg.test_data[rank - 1], rank, cfg.label_column, cfg.id_column, **table_settings(cfg))
        test = (enc.features(tt.X, f"{what} test data"), enc.labels(tt.y, f"{what} test data"))
    return setup, enc, X, y, test
