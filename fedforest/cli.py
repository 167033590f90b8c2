"""Command line: ``python -m fedforest <command>``.

Jobs (start with ``mpiexec -n K+1``; rank 0 is the server, ranks 1..K the
parties/clients): ``train``, and ``predict`` for vertical models.
Network jobs (each organisation starts its own process; docs/network.md):
``serve`` on the master, ``join`` on each party, ``keygen`` once per participant.
Local commands: ``predict`` (horizontal models), ``explain``, ``evaluate``,
``split``, ``modes``, ``demo-data``, ``demo-report``.

Every setting of docs/config.md is also a flag (``max_depth`` -> ``--max-depth``);
``--mode`` picks the algorithm (``python -m fedforest modes`` lists them).
What each rank learns of the others' data in each mode and label privacy:
docs/protocol.md, sections "What each role learns" (forest) and "What each
rank learns" (boosting).
"""
import argparse
import gc
import signal
import sys

from .errors import NOTHING_SAVED, InputError, Stopped, training_stop
from .logs import configure as configure_logging
from .version import __version__
from .federation.config import JOB_PARAMS, job_setting, parse_flag_value, resolve
from .federation.paths import check_job_paths, check_output_file, check_output_folder
from .federation.registry import REGISTRY


def _mode_list():
    return "\n".join(f"  {m.name:<14} {m.summary} (settings: [{m.table}])" for m in REGISTRY.modes())


def _flag_help(param, modes):
    """A flag's help: its text, constraints and default (per mode where they differ)."""
    def one(p):
        return f"{p.help} [{p.describe()}; default {p.default!r}]"
    if not modes:
        return one(param)
    texts = {}
    for m in modes:
        texts.setdefault(one(m.param(param.name)), []).append(m.name)
    if len(texts) == 1:
        (text, names), = texts.items()
        return f"({', '.join(names)}) {text}"
    return "; ".join(f"({', '.join(names)}) {text}" for text, names in texts.items())


def _add_flag(group, param, help_text):
    if param.is_paths:
        group.add_argument(param.flag, nargs="+", default=argparse.SUPPRESS, metavar="FILE", help=help_text)
    elif param.is_texts:
        group.add_argument(param.flag, nargs="+", type=str, default=argparse.SUPPRESS, metavar="TEXT",
                           help=help_text)
    elif param.is_bool:
        group.add_argument(param.flag, nargs="?", const=True, type=parse_flag_value, default=argparse.SUPPRESS,
                           metavar="BOOL", help=help_text)
    elif param.text or param.path:
        group.add_argument(param.flag, type=str, default=argparse.SUPPRESS, metavar="TEXT", help=help_text)
    else:
        group.add_argument(param.flag, type=parse_flag_value, default=argparse.SUPPRESS, metavar="VALUE",
                           help=help_text)


def setting_names():
    """Every setting any mode (or [job]) declares."""
    names = [p.name for p in JOB_PARAMS]
    for m in REGISTRY.modes():
        names += [p.name for p in m.params if p.name not in names]
    return names


def _add_job_flags(p, shown=None):
    """Every setting as a flag; with ``shown`` (a set of names), the others are
    accepted but left out of ``--help`` (a command's own options only)."""
    def helped(name, text):
        return text if shown is None or name in shown else argparse.SUPPRESS
    p.add_argument("--config", help="TOML job file: a [job] table and the mode's table (docs/config.md)")
    job = p.add_argument_group("job settings (TOML table [job]; every mode)")
    for param in JOB_PARAMS:
        text = _flag_help(param, None)
        if param.name == "mode":
            text = f"the algorithm to run, one of: {', '.join(REGISTRY.names())} [default 'vertical']"
        _add_flag(job, param, helped(param.name, text))
    done = {param.name for param in JOB_PARAMS}
    for mode in REGISTRY.modes():
        new = [q for q in mode.params if q.name not in done]
        if not new:
            continue
        if shown is not None and not any(q.name in shown for q in new):
            group = p.add_argument_group()      # accepted, not listed
        else:
            group = p.add_argument_group(f"mode {mode.name} (TOML table [{mode.table}])", mode.summary)
        for q in new:
            owners = REGISTRY.owners(q.name)
            _add_flag(group, q, helped(q.name, _flag_help(q, owners) if len(owners) > 1 else _flag_help(q, None)))
            done.add(q.name)


