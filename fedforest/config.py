"""Job configuration: TOML file, every key also a command-line flag.

Precedence: built-in defaults < TOML file < flags.  The TOML file has two
tables, ``[job]`` (run settings) and ``[forest]`` (model parameters); a flag
is the key with dashes, e.g. ``max_depth`` -> ``--max-depth``.
"""
import difflib
import os
import sys

from .errors import InputError
from .params import ForestParams

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

JOB_KEYS = {
    "mode": "vertical",           # "vertical" or a horizontal algorithm (see docs/horizontal.md)
    "task": None,                 # "classification" or "regression" (required)
    "n_parties": None,            # number of parties = MPI ranks - 1 (default: len(data))
    "data": None,                 # list of data files, one per party, in rank order
    "id_column": "id",
    "label_column": None,         # name of the label column (held by exactly one party)
    "model_dir": "fedforest-model",
    "label_privacy": "plain",     # "plain" or "paillier" (labels encrypted for all but their holder)
    "key_length": 2048,           # Paillier key bits: 2048 or 3072
    "insecure_key": False,        # allow shorter Paillier keys (tests only)
    "slot_bits": None,            # bits per encrypted statistic (default: just enough for the rows)
    "encrypt_workers": 1,         # processes the label holder uses to encrypt the labels
    "master_full_model": False,   # master also stores features and thresholds of every split
    "resume": False,
    "overwrite": False,
    "output": "predictions.csv",  # prediction file, written by the result party
    "result_party": 1,            # party that receives predictions and writes them with its IDs
    "predict_method": "oneshot",  # "oneshot" (one round) or "classical" (node by node)
    "progress": True,
    "verbose": False,
    "quiet": False,               # no progress or summary lines
    "summary_json": None,         # the master writes its run summary (timings, rounds, bytes) here
    "reply_timeout": None,        # seconds the master waits for one party message (None: no limit)
    # horizontal modes
    "tree_type": "cart",          # "cart" (numeric columns) or "id3" (categorical)
    "filter": "mean",             # ICDTA4FL tree filter: "mean", "median", "percentile" or "none"
    "filter_percentile": 75.0,    # percentile of the "percentile" filter
    "filter_metric": "accuracy",  # score the filter compares: "accuracy" or "f1" (macro)
    "max_rules": 10000,           # cap on merged rules after each merge step
    "global_max_depth": None,     # depth of the ICDTA4FL global tree (default: the local trees' depth)
    "global_max_nodes": 2000,     # node budget of the ICDTA4FL global tree (grown breadth first)
    "test_data": None,            # optional test file per client (horizontal modes)
    # FedXGBllr
    "xgb_trees": 500,             # XGBoost trees over all clients (each client grows xgb_trees // K)
    "xgb_eta": 0.1,               # XGBoost learning rate of the client ensembles
    "rounds": 10,                 # FedAvg rounds of the CNN
    "local_epochs": 100,          # CNN epochs per client per round
    "batch_size": 64,             # CNN mini-batch rows
    "cnn_channels": 64,           # CNN channels (learning-rate strategies)
    "cnn_lr": 0.001,              # Adam learning rate of the CNN
}
FOREST_KEYS = {k: getattr(ForestParams(), k) for k in ForestParams.names()}
SECTIONS = {"job": JOB_KEYS, "forest": FOREST_KEYS}
ALL_KEYS = {**JOB_KEYS, **FOREST_KEYS}


def _unknown(key, where):
    for section, keys in SECTIONS.items():
        if key in keys:
            return InputError(where, f"key {key!r} belongs in the [{section}] table")
    near = difflib.get_close_matches(key, list(ALL_KEYS) + list(SECTIONS), n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return InputError(where, f"unknown key {key!r}{hint}")


def load_toml(path):
    if not os.path.isfile(path):
        raise InputError("config", f"file {path!r} does not exist")
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InputError("config", f"{path!r} is not valid TOML: {exc}") from None
    flat = {}
    for key, value in doc.items():
        if key in SECTIONS and isinstance(value, dict):
            for k, v in value.items():
                if k not in SECTIONS[key]:
                    raise _unknown(k, f"config [{key}]")
                flat[k] = v
        elif key in ALL_KEYS:
            flat[key] = value
        else:
            raise _unknown(key, "config")
    base = os.path.dirname(os.path.abspath(path))
    for k in ("data", "test_data", "model_dir", "output", "summary_json"):
        if k in flat:
            flat[k] = _relative_to(flat[k], base)
    return flat


def _relative_to(value, base):
    """Paths in a config file are relative to the file's folder."""
    if isinstance(value, list):
        return [_relative_to(v, base) for v in value]
    if isinstance(value, str) and value and not os.path.isabs(value):
        return os.path.normpath(os.path.join(base, value))
    return value


def parse_flag_value(text):
    """A flag value as TOML would read it: int, float, true/false, none, or text."""
    low = text.lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


class JobConfig:
    """Resolved configuration of one command."""

    def __init__(self, values):
        self.values = dict(values)
        for k, v in self.values.items():
            setattr(self, k, v)

    def forest_params(self):
        return ForestParams(**{k: self.values[k] for k in FOREST_KEYS})

    def check_job(self, command):
        if command == "train":
            if self.task not in ("classification", "regression"):
                raise InputError("task", f"must be 'classification' or 'regression', got {self.task!r}")
            if not self.label_column:
                raise InputError("label_column", "is required for training")
        if not isinstance(self.data, list) or not self.data:
            raise InputError("data", "must list one data file per party")
        if self.n_parties is None:
            self.n_parties = self.values["n_parties"] = len(self.data)
        if not isinstance(self.n_parties, int) or self.n_parties < 1:
            raise InputError("n_parties", f"must be an int >= 1, got {self.n_parties!r}")
        if len(self.data) != self.n_parties:
            raise InputError("data", f"lists {len(self.data)} files but n_parties is {self.n_parties}")
        if self.label_privacy not in ("plain", "paillier"):
            raise InputError("label_privacy", f"must be 'plain' or 'paillier', got {self.label_privacy!r}")
        for key, low in (("key_length", 256), ("encrypt_workers", 1), ("slot_bits", 1)):
            v = self.values[key]
            if v is None and key == "slot_bits":
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InputError(key, f"must be an int >= {low}, got {v!r}")
        if self.predict_method not in ("oneshot", "classical"):
            raise InputError("predict_method", f"must be 'oneshot' or 'classical', got {self.predict_method!r}")
        t = self.reply_timeout
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0):
            raise InputError("reply_timeout", f"must be a number of seconds > 0 or none, got {t!r}")
        for key, default in JOB_KEYS.items():
            if isinstance(default, bool) and not isinstance(self.values[key], bool):
                raise InputError(key, f"must be true or false, got {self.values[key]!r}")
        if not isinstance(self.result_party, int) or not 1 <= self.result_party <= self.n_parties:
            raise InputError("result_party", f"must be a party rank in 1..{self.n_parties}, got {self.result_party!r}")


def resolve(config_path, flag_values):
    """Defaults < TOML < flags (``flag_values`` holds only flags the user gave)."""
    values = dict(ALL_KEYS)
    if config_path:
        values.update(load_toml(config_path))
    for k, v in flag_values.items():
        if k not in ALL_KEYS:
            raise _unknown(k, "flags")
        values[k] = v
    return JobConfig(values)
