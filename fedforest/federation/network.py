"""Network jobs: the master (``fedforest serve``) and each party (``fedforest
join``) are separate processes, usually at separate organisations, connected
by the TCP transport (:mod:`fedforest.transport.tcp`).

The master's job file is a normal job file (``[job]`` and the mode's table)
plus a ``[network]`` table: where it listens, its own key pair and, in rank
order, every party's name and pinned certificate.  A party's file holds only
what is the party's own: its data file and columns (``[job]``), the
master's address and pinned fingerprint (``[network]``) and the limits it
accepts (``[policy]``).

Start-up, before any algorithm runs: the master sends each party a job
message (mode, task, every shared setting, the party's rank); the party adds
its own settings, checks the request against its policy and answers
``accept`` or ``refuse`` with the reason.  A refusal stops the job with the
party's reason; nothing is adjusted silently.  Then both run the mode's
roles, unchanged, over the encrypted ``Comm``.
"""
import json
import os
import sys
import time

from ..constraints import Interval, Options, check
from ..crypto.identity import Certificate, check_name, client_context, normalize_fingerprint, server_context
from ..errors import FedForestError, InputError, RemoteError, Stopped, training_stop
from ..transport.base import Comm, JobAborted
from ..transport.runner import INPUT_ERRORS, describe_failure, run_rank
from ..transport.watch import DIED
from ..transport.tcp import (DEFAULT_MAX_FRAME, ClosedAtHello, JoinFailed, Party, PeerLost, accept_parties,
                             connect_master, resolve_hosts, split_address)
from ..version import __version__
from .config import JOB_INDEX, JOB_PARAMS, load_toml, relative_to, resolve
from .paths import check_job_paths
from . import privacy as label_privacy
from .mode import VERTICAL
from .registry import REGISTRY

TAG_JOB = 10                    # the start-up exchange, before Comm's handshake
NETWORK = "network"
POLICY = "policy"
JOB = "job"
DEFAULT_PORT = 7700
DEFAULT_CONNECT_TIMEOUT = 300.0
# settings that are each party's own: the master neither sends nor decides them (a job
# message that names one is refused), and a party takes them from its own file only
LOCAL = ("data", "test_data", "id_column", "na_values", "categorical_columns", "model_dir", "output",
         "summary_json", "overwrite", "resume", "max_key_length", "paillier_randomness",
         "n_jobs", "encrypt_workers", "tree_batch", "batch_memory_mb", "memory_mb", "progress", "verbose", "quiet")
# what a party's [job] table says about the label: the column it holds (the job must name the
# same), or holds_label = false; a party that declares no label column does not hold the label
PARTY_LABEL_KEYS = ("label_column", "holds_label")
PARTY_JOB_KEYS = LOCAL + PARTY_LABEL_KEYS
# paths a party writes (or reads a model from): inside its [policy] base_dir
PARTY_WRITES = ("model_dir", "output", "summary_json")
MAX_PARTIES = 4096              # a job message naming more participants is refused
MAX_MESSAGE_MB = 1 << 20
# settings that count trees, bounded by a party's max_trees
TREE_COUNTS = ("n_estimators", "xgb_trees")
COMMANDS = {"train": ("server_train", "client_train"), "predict": ("server_predict", "client_predict")}
# the label privacy of a vertical network job whose job file sets none (the label holder
# refuses "plain" unless its policy allows it)
NETWORK_LABEL_PRIVACY = "paillier"
# seconds a party spends on its second try when the master dropped its first connection
# without a reason (is the master still there, and does it take this party's certificate?)
SECOND_TRY_SECONDS = 3.0


def _table(doc, name, path, required=True):
    table = doc.get(name)
    if table is None:
        if required:
            raise InputError("config", f"{path!r} has no [{name}] table")
        return {}
    if not isinstance(table, dict):
        raise InputError("config", f"[{name}] in {path!r} must be a table")
    return table


def _known(table, name, keys):
    for k in table:
        if k not in keys:
            raise InputError(f"config [{name}]", f"unknown key {k!r} (keys: {', '.join(keys)})")


def _timeout(value, what):
    check(what, value, (Interval(float, 0, closed="neither"), Interval(int, 1)))
    return float(value)


def _max_frame(net):
    """The largest message (bytes) this participant accepts from a peer once the job runs."""
    mb = net.get("max_message_mb", DEFAULT_MAX_FRAME >> 20)
    check("network.max_message_mb", mb, (Interval(int, 1, MAX_MESSAGE_MB),))
    return mb << 20