def _flags(args):
    names = set(setting_names())
    return {k: v for k, v in vars(args).items() if k in names}


def _mpi_command(args, server_role, client_role):
    """Run one role of a job on this MPI rank."""
    # a stop signal while the rank starts (MPI among the ranks, the settings) waits until
    # the rank can tell the master: a rank that ended by itself before the job would leave
    # the others waiting for it
    _DEFERRED[0] = True
    from .transport.watch import maybe_supervise
    maybe_supervise()       # a rank that gets killed is named by its watcher (transport/watch.py)
    from .transport.base import Comm
    from .transport.mpi import world_transport
    from .transport.runner import run_master, run_rank
    comm = Comm(world_transport())
    command = "train" if server_role == "server_train" else "predict"
    cfg = early = None
    try:
        _DEFERRED[0] = False
        if Stopped.requested is not None:
            raise Stopped.requested
        configure_logging(rank=comm.rank if comm.size > 1 else None)
        unconnected = _pmi_not_connected(comm.size)
        if unconnected:
            if _launcher_rank() == 0:
                print(f"error: {unconnected}", file=sys.stderr, flush=True)
            return 2
        try:
            cfg = resolve(args.config, _flags(args))
        except InputError as exc:
            # every rank reads the same settings and fails the same way: rank 0 says so, all stop
            if comm.rank == 0:
                print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
        if comm.rank == 0 and job_setting(args.config, _flags(args), "progress") is None:
            # left open: the master's stderr is the launcher's pipe, so look further (logs.py)
            from .logs import progress_choice
            cfg.set("progress", progress_choice(under_launcher=comm.size > 1))
    except BaseException as exc:     # noqa: BLE001 - a stop: said in the job, which names the rank
        if Stopped.of(exc) is None:
            raise
        early = exc

    def job(c):
        # in the job, what a rank's own machine decides (installed packages, its files) and
        # a signal while it loads its kernels fail as that rank's failure, which names it
        try:
            if early is not None:
                raise early
            role = cfg.spec.role(server_role if c.rank == 0 else client_role)
            # before anything is read: no output names an input, each output can be written
            check_job_paths(cfg, command, args.config)
            _DEFERRED[0] = True     # numba's loading (or compiling) of the kernels is not interrupted
            try:
                cfg.spec.prepare_rank(cfg, command)
            finally:
                _DEFERRED[0] = False
            if Stopped.requested is not None:
                raise Stopped.requested
            return role(c, cfg)
        except BaseException as exc:
            stop = training_stop(exc) if c.rank == 0 and command == "train" else exc
            if stop is exc:
                raise
            raise stop from None

    if comm.rank != 0:
        if cfg is not None:
            cfg.set("progress", False)
            cfg.set("quiet", True)
        run_rank(comm, None, job)
    else:
        run_master(comm, job, verbose=lambda: bool(cfg is not None and cfg.verbose))
    return 0


def _pmi_not_connected(world_size, environ=None):
    """Why a job cannot run when Slurm started several tasks but MPI sees a
    world of one (each task its own job: srun without a PMI plugin MPICH
    speaks), or None."""
    import os
    env = os.environ if environ is None else environ
    tasks = env.get("SLURM_NTASKS", "")
    if world_size != 1 or not tasks.isdigit() or int(tasks) < 2 or "SLURM_PROCID" not in env:
        return None
    return (f"Slurm started {tasks} tasks, but MPI sees each as a job of 1 rank: PMI is not "
            "connected. Start the ranks with `srun --mpi=pmi2 ...` (check `srun --mpi=list`), or with "
            "`mpiexec -launcher slurm -n $SLURM_NTASKS ...` inside the allocation (docs/slurm.md)")


