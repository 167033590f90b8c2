"""Job configuration: a TOML file with one table per concern, every setting also a flag.

* ``[job]``: the settings every mode shares (mode, task, data files, columns,
  model folder, output, logging);
* one table per mode for that mode's settings: ``[forest]`` for the vertical
  Federated Forest, ``[icdta4fl]``, ``[fedxgbllr]``, ... (see docs/config.md).

Precedence: built-in defaults < TOML file < flags.  A flag is the setting's
name with dashes (``max_depth`` -> ``--max-depth``).  A setting the chosen
mode does not use is an error naming the mode that owns it, and so is a
table of another mode; an unknown mode or setting is an error with a
suggestion.  Every value is checked against its declared constraints before
any work starts.
"""
import difflib
import numbers
import os
import sys

from ..constraints import Interval, Options, Paths, Texts, check
from ..data.tasks import CLASSIFICATION, REGRESSION
from ..errors import InputError
from . import privacy as label_privacy
from .mode import HORIZONTAL, VERTICAL, Param
from .registry import REGISTRY

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

JOB_TABLE = "job"
DEFAULT_MODE = "vertical"

JOB_PARAMS = (
    Param("mode", DEFAULT_MODE, (str,), "the algorithm to run (see the list of modes below)", text=True),
    Param("task", None, (None, Options(CLASSIFICATION, REGRESSION)),
          "'classification' or 'regression' (required for training)", text=True),
    Param("n_parties", None, (None, Interval(int, 1)),
          "number of parties/clients = MPI ranks - 1 (default: the number of data files)"),
    Param("data", None, (None, Paths()), "data file of each party/client, in rank order", path=True),
    Param("test_data", None, (None, Paths()),
          "optional test file of each client, in rank order (horizontal modes)", path=True,
          families=(HORIZONTAL,)),
    Param("id_column", "id", (str,), "name of the ID column", text=True),
    Param("label_column", None, (None, str), "name of the label column (required for training)", text=True),
    Param("na_values", None, (None, Texts()),
          "cell texts that mean a missing value in every table of the job, besides 'NA' and an empty "
          "cell (e.g. ['?', '-'])", text=True),
    Param("categorical_columns", None, (None, Texts()),
          "feature columns read as categories (text) even when their values are numbers", text=True),
    Param("model_dir", "fedforest-model", (str,), "folder of the model files", path=True),
    Param("overwrite", False, (bool,), "replace a model already in model_dir"),
    Param("output", "predictions.csv", (str,), "predictions file written by predict", path=True),
    Param("summary_json", None, (None, str), "the server writes its run summary (JSON) here", path=True),
    Param("reply_timeout", None, (None, Interval(numbers.Real, 0, closed="neither")),
          "seconds the server waits for one message before naming the silent rank (none: no limit)"),
    Param("progress", None, (None, bool),
          "show progress bars (none: only when the output is a terminal, so batch logs stay clean)"),
    Param("verbose", False, (bool,), "print remote tracebacks with errors"),
    Param("quiet", False, (bool,), "no progress bars or summary lines"),
    Param("max_key_length", 4096, (Interval(int, 2048, 16_384),),
          "the longest Paillier key (bits) this party takes part with: it refuses, before any work, a "
          "job whose key_length is above it (key generation and decryption time grow with the cube "
          "of the length); a party's own setting, never the master's", families=(VERTICAL,)),
    Param("paillier_randomness", "short", (Options("short", "full"),),
          "how the label holder makes the randomness of its Paillier encryptions with its own key: "
          "'short': h_s^r mod n^2 for a fixed n-th residue h_s and a fresh uniform r of twice the key's "
          "security strength (224 bits for 2048-bit keys, 256 for 3072), six to seven times cheaper per "
          "factor than 'full' (docs/protocol.md); 'full': uniform factors (r^n mod n^2 for a uniform r); the "
          "label holder's own setting, never the master's", text=True, families=(VERTICAL,)),
)
JOB_INDEX = {p.name: p for p in JOB_PARAMS}