def _certificate_pair(table, base, where):
    for k in ("certificate", "key"):
        if not isinstance(table.get(k), str):
            raise InputError(f"config [{where}]", f"{k!r} must name this participant's {k} file "
                                                  "(fedforest keygen writes both)")
    return relative_to(table["certificate"], base), relative_to(table["key"], base)


def _network_table(doc, path, keys, command):
    """(the file's folder, its checked [network] table)."""
    net = _table(doc, NETWORK, path)
    _known(net, NETWORK, keys)
    if net.get("transport", "tcp") != "tcp":
        raise InputError("network.transport", f"fedforest {command} runs the 'tcp' transport, got "
                                              f"{net['transport']!r} (an MPI job starts with mpiexec)")
    return doc["__base__"], net


class MasterNetwork:
    """The master's [network] table."""
    KEYS = ("transport", "listen", "name", "certificate", "key", "connect_timeout", "max_message_mb", "parties")
    PARTY_KEYS = ("name", "fingerprint", "certificate", "address")

    def __init__(self, doc, path):
        base, net = _network_table(doc, path, self.KEYS, "serve")
        self.listen = split_address(net.get("listen", f"0.0.0.0:{DEFAULT_PORT}"), "network.listen")
        self.name = check_name(net.get("name", "master"), "network.name")
        self.certificate, self.key = _certificate_pair(net, base, NETWORK)
        self.connect_timeout = _timeout(net.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
                                        "network.connect_timeout")
        self.max_frame = _max_frame(net)
        entries = net.get("parties")
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            raise InputError("network.parties", "must list every party, in rank order, as "
                                                "[[network.parties]] tables with name, fingerprint and "
                                                "certificate")
        self.parties, self.trusted, seen = [], [], {}
        for rank, e in enumerate(entries, start=1):
            where = f"network.parties[{rank}]"
            _known(e, where, self.PARTY_KEYS)
            name = check_name(e.get("name"), f"{where}.name")
            if name in seen or name == self.name:
                raise InputError(f"{where}.name", f"{name!r} names two participants")
            what = f"party {name!r}"
            pin = normalize_fingerprint(e.get("fingerprint"), f"{what}: fingerprint")
            if pin in seen.values():
                raise InputError(what, "has the same fingerprint as another party (one key per party)")
            seen[name] = pin
            if not isinstance(e.get("certificate"), str):
                raise InputError(what, "'certificate' must name the certificate file this party sent")
            cert = Certificate(relative_to(e["certificate"], base), what)
            cert.check_pin(pin, what)
            hosts = None
            if e.get("address") is not None:
                hosts = resolve_hosts(str(e["address"]))
                if not hosts:
                    raise InputError(what, f"address {e['address']!r} does not resolve")
            self.parties.append(Party(name, pin, hosts))
            self.trusted.append(cert)


class PartyNetwork:
    """A party's [network] table."""
    KEYS = ("transport", "name", "master", "master_fingerprint", "certificate", "key", "connect_timeout",
            "max_message_mb")

    def __init__(self, doc, path):
        base, net = _network_table(doc, path, self.KEYS, "join")
        self.name = check_name(net.get("name"), "network.name")
        self.master = split_address(net.get("master"), "network.master")
        self.pin = normalize_fingerprint(net.get("master_fingerprint"), "network.master_fingerprint")
        self.certificate, self.key = _certificate_pair(net, base, NETWORK)
        self.connect_timeout = _timeout(net.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
                                        "network.connect_timeout")
        self.max_frame = _max_frame(net)