def cmd_train(args):
    return _mpi_command(args, "server_train", "client_train")


def model_mode(model_dir):
    """The mode a saved model was trained with (vertical: the mode in the
    master's manifest; horizontal: the mode in model.json), None when ``model_dir``
    holds neither."""
    import os
    if os.path.isfile(os.path.join(model_dir, "master", "manifest.json")):
        from .vertical.model_files import read_manifest
        mode = read_manifest(os.path.join(model_dir, "master"), "master model").get("mode", "vertical")
        return mode if isinstance(mode, str) else "vertical"
    from .horizontal.model_files import client_folders, load_model
    if not (os.path.isfile(os.path.join(model_dir, "server", "model.json"))
            or os.path.isfile(os.path.join(model_dir, "model.json")) or client_folders(model_dir)):
        return None
    return load_model(model_dir)["mode"]


def _mode_in_file(config):
    from .federation.config import load_toml
    job = load_toml(config).get("job", {}) if config else {}
    return isinstance(job, dict) and "mode" in job


# what predict reads; every other setting describes training and is the model's
PREDICT_SETTINGS = {"mode", "task", "n_parties", "data", "id_column", "label_column", "model_dir", "output",
                    "na_values", "categorical_columns",
                    "summary_json", "reply_timeout", "progress", "verbose", "quiet", "result_party",
                    "predict_method", "explain_row", "explain_trees"}


# serve's [job] settings: each party names its own data, so the master takes none; and
# --resume, to continue a vertical training job from the checkpoints (docs/network.md)
SERVE_SHOWN = ({p.name for p in JOB_PARAMS} - {"data", "test_data", "n_parties"}) | {"resume"}


def _predict_summary_path(path):
    """predict keeps the training summary of the job file: its own goes beside it."""
    import os
    stem, ext = os.path.splitext(path)
    return f"{stem}-predict{ext or '.json'}"


def cmd_predict(args):
    training = sorted(k for k in _flags(args) if k not in PREDICT_SETTINGS)
    if training:
        flags = ", ".join("--" + k.replace("_", "-") for k in training)
        what = "is a training setting" if len(training) == 1 else "are training settings"
        raise InputError("predict", f"{flags} {what}; predict uses the model's own (retrain to change it)")
    if "summary_json" not in _flags(args):
        trained = job_setting(args.config, {}, "summary_json")
        if trained:
            args.summary_json = _predict_summary_path(trained)
    if "mode" not in _flags(args) and not _mode_in_file(args.config):
        # the model knows its mode: --mode is needed only to override it
        mode = model_mode(job_setting(args.config, _flags(args), "model_dir"))
        if mode is not None:
            args.mode = mode
    cfg = resolve(args.config, _flags(args))
    if cfg.spec.has("server_predict"):
        return _mpi_command(args, "server_predict", "client_predict")
    from .horizontal.model_files import predict_file
    if not isinstance(cfg.data, list) or len(cfg.data) != 1:
        raise InputError("data", "horizontal prediction reads one rows file (--data FILE)")
    check_job_paths(cfg, "predict", args.config)
    out = predict_file(cfg.model_dir, cfg.data[0], cfg.output, id_column=cfg.id_column, na_values=cfg.na_values)
    if not cfg.quiet:
        note = f"; {out['n_unseen']} values of categories not seen in training" if out["n_unseen"] else ""
        print(f"predicted {out['n_rows']} rows; predictions written to {out['path']}{note}")
    return 0


def cmd_explain(args):
    from .vertical import explain
    if explain.role_folders(args.model_dir):
        if args.row is not None or args.data is not None:
            raise InputError("row", "the decision path of a row in a vertical model needs every party: "
                                    "run a prediction job with --explain-row ID (see docs/protocol.md)")
        print(explain.describe(args.model_dir, args.top, args.importance_type))
        return 0
    if args.importance_type is not None:
        raise InputError("importance_type", "applies to vertical_boost models; no vertical model is at "
                                            f"{args.model_dir!r}")
    from .horizontal.model_files import explain_model
    print(explain_model(args.model_dir, args.data, args.row, args.id_column))
    return 0


