"""Federated streaming trees: Extremely Fast Decision Trees on the clients,
aggregated by the server each round (horizontal mode ``efdt``).

Each client reads its rows file as a stream (row order, or shuffled with the
job's seed) cut into ``rounds`` chunks.  Each round every client predicts its
next chunk with its current tree (prequential accuracy), learns it, and sends
its tree with its statistics; the server merges the statistics along
matching paths into a base tree and sends the result back:

* ``syn``: the base is the tree with the smallest total tree edit distance
  to the other trees; every client continues from the merged base;
* ``sem``: the base is the tree whose predictions on the server's proxy rows
  (``proxy_data``) disagree least with the other trees'; likewise;
* ``ind``: every client's own tree is its base (one merged tree per client);
* ``local``: no aggregation (each client's own stream only);
* ``centralized``: the clients send their chunks' rows to the server, which
  learns one tree on the pooled stream (a baseline that moves every row).

``merge = "delta"`` adds the other trees' statistics gathered since the last
broadcast (matched paths then hold the pooled stream's counts); ``"total"``
adds their totals, the literal reading of the paper's aggregation, which
counts older rows again every round.  Numeric columns are binned over edges
the server agrees once from the clients' quantile sketches (of each client's
whole file, or of the first ``edge_rows`` rows of its stream).  See
docs/efdt.md.

This module declares the mode; the implementation is in :mod:`.roles`
(imported when the mode runs).
"""
import numbers

from ...constraints import MAX_DEPTH, Interval, Options
from ...data.tasks import CLASSIFICATION
from ...errors import InputError
from ...federation.mode import HORIZONTAL, Mode, Param

STRATEGIES = ("syn", "sem", "ind", "local", "centralized")

PARAMS = (
    Param("strategy", "syn", (Options(*STRATEGIES),),
          "'syn' (base tree: least tree edit distance), 'sem' (least disagreement on proxy_data), 'ind' "
          "(one merged tree per client), or the baselines 'local' and 'centralized'", text=True),
    Param("merge", "delta", (Options("delta", "total"),),
          "statistics merged from the other trees: those gathered since the last broadcast ('delta') or "
          "their totals ('total', the paper's literal aggregation)", text=True),
    Param("rounds", 200, (Interval(int, 1, 100_000),), "communication rounds; each client's stream is cut into as many chunks"),
    Param("grace_period", 200, (Interval(int, 1),), "rows a leaf sees between split attempts"),
    Param("delta", 1e-7, (Interval(numbers.Real, 0, 1, closed="neither"),),
          "1 - confidence of the Hoeffding bound"),
    Param("tau", 0.05, (Interval(numbers.Real, 0, 1),), "tie threshold of the Hoeffding bound"),
    Param("min_samples_reevaluate", 20, (Interval(int, 1),),
          "rows an inner node sees between re-evaluations of its split"),
    Param("split_criterion", "info_gain", (Options("info_gain", "gini"),), "split merit", text=True),
    Param("leaf_prediction", "nba", (Options("mc", "nb", "nba"),),
          "'mc' (majority class), 'nb' (naive Bayes) or 'nba' (the better of the two at each leaf)", text=True),
    Param("binary_split", False, (bool,),
          "categorical splits as 'value vs the rest' instead of one branch per value (numeric splits are "
          "always binary)"),
    Param("max_depth", None, (None, Interval(int, 1, MAX_DEPTH)), "depth limit of the trees (None: no limit)"),
    Param("multiway_only", False, (bool,),
          "with binary_split false, a categorical column offers only its one-branch-per-value split (default: "
          "that split and every 'value vs the rest' split, the best wins, as river)"),
    Param("new_leaf_seen", "zero", (Options("zero", "inherited"),),
          "row count a new leaf starts with, the n of its Hoeffding bound: 0 ('zero', the bound rests on the "
          "rows the leaf has learnt) or the weight it inherits from its parent ('inherited', as river and MOA: "
          "a leaf made late splits on noise soon after, its bound shrunk by rows it never scored)",
          text=True),
    Param("merit_range", "node", (Options("node", "job"),),
          "classes counted in the range R of the information-gain bound, log2(classes): those present at the "
          "node ('node', as river) or every class of the job ('job')", text=True),
    Param("max_share_to_split", 0.99, (Interval(numbers.Real, 0, 1, closed="right"),),
          "a leaf where one class holds more than this share of the rows makes no split attempt (as river; "
          "1: always attempt)"),
    Param("resplit_same_column", False, (bool,),
          "re-evaluation may replace a split by a better test on the same column (another value, threshold or "
          "kind; the subtree is replaced by fresh leaves); default: only another column replaces a split"),
    Param("n_bins", 32, (Interval(int, 2, 1024),), "bins of a numeric column (edges agreed once per job)"),
    Param("edge_rows", None, (None, Interval(int, 1)),
          "rows at the head of each client's stream (after shuffle) whose quantiles set the bin edges "
          "(None: every row of the client's file, a look-ahead over the stream)"),
    Param("shuffle", False, (bool,), "shuffle each client's rows (seed: random_state + rank) before streaming"),
    Param("random_state", None, (None, Interval(int, 0)),
          "seed of the shuffles (None: a fresh seed, recorded in the summary)"),
    Param("proxy_data", None, (None, str), "rows file held by the server ('sem': the proxy set)", path=True),
)


def _check(cfg):
    if cfg.strategy == "sem" and not cfg.proxy_data:
        raise InputError("proxy_data", "must name the server's proxy rows file when strategy is 'sem', got None")


MODE = Mode(
    name="efdt", family=HORIZONTAL, table="efdt",
    summary="federated streaming trees: EFDT clients, statistics merged along matching paths (Syn/Sem/Ind), "
            "with local and centralized streaming baselines",
    params=PARAMS, impl="fedforest.horizontal.efdt.roles", tasks=(CLASSIFICATION,), check=_check,
    roles=("server_train", "client_train", "predict_proba", "explain"))
MODES = (MODE,)