class Policy:
    """What a party accepts (its [policy] table); :meth:`refusals` lists what a request breaks."""
    KEYS = ("allowed_modes", "max_trees", "require_label_privacy", "require_instance_space",
            "allow_plain_labels", "allow_master_full_model", "offered_columns", "base_dir")

    def __init__(self, doc):
        pol = _table(doc, POLICY, None, required=False)
        _known(pol, POLICY, self.KEYS)
        base_dir = pol.get("base_dir", ".")
        if not isinstance(base_dir, str) or not base_dir:
            raise InputError("policy.base_dir", f"must name a folder, got {base_dir!r}")
        # the folder every file this party writes (or reads a model from) lies in
        self.base_dir = os.path.realpath(relative_to(base_dir, doc.get("__base__", os.getcwd())))
        self.allowed_modes = pol.get("allowed_modes")
        if self.allowed_modes is not None:
            if not isinstance(self.allowed_modes, list) or not self.allowed_modes:
                raise InputError("policy.allowed_modes", f"must be a list of mode names, got "
                                                         f"{self.allowed_modes!r}")
            for m in self.allowed_modes:
                check("policy.allowed_modes", m, (Options(*REGISTRY.names()),))
        self.max_trees = pol.get("max_trees")
        check("policy.max_trees", self.max_trees, (None, Interval(int, 1)))
        self.label_privacy = pol.get("require_label_privacy")
        check("policy.require_label_privacy", self.label_privacy, (None, Options(*label_privacy.BY_NAME)))
        self.instance_space = pol.get("require_instance_space")
        check("policy.require_instance_space", self.instance_space, (None, Options("shared", "hidden")))
        self.plain_labels = pol.get("allow_plain_labels", False)
        check("policy.allow_plain_labels", self.plain_labels, (bool,))
        self.full_model = pol.get("allow_master_full_model", False)
        check("policy.allow_master_full_model", self.full_model, (bool,))
        self.columns = pol.get("offered_columns")
        if self.columns is not None and not (isinstance(self.columns, list)
                                             and all(isinstance(c, str) for c in self.columns)):
            raise InputError("policy.offered_columns", f"must be a list of column names, got "
                                                       f"{self.columns!r}")

    def refusals(self, command, mode, settings, label_column):
        """Why this party refuses the master's request (empty: it accepts).
        ``label_column``: the label column this party's file declares (None:
        it does not hold the label)."""
        out = []
        if self.allowed_modes is not None and mode not in self.allowed_modes:
            out.append(f"mode {mode!r} is not allowed (policy allowed_modes = {self.allowed_modes})")
        if command != "train":
            return out
        for key in TREE_COUNTS:
            n = settings.get(key)
            if self.max_trees is not None and isinstance(n, int) and n > self.max_trees:
                out.append(f"the job asks {key} = {n}, above this party's max_trees = {self.max_trees}")
        privacy_refused = False
        if self.label_privacy is not None:
            got = settings.get("label_privacy")
            privacy_refused = got != self.label_privacy
            if got is None:
                out.append(f"mode {mode!r} has no label_privacy; this party requires "
                           f"{self.label_privacy!r}")
            elif got != self.label_privacy:
                out.append(f"the job runs label_privacy = {got!r}; this party requires "
                           f"{self.label_privacy!r}")
            elif label_privacy.of(got).encrypted and settings.get("insecure_key"):
                out.append(f"the job allows Paillier keys below 2048 bits (insecure_key, key_length = "
                           f"{settings.get('key_length')}); this party requires label privacy")
        if self.instance_space is not None and settings.get("instance_space", "shared") != self.instance_space:
            got = settings.get("instance_space", "shared")
            out.append(f"the job runs instance_space = {got!r}; this party requires {self.instance_space!r}"
                       + ("" if mode == "vertical_boost" else f" (mode {mode!r} has no hidden instance space)"))
        # a label holder's labels leave it in the clear only where its own policy says so (a
        # policy that requires 'plain' says so too); one refusal of 'plain' is enough
        required = label_privacy.of(self.label_privacy)
        plain_allowed = self.plain_labels or (required is not None and required.sends_labels_in_clear())
        job = label_privacy.of(settings.get("label_privacy"))
        if label_column is not None and job is not None and job.sends_labels_in_clear() and not plain_allowed \
                and not privacy_refused:
            out.append(f"the job runs label_privacy = 'plain', which sends this party's labels "
                       f"({label_column!r}) out in the clear; this party's policy does not allow it "
                       "(allow_plain_labels = true in its [policy] would)")
        if settings.get("master_full_model") and not self.full_model:
            out.append("the job asks for master_full_model (this party's split features and thresholds "
                       "go to the master); this party's policy does not allow it "
                       "(allow_master_full_model)")
        if label_column is not None and settings.get("label_column") != label_column:
            out.append(f"the job names label column {settings.get('label_column')!r}; this party's "
                       f"label column is {label_column!r}")
        return out

    def confine(self, key, path):
        """``path`` (a setting ``key``) if it resolves inside :attr:`base_dir`
        (symbolic links followed), else InputError."""
        real = os.path.realpath(path)
        if os.path.commonpath([real, self.base_dir]) != self.base_dir:
            raise InputError(key, f"{path!r} resolves to {real!r}, outside this party's folder "
                                  f"{self.base_dir!r} ([policy] base_dir): refused")
        return path


# ---------------------------------------------------------------------------
# Master
# ---------------------------------------------------------------------------
def master_path(key):
    """What a job message carries in place of the master's own path ``key``:
    a party never reads or writes a path of the master's."""
    return f"<the master's {key}>"


