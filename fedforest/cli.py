"""Command line: ``python -m fedforest <command>``.

MPI commands (start with ``mpiexec -n K+1``): ``train``, ``predict`` (vertical).
Local commands: ``predict`` (horizontal models), ``explain``, ``evaluate``,
``split``, ``demo-data``, ``demo-report``.
"""
import argparse
import sys

from .config import ALL_KEYS, parse_flag_value, resolve
from .errors import InputError

BOOL_KEYS = [k for k, v in ALL_KEYS.items() if isinstance(v, bool)]
# values that are names or paths: never read as numbers (a column may be called "7")
TEXT_KEYS = ("task", "id_column", "label_column", "model_dir", "output", "summary_json",
             "label_privacy", "predict_method", "criterion", "split_method", "feature_sampling",
             "mode", "tree_type", "filter", "filter_metric")


def _add_job_flags(p):
    p.add_argument("--config", help="TOML job file ([job] and [forest] tables)")
    for key in ALL_KEYS:
        flag = "--" + key.replace("_", "-")
        if key in ("data", "test_data"):
            p.add_argument(flag, nargs="+", default=argparse.SUPPRESS, metavar="FILE",
                           help=f"{'test ' if key == 'test_data' else ''}data file of each party, in rank order")
        elif key in TEXT_KEYS:
            p.add_argument(flag, type=str, default=argparse.SUPPRESS, metavar="VALUE")
        elif key in BOOL_KEYS:
            p.add_argument(flag, nargs="?", const=True, type=parse_flag_value,
                           default=argparse.SUPPRESS, metavar="BOOL")
        else:
            p.add_argument(flag, type=parse_flag_value, default=argparse.SUPPRESS, metavar="VALUE")


def _flags(args):
    return {k: v for k, v in vars(args).items() if k in ALL_KEYS}


def _mpi_command(args, master_fn, party_fn):
    from .transport.base import Comm
    from .transport.mpi import world_transport
    from .transport.runner import run_master, run_rank
    comm = Comm(world_transport())
    flags = _flags(args)
    state = {"verbose": bool(flags.get("verbose", False))}

    def load():
        cfg = resolve(args.config, flags)
        state["verbose"] = bool(cfg.verbose)
        if comm.rank != 0:
            cfg.values["progress"] = cfg.progress = False
            cfg.values["quiet"] = cfg.quiet = True
        return cfg

    if comm.rank == 0:
        run_master(comm, lambda c: master_fn(c, load()), verbose=lambda: state["verbose"])
    else:
        run_rank(comm, None, lambda c: party_fn(c, load()))
    return 0


def _by_mode(name, vertical_fn):
    """The master or party function of the configured mode."""
    def run(comm, cfg):
        if cfg.mode == "vertical":
            return vertical_fn(comm, cfg)
        from .horizontal import roles
        return roles(cfg.mode)[0 if name == "server" else 1](comm, cfg)
    return run


def cmd_train(args):
    from .vertical import master_train, party_train
    return _mpi_command(args, _by_mode("server", master_train), _by_mode("client", party_train))


def cmd_predict(args):
    cfg = resolve(args.config, _flags(args))
    if cfg.mode != "vertical":
        return _predict_horizontal(cfg)
    from .vertical import master_predict, party_predict
    return _mpi_command(args, master_predict, party_predict)


def _predict_horizontal(cfg):
    """A horizontal model predicts locally, one rows file at a time (no MPI job)."""
    from .horizontal import predict_file
    if not isinstance(cfg.data, list) or len(cfg.data) != 1:
        raise InputError("data", "horizontal prediction reads one rows file (--data FILE)")
    out = predict_file(cfg.model_dir, cfg.data[0], cfg.output, id_column=cfg.id_column)
    if not cfg.quiet:
        note = f"; {out['n_unseen']} values of categories not seen in training" if out["n_unseen"] else ""
        print(f"predicted {out['n_rows']} rows; predictions written to {out['path']}{note}")
    return 0


def cmd_explain(args):
    from .horizontal import explain
    print(explain(args.model_dir, args.data, args.row, args.id_column))
    return 0


def cmd_evaluate(args):
    from .evaluate import evaluate_files, format_metrics
    metrics = evaluate_files(args.predictions, args.truth, args.id_column, args.label_column, args.task)
    print(format_metrics(metrics))
    return 0


def cmd_split(args):
    from .data.split import split_file, split_rows_file
    if args.by == "rows":
        paths = split_rows_file(args.input, args.parties, args.label_column, args.out, args.scheme,
                                args.alpha, args.test_size, args.seed)
        for p in paths:
            print(p)
        return 0
    paths = split_file(args.input, args.parties, args.id_column, args.label_column, args.out,
                       label_party=args.label_party, test_size=args.test_size, seed=args.seed)
    for p in paths:
        print(p)
    return 0


def cmd_demo_data(args):
    from .demo import make_demo
    print(make_demo(args.out))
    return 0


def cmd_demo_report(args):
    from .demo import report
    print(report(args.dir))
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="python -m fedforest", description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", allow_abbrev=False,
                       help="train a vertical Federated Forest or a horizontal model (--mode; under mpiexec)")
    _add_job_flags(p)
    p.set_defaults(func=cmd_train)
    p = sub.add_parser("predict", allow_abbrev=False,
                       help="predict with a trained model (vertical: under mpiexec; horizontal: locally)")
    _add_job_flags(p)
    p.set_defaults(func=cmd_predict)
    p = sub.add_parser("evaluate", help="metrics of a predictions file against true labels")
    p.add_argument("--predictions", required=True)
    p.add_argument("--truth", required=True, help="file with the ID and label columns")
    p.add_argument("--id-column", default="id")
    p.add_argument("--label-column", required=True)
    p.add_argument("--task", choices=["classification", "regression"], default=None,
                   help="default: guessed from the predictions file (proba_ columns)")
    p.set_defaults(func=cmd_evaluate)
    p = sub.add_parser("explain", help="print a horizontal model's tree as rules (and the rule of one row)")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--data", default=None, help="rows file holding the row to explain")
    p.add_argument("--row", type=int, default=None, help="0-based row number in --data")
    p.add_argument("--id-column", default="id")
    p.set_defaults(func=cmd_explain)
    p = sub.add_parser("split", help="split one table into per-party files by columns (vertical) "
                                     "or per-client files by rows (horizontal)")
    p.add_argument("--input", required=True)
    p.add_argument("--parties", type=int, required=True, help="parties (by columns) or clients (by rows)")
    p.add_argument("--by", choices=["columns", "rows"], default="columns")
    p.add_argument("--scheme", choices=["iid", "dirichlet"], default="iid",
                   help="rows: stratified equal shares, or Dirichlet label skew")
    p.add_argument("--alpha", type=float, default=0.5, help="Dirichlet concentration (--scheme dirichlet)")
    p.add_argument("--id-column", default="id", help="created (row numbers) if the input lacks it")
    p.add_argument("--label-column", required=True)
    p.add_argument("--label-party", type=int, default=1)
    p.add_argument("--test-size", type=float, default=0.0, help="also write test files with this share of rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_split)
    p = sub.add_parser("demo-data", help="write the bundled demo job (breast cancer, 2 parties)")
    p.add_argument("--out", default="build/demo")
    p.set_defaults(func=cmd_demo_data)
    p = sub.add_parser("demo-report", help="compare the demo's federated predictions with scikit-learn")
    p.add_argument("--dir", default="build/demo")
    p.set_defaults(func=cmd_demo_report)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