def _md(value):
    return "none" if value is None else f"`{value!r}`".replace("|", "\\|")


def settings_markdown():
    """The settings reference of docs/config.md: one table for [job], one per mode."""
    out = [f"### `[job]`: every mode\n", "| key | accepts | default | meaning |", "|---|---|---|---|"]
    for p in JOB_PARAMS:
        only = "" if len(p.families) > 1 else f" ({' and '.join(p.families)} modes only)"
        out.append(f"| `{p.name}` | {p.describe()} | {_md(p.default)} | {p.help}{only} |")
    for m in REGISTRY.modes():
        out += ["", f"### `[{m.table}]`: mode `{m.name}` ({m.family}; {', '.join(m.tasks)})", "",
                m.summary + ".", "", "| key | accepts | default | meaning |", "|---|---|---|---|"]
        for p in m.params:
            out.append(f"| `{p.name}` | {p.describe()} | {_md(p.default)} | {p.help} |")
    return "\n".join(out) + "\n"


def cmd_modes(args):
    if args.markdown:
        print(settings_markdown(), end="")
        return 0
    for m in REGISTRY.modes():
        print(f"{m.name} ({m.family}; {', '.join(m.tasks)}): {m.summary}")
        print(f"  settings in [{m.table}]:")
        for p in m.params:
            print(f"    {p.name} = {p.default!r}  -- {p.help} [{p.describe()}]")
    return 0


def cmd_evaluate(args):
    from .federation.metrics import evaluate_files, format_metrics
    check_output_file("--json", args.json, [("the predictions file (--predictions)", args.predictions),
                                            ("the file of true labels (--truth)", args.truth)])
    metrics = evaluate_files(args.predictions, args.truth, args.id_column, args.label_column, args.task,
                             positive_class=args.positive_class, na_values=args.na_values,
                             by_position=args.by_position)
    print(format_metrics(metrics))
    if args.json:
        from .federation.files import write_summary
        write_summary(args.json, metrics)
    return 0


def _split_outputs(args):
    """The files ``split`` writes into ``--out``."""
    if args.by == "rows":
        names = [f"client{k}{part}.csv" for k in range(1, args.parties + 1)
                 for part in ("", "-test")[:2 if args.test_size else 1]]
    else:
        names = [f"{part}-party{p}.csv" for part in ("train", "test")[:2 if args.test_size else 1]
                 for p in range(1, args.parties + 1)]
    import os
    return [os.path.join(args.out, name) for name in names]


def cmd_split(args):
    from .data.split import split_file, split_rows_file
    check_output_folder("--out", args.out)
    for path in _split_outputs(args):
        check_output_file("--out", path, [("the table to split (--input)", args.input)])
    if args.by == "rows":
        paths = split_rows_file(args.input, args.parties, args.label_column, args.out, args.scheme,
                                args.alpha, args.test_size, args.seed, id_column=args.id_column,
                                na_values=args.na_values, categorical_columns=args.categorical_columns)
    else:
        paths = split_file(args.input, args.parties, args.id_column, args.label_column, args.out,
                           label_party=args.label_party, test_size=args.test_size, seed=args.seed,
                           na_values=args.na_values, categorical_columns=args.categorical_columns)
    for p in paths:
        print(p)
    return 0