def shared_settings(cfg):
    """The master's resolved settings every party receives: the mode's and the
    [job] settings its family uses, minus each party's own (:data:`LOCAL`);
    the master's own paths (a proxy set, say) only as :func:`master_path`."""
    fam = cfg.spec.family
    paths = {p.name for p in JOB_PARAMS + tuple(cfg.spec.params) if p.path}
    return {k: master_path(k) if k in paths and v is not None else v for k, v in cfg.values.items()
            if k not in LOCAL and (k not in JOB_INDEX or fam in JOB_INDEX[k].families)}


def _say(cfg_quiet, text):
    if not cfg_quiet:
        print(text, flush=True)


def _reply(data):
    """A party's answer to the job message: (accepted, its reason)."""
    try:
        reply = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return False, "sent a malformed answer to the job message"
    if not isinstance(reply, dict):
        return False, "sent a malformed answer to the job message"
    if reply.get("ok") is True:
        return True, None
    error = reply.get("error")
    return False, error[:2000] if isinstance(error, str) else "refused without a reason"


def _start_job(raw, cfg, command, timeout, max_frame=DEFAULT_MAX_FRAME):
    """Master: send each party its job message; raise InputError naming every
    party that refuses (after telling all of them to stop)."""
    settings = shared_settings(cfg)
    for r in range(1, raw.size):
        raw.send_bytes(r, json.dumps({
            "op": "job", "command": command, "version": __version__, "mode": cfg.spec.name,
            "rank": r, "size": raw.size, "names": [raw.names[i] for i in range(raw.size)],
            "settings": settings}).encode("utf-8"), TAG_JOB)
    deadline = time.monotonic() + timeout

    def poll():
        if time.monotonic() > deadline:
            raise FedForestError(f"no answer to the job message within {timeout:g} s")
    refusals, accepted = [], []
    for r in range(1, raw.size):
        ok, why = _reply(raw.recv_bytes(r, TAG_JOB, poll=poll))
        if ok:
            accepted.append(r)
        else:
            refusals.append(f"{raw.describe(r)} refuses the job: {why}")
    if refusals:
        text = "; ".join(refusals)
        for r in accepted:      # they did nothing wrong: tell them who stopped the job, and why
            try:
                raw.send_bytes(r, json.dumps({
                    "op": "stop", "error": f"the job cannot start: {text} (nothing is wrong with party "
                                           f"{raw.names[r]!r})"}).encode("utf-8"), TAG_JOB)
            except (PeerLost, JobAborted):
                pass            # gone already: the refusal below is still the job's end
        raise InputError("policy", text)
    raw.max_frame = max_frame


def _network_defaults(cfg, config_path, flags, command):
    """The master's settings of a network job: a vertical training job whose
    job file (or flags) set no ``label_privacy`` runs :data:`NETWORK_LABEL_PRIVACY`
    (under MPI the mode's own default holds); InputError where the settings
    cannot run with Paillier label privacy, saying how to choose."""
    if command != "train" or cfg.spec.family != VERTICAL or cfg.spec.param("label_privacy") is None:
        return cfg
    chosen = "label_privacy" in cfg.given
    if not chosen and cfg.label_privacy != NETWORK_LABEL_PRIVACY:
        cfg = resolve(config_path, dict(flags, label_privacy=NETWORK_LABEL_PRIVACY), skip_tables=(NETWORK,))
    why = cfg.privacy.unmet(cfg.values)
    if why is None:
        return cfg
    if chosen:
        raise InputError("label_privacy", f"label_privacy = 'paillier' {why}")
    raise InputError("label_privacy", f"a network job of mode {cfg.spec.name!r} runs label_privacy = 'paillier' "
                                      f"unless its job file says otherwise, and label_privacy = 'paillier' "
                                      f"{why}; change that setting, or set label_privacy = \"plain\" in "
                                      f"[{cfg.spec.table}] (the labels then go out in the clear: the label "
                                      "holder must allow it with allow_plain_labels = true in its [policy])")


def _master_failure(raw, exc, verbose):
    """What the master prints when a network job fails, naming participants."""
    if isinstance(exc, RemoteError):
        text = describe_failure(exc, verbose)
        return text.replace(f"error on rank {exc.rank}", f"error on {raw.describe(exc.rank)}", 1)
    if isinstance(exc, (PeerLost, JobAborted, InputError)) or (
            isinstance(exc, FedForestError) and not verbose):
        return f"error: {exc}"
    return describe_failure(exc, verbose)