def _owner_text(key, registry):
    owners = registry.owners(key)
    if not owners:
        return None
    return ", ".join(f"mode {m.name!r} (table [{m.table}])" for m in owners)


def _unknown(key, where, mode, registry):
    """The error for a key that is not a setting of ``mode`` where it was given
    (``where``: a table name, or "options" for flags and keyword options)."""
    label = "options" if where == "options" else f"config [{where}]" if where else "config"
    if where != JOB_TABLE and key in JOB_INDEX:
        if where == "options":
            return None
        return InputError(label, f"key {key!r} belongs in the [{JOB_TABLE}] table")
    if mode.param(key) is not None:
        return InputError(label, f"key {key!r} belongs in the [{mode.table}] table "
                                 f"(a setting of mode {mode.name!r})")
    owners = _owner_text(key, registry)
    if owners:
        return InputError(label, f"key {key!r} is a setting of {owners}; mode {mode.name!r} does not use it")
    known = list(JOB_INDEX) + mode.keys
    near = difflib.get_close_matches(key, known, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return InputError(label, f"unknown key {key!r}{hint}")


def load_toml(path):
    """The tables of a TOML job file, ``{table: {key: value}}`` (paths made
    absolute, relative to the file's folder)."""
    if not os.path.isfile(path):
        raise InputError("config", f"file {path!r} does not exist")
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise InputError("config", f"{path!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise InputError("config", f"{path!r} is not UTF-8 text (a TOML file is)") from None
    except OSError as exc:
        raise InputError("config", f"cannot read {path!r}: {exc.strerror}") from None
    doc["__base__"] = os.path.dirname(os.path.abspath(path))
    return doc


def relative_to(value, base):
    """Paths in a config file are relative to the file's folder."""
    if isinstance(value, list):
        return [relative_to(v, base) for v in value]
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
    """Resolved configuration of one command: every [job] setting and every
    setting of the chosen mode, as attributes and in ``values``."""

    def __init__(self, mode, values, given=()):
        self.spec = mode
        self.values = dict(values)
        self.given = set(given)        # settings the user set (file or flags)
        for k, v in self.values.items():
            setattr(self, k, v)

    def set(self, key, value):
        self.values[key] = value
        setattr(self, key, value)

    @property
    def privacy(self):
        """The job's :class:`~fedforest.federation.privacy.LabelPrivacy` (None
        for a mode without ``label_privacy``): resolved here, once, from the setting."""
        return label_privacy.of(self.values.get("label_privacy"))

    def check_parties(self, who="party"):
        """``data`` lists one file per party/client and agrees with ``n_parties``."""
        if not isinstance(self.data, list) or not self.data:
            raise InputError("data", f"must list one data file per {who}")
        if self.n_parties is None:
            self.set("n_parties", len(self.data))
        if len(self.data) != self.n_parties:
            raise InputError("data", f"lists {len(self.data)} files but n_parties is {self.n_parties}")

    def check_world(self, size, who="party"):
        """The job was started with one rank per party/client (``who``) plus the
        master (``size`` ranks in all).  Where ``data`` alone set the number of
        parties, the advice never drops one: a launch with more parties than
        data files shows both ways (another file, or fewer ranks)."""
        n, launched = self.n_parties, size - 1

        def count(k, what):
            return f"{k} {what}" if k == 1 else f"{k} {what[:-1]}ies" if what.endswith("y") else f"{k} {what}s"
        if launched == n:
            return
        parties = "parties" if who == "party" else "clients"
        if "n_parties" in self.given or not isinstance(self.data, list) or launched < n:
            raise InputError("n_parties", f"the job names {count(n, who)} but runs {size} ranks; start it "
                                          f"with mpiexec -n {n + 1}")
        raise InputError("n_parties", f"the data list has {count(n, 'file')}, but the job was started with "
                                      f"{size} ranks, that is {count(launched, who)}: add a data file for each "
                                      f"of the {launched} {parties} (in rank order), or, if only "
                                      f"{count(n, who)} {'is' if n == 1 else 'are'} meant, start it with "
                                      f"mpiexec -n {n + 1}")

    def check_train(self):
        """Settings every training job needs."""
        if self.task is None:
            raise InputError("task", "must be 'classification' or 'regression', got None")
        if self.task not in self.spec.tasks:
            raise InputError("task", f"mode {self.spec.name!r} supports {' and '.join(self.spec.tasks)} "
                                     f"only, got {self.task!r}")
        if not self.label_column:
            raise InputError("label_column", "is required for training")


def job_setting(config_path, flag_values, key):
    """One [job] setting as the user gave it (flag, then TOML file; paths made
    absolute), or its default: read before the mode is known."""
    if key in flag_values:
        return flag_values[key]
    doc = load_toml(config_path) if config_path else {}
    job = doc.get(JOB_TABLE, {})
    if isinstance(job, dict) and key in job:
        return relative_to(job[key], doc["__base__"]) if JOB_INDEX[key].path else job[key]
    return JOB_INDEX[key].default


def resolve(config_path, flag_values, registry=REGISTRY, skip_tables=()):
    """Defaults < TOML < flags (``flag_values`` holds only flags the user gave).
    Returns a :class:`JobConfig`; raises InputError on any bad setting.
    ``skip_tables``: tables another part reads (``[network]``, ``[policy]``)."""
    doc = load_toml(config_path) if config_path else {}
    base = doc.pop("__base__", None)
    for table in skip_tables:
        doc.pop(table, None)
    job_table = doc.get(JOB_TABLE, {})
    mode_name = flag_values.get("mode", job_table.get("mode", DEFAULT_MODE) if isinstance(job_table, dict)
                                else DEFAULT_MODE)
    if not isinstance(mode_name, str):
        raise InputError("mode", f"must be a mode name, got {mode_name!r}")
    mode = registry.get(mode_name)
    for table, keys in doc.items():
        if not isinstance(keys, dict):   # a key outside any table
            raise _unknown(table, None, mode, registry)
    values = {p.name: p.default for p in JOB_PARAMS}
    values.update({p.name: p.default for p in mode.params})
    given = set()
    for table, keys in doc.items():
        if table == JOB_TABLE:
            index = JOB_INDEX
        elif table == mode.table:
            index = mode._param_index
        else:
            other = registry.by_table(table)
            if other is not None:
                raise InputError(f"config [{table}]", f"holds settings of mode {other.name!r}, but this "
                                                      f"job runs mode {mode.name!r}, whose settings go in "
                                                      f"[{mode.table}]: rename the table [{mode.table}] "
                                                      f"(or run mode {other.name!r})")
            tables = [JOB_TABLE] + [m.table for m in registry.modes()]
            near = difflib.get_close_matches(table, tables, n=1)
            hint = f"; did you mean [{near[0]}]?" if near else ""
            raise InputError("config", f"unknown table [{table}]{hint} (tables: [{JOB_TABLE}] and the "
                                       "mode's table)")
        for k, v in keys.items():
            p = index.get(k)
            if p is None:
                raise _unknown(k, table, mode, registry)
            values[k] = relative_to(v, base) if p.path else v
            given.add(k)
    for k, v in flag_values.items():
        if k not in JOB_INDEX and mode.param(k) is None:
            raise _unknown(k, "options", mode, registry)
        values[k] = v
        given.add(k)
    for p in JOB_PARAMS:
        if p.name in given and mode.family not in p.families:
            raise InputError(p.name, f"is a setting of {' and '.join(p.families)} modes; mode "
                                     f"{mode.name!r} does not use it")
    for p in JOB_PARAMS + tuple(mode.params):
        check(p.name, values[p.name], p.constraints)
    if values["progress"] is None:
        values["progress"] = sys.stderr.isatty()
    cfg = JobConfig(mode, values, given)
    if mode.check is not None:
        mode.check(cfg)
    return cfg