def cmd_warm_up(args):
    """Compile the numba kernels once (they are cached beside the package), so the
    first job does not pay for it."""
    import time
    t0 = time.perf_counter()
    from .tree import predict
    from .vertical import tree_grower
    for split_method in ("hist", "exact"):
        for is_classification in (True, False):
            tree_grower.warm_up(split_method, is_classification)
    predict.warm_up()
    print(f"kernels ready in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_keygen(args):
    from .crypto.identity import keygen
    key, cert, fp = keygen(args.out, args.name)
    print(f"private key:  {key}  (keep it here; never send it)")
    print(f"certificate:  {cert}  (public: a party sends it to the master, whose job file lists it; "
          "the master keeps its own)")
    print(f"fingerprint:  {fp}")
    print("confirm the fingerprint with the other organisations over a second channel (phone, video "
          "call): the master pins each party's in its job file, each party pins the master's in its "
          "party file (docs/network.md)")
    return 0


def cmd_serve(args):
    from .federation.network import serve
    configure_logging(rank=None)
    if not args.config:
        raise InputError("--config", "serve needs the job file with its [network] table")
    from .transport.tcp import ListenFailed
    flags = _flags(args)
    try:
        return serve(args.config, flags, command="predict" if args.predict else "train")
    except ListenFailed as exc:
        print(f"error: {exc.strerror}", file=sys.stderr, flush=True)
        return 2


def cmd_join(args):
    from .federation.network import join
    configure_logging(rank=None)
    return join(args.config, resume=args.resume, data=args.data, overwrite=args.overwrite)


def cmd_demo_data(args):
    from .demo import make_demo
    print(make_demo(args.out))
    return 0


def cmd_demo_report(args):
    from .demo import report
    print(report(args.dir))
    return 0


def _job_parser(sub, name, func, help_text, description, shown=None, epilog=None):
    """A command that runs a job: every setting is a flag (``--help`` lists those in ``shown``)."""
    p = sub.add_parser(name, allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter,
                       epilog=epilog or "modes:\n" + _mode_list(), help=help_text, description=description)
    _add_job_flags(p, shown)
    p.set_defaults(func=func)
    return p


def build_parser():
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="python -m fedforest", description=__doc__, allow_abbrev=False,
                                     formatter_class=raw, epilog="modes:\n" + _mode_list())
    parser.add_argument("--version", action="version", version=f"fedforest {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _job_parser(sub, "train", cmd_train, "train a model of the chosen mode (under mpiexec -n K+1)",
                "Train a model: rank 0 is the server, ranks 1..K the parties/clients.  What each rank "
                "learns of the others' data (per mode and label_privacy): docs/protocol.md, \"What each "
                "role learns\" (forest) and \"What each rank learns\" (boosting).")
    _job_parser(sub, "predict", cmd_predict,
                "predict with a trained model (vertical: under mpiexec; horizontal: locally)",
                "Predict with a trained model.  A vertical model is split across the parties: predict "
                "runs as a job under mpiexec.  A horizontal model predicts one rows file locally "
                "(--data FILE).  Every other setting is the model's own.",
                shown=PREDICT_SETTINGS,
                epilog="The model knows its mode; --mode is needed only to override it.")
    p = sub.add_parser("keygen", help="create this participant's key pair and certificate for network jobs",
                       description="Write NAME.key (private key) and NAME.crt (self-signed certificate) into "
                                   "DIR and print the certificate's SHA-256 fingerprint (docs/network.md).")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the key and certificate")
    p.add_argument("--name", required=True, help="this participant's name in network jobs")
    p.set_defaults(func=cmd_keygen)
    p = _job_parser(sub, "serve", cmd_serve,
                    "run the master of a network job (TCP + TLS; parties start fedforest join)",
                    "Run the master of a network job: listen for the parties pinned in the job file's "
                    "[network] table, send them the job, run the mode's server role (docs/network.md).  "
                    "Each party names its own data in its party file.  What each rank learns of the "
                    "others' data: docs/protocol.md, \"What each role learns\" (forest) and \"What each "
                    "rank learns\" (boosting).",
                    shown=SERVE_SHOWN,
                    epilog="Every setting of the mode's table is also a flag, as for train (--max-depth, "
                           "--n-estimators, ...): `python -m fedforest train --help` lists them, "
                           "`python -m fedforest modes` lists them per mode.")
    p.add_argument("--predict", action="store_true",
                   help="run prediction with a trained vertical model instead of training")
    p = sub.add_parser("join", help="run one party of a network job (connects to the master)",
                       description="Run one party of a network job: connect to the master pinned in the "
                                   "party file, check the job against the party's [policy], run the mode's "
                                   "client role (docs/network.md).")
    p.add_argument("--config", required=True, help="the party file: [job] data, [network], [policy]")
    p.add_argument("--resume", action="store_true",
                   help="continue from this party's checkpoint (the master runs serve --resume)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a model already in this party's model_dir (as overwrite = true in the "
                        "party file; the master never decides it)")
    p.add_argument("--data", default=None, metavar="FILE",
                   help="this party's data file in place of the party file's [job] data (e.g. the rows "
                        "to predict, with the same party file)")
    p.set_defaults(func=cmd_join)
    p = sub.add_parser("modes", help="list the modes and their settings")
    p.add_argument("--markdown", action="store_true", help="print the settings reference as markdown tables")
    p.set_defaults(func=cmd_modes)
    p = sub.add_parser("evaluate", help="metrics of a predictions file against true labels")
    p.add_argument("--predictions", required=True, help="predictions file written by predict")
    p.add_argument("--truth", required=True, help="file with the ID and label columns")
    p.add_argument("--id-column", default="id", help="name of the ID column (default 'id')")
    p.add_argument("--by-position", action="store_true",
                   help="match the files row by row instead of by ID (a truth file without IDs; both files "
                        "must have the same number of rows, in the same order)")
    p.add_argument("--label-column", required=True, help="name of the label column in --truth")
    p.add_argument("--task", choices=["classification", "regression"], default=None,
                   help="default: guessed from the predictions file (proba_ columns)")
    p.add_argument("--positive-class", default=None,
                   help="the class whose F1 is reported for two classes (default: the minority class of the "
                        "true labels, the one that sorts last on a tie)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the metrics as JSON to FILE")
    p.add_argument("--na-values", nargs="+", default=None, metavar="TEXT",
                   help="cell texts of --truth that mean a missing label, besides 'NA' and an empty cell")
    p.set_defaults(func=cmd_evaluate)
    p = sub.add_parser("explain", help="a horizontal model as rules (and the rule of one row); a "
                                       "vertical model's feature importances as each rank knows them")
    p.add_argument("--model-dir", required=True,
                   help="the job's model_dir, or one client's (horizontal) or rank's (vertical) folder in it")
    p.add_argument("--top", type=int, default=None, help="vertical: show only the N most important columns")
    p.add_argument("--importance-type", default=None, metavar="TYPE",
                   help="vertical_boost models: XGBoost's importance shown, 'gain' (the default, as "
                        "XGBoost's scikit-learn estimators: mean loss reduction per split), 'total_gain', "
                        "'weight' (splits), 'cover' (mean hessian sum of the split nodes) or 'total_cover'; "
                        "with encrypted gradients only the label holder's folder holds them (docs/model-format.md)")
    p.add_argument("--data", default=None, help="rows file holding the row to explain")
    p.add_argument("--row", type=int, default=None, help="0-based row number in --data")
    p.add_argument("--id-column", default="id", help="name of the ID column (default 'id')")
    p.set_defaults(func=cmd_explain)
    p = sub.add_parser("split", help="split one table into per-party files by columns (vertical) "
                                     "or per-client files by rows (horizontal)")
    p.add_argument("--input", required=True, help="the table to split (CSV, Parquet, .npy/.npz)")
    p.add_argument("--parties", type=int, required=True, help="parties (by columns) or clients (by rows)")
    p.add_argument("--by", choices=["columns", "rows"], default="columns",
                   help="columns: vertical parties; rows: horizontal clients (default columns)")
    p.add_argument("--scheme", choices=["iid", "dirichlet"], default="iid",
                   help="rows: stratified equal shares, or Dirichlet label skew")
    p.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration (--scheme dirichlet)")
    p.add_argument("--id-column", default="id", help="created (row numbers) if the input lacks it")
    p.add_argument("--label-column", required=True, help="name of the label column")
    p.add_argument("--label-party", type=int, default=1, help="columns: the party that gets the label")
    p.add_argument("--test-size", type=float, default=0.0, help="also write test files with this share of rows")
    p.add_argument("--seed", type=int, default=0, help="seed of the split")
    p.add_argument("--na-values", nargs="+", default=None, metavar="TEXT",
                   help="cell texts that mean a missing value, besides 'NA' and an empty cell (e.g. ? -)")
    p.add_argument("--categorical-columns", nargs="+", default=None, metavar="COLUMN",
                   help="columns read as categories (text) even when their values are numbers")
    p.add_argument("--out", required=True, help="output folder")
    p.set_defaults(func=cmd_split)
    p = sub.add_parser("warm-up", help="compile the numba kernels now (make venv does it once after install)")
    p.set_defaults(func=cmd_warm_up)
    p = sub.add_parser("demo-data", help="write the bundled demo job (breast cancer, 2 parties)")
    p.add_argument("--out", default="build/demo", help="output folder (default build/demo)")
    p.set_defaults(func=cmd_demo_data)
    p = sub.add_parser("demo-report", help="compare the demo's federated predictions with scikit-learn")
    p.add_argument("--dir", default="build/demo", help="the demo folder (default build/demo)")
    p.set_defaults(func=cmd_demo_report)
    return parser