def serve(config_path, flags, command="train", on_listen=None):
    """``fedforest serve``: run the master of a network job; returns the exit code."""
    doc = load_toml(config_path)
    net = MasterNetwork(doc, config_path)
    job = doc.get(JOB, {})
    for key in ("data", "test_data", "n_parties"):
        if key in flags or (isinstance(job, dict) and key in job):
            raise InputError(key, "in a network job each party names its own data in its party file; "
                                  "the parties are the [[network.parties]] of the job file")
    names = [p.name for p in net.parties]
    flags = dict(flags, n_parties=len(names), data=[f"<data of party {n}>" for n in names])
    cfg = resolve(config_path, flags, skip_tables=(NETWORK,))
    cfg = _network_defaults(cfg, config_path, flags, command)
    check_job_paths(cfg, command, config_path)
    role = cfg.spec.role(COMMANDS[command][0])
    cfg.spec.prepare_rank(cfg, command)
    ctx = server_context(net.certificate, net.key, net.trusted, "network")
    quiet = bool(cfg.quiet)

    def announce(bound):
        _say(quiet, f"listening on {bound[0]}:{bound[1]} for {len(names)} parties: {', '.join(names)}")
        if on_listen is not None:
            on_listen(bound)
    try:
        raw = accept_parties(net.listen, ctx, net.parties, net.name, net.connect_timeout,
                             log=lambda text: _say(quiet, text), on_listen=announce)
    except FedForestError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    comm = Comm(raw)
    try:
        _start_job(raw, cfg, command, net.connect_timeout, net.max_frame)
        role(comm, cfg)
        raw.flush(poll=comm._poll_errors)
    except BaseException as exc:  # noqa: BLE001 - every failure stops every party
        code = 2 if isinstance(exc, InputError) or (
            isinstance(exc, RemoteError) and exc.exc_type in INPUT_ERRORS) else 1
        if isinstance(exc, PeerLost):
            code = DIED     # a party's process died or was stopped: the exit code of a dead rank
        stopped = Stopped.of(exc)
        if stopped is not None:     # a signal: one line, with what the checkpoint holds
            code = stopped.exit_code
            (training_stop(exc) if command == "train" else stopped).say(0)
        else:
            print(_master_failure(raw, exc, bool(cfg.verbose)), file=sys.stderr, flush=True)
        raw.abort(code)
        return code
    raw.finish()
    return 0


# ---------------------------------------------------------------------------
# Party
# ---------------------------------------------------------------------------
def _party_local(doc, path, policy):
    """A party's own settings (its [job] table), paths relative to its file;
    where it leaves out a folder or file it writes, the default lies in its
    ``base_dir``; every path it writes is checked to lie there."""
    job = _table(doc, JOB, path, required=False)
    for k in job:
        if k not in PARTY_JOB_KEYS:
            owner = "the master's job file" if (k in JOB_INDEX or REGISTRY.owners(k)) else None
            keys = ", ".join(PARTY_JOB_KEYS)
            raise InputError(f"config [{JOB}]", f"key {k!r} is set by {owner}" if owner else
                                                f"unknown key {k!r} (a party's keys: {keys})")
    local = {}
    for k, v in job.items():
        local[k] = relative_to(v, doc["__base__"]) if k in JOB_INDEX and JOB_INDEX[k].path else v
    if not isinstance(local.get("data"), str) or not local["data"]:
        raise InputError("data", f"{path!r} must name this party's data file in [job] data")
    check_label_declaration(local, policy)
    for k in ("model_dir", "output"):
        local.setdefault(k, os.path.join(policy.base_dir, JOB_INDEX[k].default))
    for k in PARTY_WRITES:
        if local.get(k) is not None:
            check(k, local[k], JOB_INDEX[k].constraints)
            policy.confine(k, local[k])
    return local


def check_label_declaration(local, policy):
    """A party's [job] says whether it holds the label: ``label_column`` (the
    column it holds) or ``holds_label = false``; InputError where the two
    disagree, or where the label column lies outside the policy's
    ``offered_columns``."""
    label, holds = local.get("label_column"), local.get("holds_label")
    check("label_column", label, (None, str))
    check("holds_label", holds, (None, bool))
    if label == "":
        raise InputError("label_column", "must name this party's label column, got an empty text")
    if holds is True and label is None:
        raise InputError("holds_label", "holds_label = true, but [job] names no label_column: a party "
                                        "that holds the label names its column (label_column = \"...\")")
    if holds is False and label is not None:
        raise InputError("holds_label", f"holds_label = false, but [job] names label_column = {label!r}: "
                                        "a party that holds the label names its column, one that does "
                                        "not names none")
    if label is not None and policy.columns is not None and label not in policy.columns:
        raise InputError("policy.offered_columns", f"the label column {label!r} (label_column in [job]) "
                                                   "is not in offered_columns; list the label column in "
                                                   "offered_columns to offer it")


def _data_columns(path, what):
    """The column names of a party's data file (its header where the format
    has one), or None when the file cannot be read here (the job reports
    that later, as before)."""
    if not isinstance(path, str) or not os.path.isfile(path):
        return None
    ext = os.path.splitext(path)[1].lower()
    try:
        if ext in (".csv", ".txt", ".tsv"):
            from ..data.io import pd
            return list(pd.read_csv(path, sep="\t" if ext == ".tsv" else ",", nrows=0).columns)
        if ext in (".parquet", ".pq"):
            import pyarrow.parquet
            return list(pyarrow.parquet.read_schema(path).names)
    except Exception:  # noqa: BLE001 - read the whole table below instead
        pass
    from ..data.io import read_table
    try:
        return list(read_table(path, None, what, require_id=False, check_types=False).columns)
    except InputError:
        return None


def _check_label(cfg, rank, local):
    """Vertical modes: a party's column is the job's label only where the
    party's own file says it holds that label; InputError (a refusal) when
    the job names a column of this party's data that it does not declare."""
    named, declared = cfg.label_column, local.get("label_column")
    if named is None or declared is not None:
        return          # a declared label column must equal the job's: Policy.refusals
    columns = _data_columns(local["data"], f"party {rank}")
    if columns is None or named not in columns:
        return
    says = ("says it does not hold the label (holds_label = false)" if local.get("holds_label") is False
            else "does not declare a label column")
    raise InputError("label_column", f"the job names column {named!r} of this party as the label, but this "
                                     f"party's file {says}; only the party that holds the label makes a "
                                     f"column the label: if this party holds it, its file says so in [job] "
                                     f"(label_column = {json.dumps(named)}); refused")


def _offered(cfg, rank, policy, family, label=None):
    """Restrict the party's table to the offered columns (its ID column is
    always kept; in a vertical mode the label column only where ``label``,
    the party's own declaration, names it, and then it is an offered column
    too; in a horizontal mode the job's label column)."""
    from ..data.io import read_table
    path = cfg.data[rank - 1]
    label = label if family == VERTICAL else cfg.label_column
    df = read_table(path, cfg.id_column, f"party {rank}", require_id=False, na_values=cfg.na_values or [],
                    categorical_columns=cfg.categorical_columns or [], label_column=label)
    keep = [cfg.id_column] + ([label] if label is not None else [])
    missing = [c for c in policy.columns if c not in df.columns]
    if missing:
        raise InputError("policy.offered_columns", f"{path!r} has no column {missing[0]!r}")
    extra = [c for c in df.columns if c not in policy.columns and c not in keep]
    if not extra:
        return path
    if family != VERTICAL:
        raise InputError("policy.offered_columns", f"{path!r} holds columns this party does not offer "
                                                   f"({extra}); in a horizontal mode give a file with "
                                                   "the offered columns only")
    return df[[c for c in df.columns if c in policy.columns or c in keep]]


def _job_request(data, name):
    """The master's job message, checked for shape: (command, mode, rank,
    size, names, settings); InputError when it is not a job message for
    this party."""
    def bad(why):
        return InputError("job message", f"the master sent a malformed job message: {why}")
    try:
        msg = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise bad("not JSON text") from None
    if not isinstance(msg, dict) or msg.get("op") != "job":
        raise bad("not a job message")
    if msg.get("version") != __version__:
        raise InputError("version", f"the master runs fedforest {str(msg.get('version'))[:40]}, this "
                                    f"party {__version__}")
    command, mode, rank, size, names, settings = (msg.get(k) for k in (
        "command", "mode", "rank", "size", "names", "settings"))
    if command not in COMMANDS:
        raise bad(f"unknown command {str(command)[:40]!r}")
    if not isinstance(mode, str):
        raise bad("the mode is not a name")
    if not (isinstance(size, int) and not isinstance(size, bool) and 2 <= size <= MAX_PARTIES + 1):
        raise bad(f"size must be an int in [2, {MAX_PARTIES + 1}]")
    if not (isinstance(rank, int) and not isinstance(rank, bool) and 1 <= rank < size):
        raise bad(f"rank must be an int in [1, {size - 1}]")
    if not (isinstance(names, list) and len(names) == size):
        raise bad(f"names must list the {size} participants")
    for i, n in enumerate(names):
        check_name(n, f"job message names[{i}]")
    if names[rank] != name:
        raise InputError("network.name", f"the master takes this party for {names[rank]!r}")
    if not (isinstance(settings, dict) and all(isinstance(k, str) for k in settings)):
        raise bad("settings must be a table")
    return command, mode, rank, size, names, settings