def main(argv=None):
    import os
    # idle kernel threads of fedforest's own processes sleep instead of spinning: ranks often
    # share cores, where spinning threads slow everyone down (set the variable to override)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # a training rank's start-up allocates objects that live to its end (modules, numba's
    # registries): no collection scans them while they pile up, and Mode.prepare_rank takes
    # them out of the collector's view before the job's first message
    gc.disable()
    args = build_parser().parse_args(argv)
    if args.func not in (cmd_train, cmd_serve, cmd_join):
        gc.enable()
    if args.func in (cmd_train, cmd_predict, cmd_serve, cmd_join):
        # a scheduler's SIGTERM (time limit, scancel) ends the rank like Ctrl-C: one line, no traceback
        signal.signal(signal.SIGTERM, _stop)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupt)
        sys.unraisablehook = _unraisable
    try:
        return args.func(args)
    except InputError as exc:
        if Stopped.requested is None:
            if _launcher_rank() == 0:      # under mpiexec every rank fails alike: one says so
                print(f"error: {exc}", file=sys.stderr)
            return 2
        stopped = Stopped.requested
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] == "fedforest" or Stopped.requested is not None:
            raise
        from .transport.runner import missing_module_line
        print(f"error: {missing_module_line(None, exc.name)}", file=sys.stderr)
        return 1
    except BaseException as exc:     # noqa: BLE001 - a stop before the job's ranks took over
        stopped = Stopped.of(exc)
        if stopped is None:
            raise
    rank = None if args.func is cmd_join else _launcher_rank()     # a party's rank comes with the job
    if args.func is cmd_train and rank == 0 and stopped.kept is None:
        stopped.kept = NOTHING_SAVED      # the job had not started
    stopped.say(rank)
    return stopped.exit_code


_DEFERRED = [False]    # a job rank is starting: a stop signal is raised once it can be reported


def _stop(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)    # one line, whatever follows
    stop = Stopped.request("SIGTERM")
    if not _DEFERRED[0]:
        raise stop


def _interrupt(signum, frame):
    """Ctrl-C: the first one stops the rank (it comes from the terminal and
    again from the rank's watcher and the launcher: one line, whatever follows).
    It is raised as :class:`Stopped`, not KeyboardInterrupt: Python ends a
    process by SIGINT when a KeyboardInterrupt left code run by ``exec`` (a
    library's generated code), even when it was caught later, and the launcher
    then reports the rank as killed."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = Stopped.request("SIGINT (Ctrl-C)")
    if not _DEFERRED[0]:
        raise stop


def _unraisable(unraisable):
    """A library could not raise a stop where the signal came (a callback from
    native code): the stop is said in its one line, not as a traceback."""
    if Stopped.requested is None and not isinstance(unraisable.exc_value, (KeyboardInterrupt, Stopped)):
        sys.__unraisablehook__(unraisable)


def _launcher_rank():
    """This process's rank as the MPI launcher or SLURM sets it (0 outside a job)."""
    import os
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0