def _accept_job(msg, local, policy, name):
    """Party: the merged configuration of the master's request (raw bytes of
    its job message): ``(command, rank, size, names, cfg)``, or InputError with
    the reason of a refusal.  The party's own settings come from ``local`` only."""
    command, mode_name, rank, size, names, settings = _job_request(msg, name)
    sent = [k for k in LOCAL if k in settings]
    if sent:
        raise InputError("job message", f"the master sets {', '.join(sent)}, which only this party's own file "
                                        "decides (paths, overwrite, resume, threads, memory, logging): refused")
    check_label_declaration(local, policy)
    refusals = policy.refusals(command, mode_name, settings, local.get("label_column"))
    if refusals:
        raise InputError("policy", "; ".join(refusals))
    mode = REGISTRY.get(mode_name)
    if not mode.has(COMMANDS[command][1]):
        raise InputError("job message", f"mode {mode_name!r} has no {command} job over the network")
    if policy.allowed_modes is None and not mode.impl.startswith("fedforest."):
        # a mode an installed package adds runs its own code: only where the party named it
        raise InputError("policy", f"mode {mode_name!r} comes from an installed package ({mode.impl}), "
                                   "not fedforest; list it in [policy] allowed_modes to take part")
    for p in JOB_PARAMS + tuple(mode.params):
        v = settings.get(p.name)
        if p.path and v is not None and v != master_path(p.name):
            raise InputError("job message", f"the master sends a path for {p.name!r} ({str(v)[:200]!r}); a "
                                            "party never takes a path from the master: refused")
    merged = dict(settings)
    # a party file may serve jobs of several modes: its settings a mode lacks do not apply
    merged.update({k: v for k, v in local.items() if k != "label_column" and (
        (k in JOB_INDEX and mode.family in JOB_INDEX[k].families) or mode.param(k) is not None)})
    others = [f"<data of party {n}>" for n in names[1:]]
    merged["data"] = others[:rank - 1] + [local["data"]] + others[rank:]
    if merged.get("test_data") is not None:
        merged["test_data"] = others[:rank - 1] + [local["test_data"]] + others[rank:]
    merged["mode"] = mode_name
    cfg = resolve(None, merged)
    for k in PARTY_WRITES:
        if cfg.values.get(k) is not None:
            policy.confine(k, cfg.values[k])
    check_job_paths(cfg, command)
    if cfg.spec.family == VERTICAL:
        _check_label(cfg, rank, local)
    if policy.columns is not None:
        table = _offered(cfg, rank, policy, cfg.spec.family, local.get("label_column"))
        data = list(cfg.data)
        data[rank - 1] = table
        cfg.set("data", data)
    return command, rank, size, names, cfg


def _printable(text, limit=4000):
    """A peer's text as one printable line (no control characters to forge log lines)."""
    return "".join(c if c.isprintable() else " " for c in str(text)[:limit])


def _reach_master(net, ctx, timeout):
    """Connect to the master and wait for its job message: ``(raw, message,
    None)``, or ``(None, None, why)`` where the connection ended first
    (``why`` holds "refused this connection" where the master said why)."""
    try:
        raw = connect_master(net.master, ctx, net.pin, net.name, timeout)
    except ClosedAtHello as exc:
        return None, None, str(exc)
    try:
        return raw, raw.recv_bytes(0, TAG_JOB), None
    except (JobAborted, PeerLost) as exc:
        raw.close()
        return None, None, f"{raw.describe(0)} {raw.lost[0]}" if 0 in raw.lost else str(exc)


def _start_party(net, ctx):
    """The party's connection and the master's job message: ``(raw, message,
    None)``, or ``(None, None, why)`` when the job cannot start for this party.

    A master that ended the connection without saying why either refused
    this party's certificate in the TLS handshake (and still listens), or
    stopped altogether because of another participant (and listens no
    more); one short second try tells them apart, so only a party whose
    own certificate is refused is asked to check the master's pin of it."""
    raw, msg, lost = _reach_master(net, ctx, net.connect_timeout)
    if lost is None or "refused this connection" in lost:
        return raw, msg, lost
    try:
        raw, msg, again = _reach_master(net, ctx, SECOND_TRY_SECONDS)
    except JoinFailed as exc:
        if not str(exc).startswith("cannot reach"):
            raise
        return None, None, (f"{lost} before the job started and no longer listens: it stopped without "
                            "telling this party why (another party failed or was refused, or the master "
                            "was stopped; the master's output names the cause)")
    if again is None or "refused this connection" in again:
        return raw, msg, again
    own = Certificate(net.certificate, "network.certificate").fingerprint
    return None, None, (f"{lost} before the job started: the master refused this party's certificate, or "
                        f"stopped; its job file must pin fingerprint {own} for {net.name!r}")


def _stop_reason(raw):
    """Why the master stopped a job this party had accepted, where it said
    (another party refused it), else None."""
    if raw.probe(0, TAG_JOB) is None:
        return None
    try:
        msg = json.loads(bytes(raw.recv_bytes(0, TAG_JOB)).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError, FedForestError):
        return None
    if isinstance(msg, dict) and msg.get("op") == "stop" and isinstance(msg.get("error"), str):
        return _printable(msg["error"])
    return None


def join(config_path, resume=False, data=None, overwrite=False):
    """``fedforest join``: run one party of a network job; returns the exit
    code.  ``data``: a data file in place of the party file's (prediction
    on another table with the same party file); ``resume``, ``overwrite``:
    set this party's own setting of that name (``--resume``, ``--overwrite``)."""
    doc = load_toml(config_path)
    net = PartyNetwork(doc, config_path)
    policy = Policy(doc)
    if data is not None:
        doc.setdefault(JOB, {})["data"] = os.path.abspath(data)
    local = _party_local(doc, config_path, policy)
    if resume:
        local["resume"] = True
    if overwrite:
        local["overwrite"] = True
    ctx = client_context(net.certificate, net.key, "network")
    me = f"party {net.name!r}"
    try:
        raw, msg, lost = _start_party(net, ctx)
    except FedForestError as exc:
        print(f"error: {me}: {exc}", file=sys.stderr, flush=True)
        return 1
    if lost is not None:
        print(f"error: {me}: {_printable(lost)}", file=sys.stderr, flush=True)
        return 1
    try:
        command, rank, size, names, cfg = _accept_job(msg, local, policy, net.name)
    except InputError as exc:
        print(f"error: {me} refuses the job: {exc}", file=sys.stderr, flush=True)
        raw.send_bytes(0, json.dumps({"ok": False, "error": str(exc)}).encode("utf-8"), TAG_JOB)
        raw.finish(timeout=10)
        return 2
    raw.rank, raw.size = rank, size
    raw.names = dict(enumerate(names))
    raw.names[0] = f"{names[0]!r} at {net.master[0]}:{net.master[1]}"
    raw.max_frame = net.max_frame
    raw.send_bytes(0, json.dumps({"ok": True}).encode("utf-8"), TAG_JOB)
    role = cfg.spec.role(COMMANDS[command][1])
    cfg.spec.prepare_rank(cfg, command)
    quiet = bool(cfg.quiet)
    _say(quiet, f"{me} joined: mode {cfg.spec.name}, rank {rank} of {size - 1} parties")
    cfg.set("progress", False)
    cfg.set("quiet", True)
    failed = []

    def run(comm):
        try:
            return role(comm, cfg)
        except JobAborted:
            raise
        except BaseException as exc:  # noqa: BLE001 - said here, then reported to the master
            failed.append(exc)
            if Stopped.of(exc) is None:     # a signal's one line is run_rank's
                print(f"error: {me}: {exc}", file=sys.stderr, flush=True)
            raise
    comm = Comm(raw)
    out = run_rank(comm, None, run)
    if raw.aborted or failed:
        if not failed:
            why = raw.lost.get(0, "stopped the job")
            stop = _stop_reason(raw)
            print(f"error: {me}: {raw.describe(0)} {why}" + (f": {stop}" if stop else ""), file=sys.stderr,
                  flush=True)
        raw.close()
        return raw.abort_code or (2 if failed and isinstance(failed[0], InputError) else 1)
    raw.finish()
    _say(quiet, f"{me} done" + (f": {out}" if isinstance(out, str) else ""))
    return 0


__all__ = ["serve", "join", "Policy", "MasterNetwork", "PartyNetwork", "shared_settings", "DEFAULT_PORT"]
