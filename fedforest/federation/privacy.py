"""Label privacy as one object, chosen once from the ``label_privacy``
setting (or a model's manifest) and asked, instead of comparing the name
wherever a choice depends on it: the vertical modes' growth and prediction,
a network party's policy, the run summaries.

* :data:`PLAIN`: the label holder's labels (or gradients) go to the master
  and to every party in the clear; for parties that trust each other.
* :data:`PAILLIER`: the label holder keeps the Paillier key, the labels and
  every label statistic and decides every split; the other parties sum its
  ciphertexts, and what the parties tell each other about rows travels
  sealed between them through the master (docs/protocol.md).
"""
from ..errors import InputError


class LabelPrivacy:
    """One way of keeping the labels: ``name`` (the setting's value),
    ``encrypted`` (the labels stay with their holder, which keeps the key and
    the leaf values, decides the splits and writes the predictions; the master
    is blind), ``description`` (one line for messages)."""

    def __init__(self, name, encrypted, description):
        self.name = name
        self.encrypted = encrypted
        self.description = description

    def __repr__(self):
        return f"LabelPrivacy({self.name!r})"

    def unmet(self, values):
        """Why a job's settings (a dict) cannot run with this privacy, or None."""
        if not self.encrypted:
            return None
        if values.get("split_method", "hist") != "hist":
            return f"needs split_method = 'hist' (this job sets {values.get('split_method')!r})"
        if values.get("class_weight") is not None:
            return "is not available with class_weight (encrypted statistics are integer counts)"
        return None

    def sends_labels_in_clear(self):
        """Whether the label holder's labels leave it in plaintext."""
        return not self.encrypted


PLAIN = LabelPrivacy("plain", False, "labels shared with the master and the parties")
PAILLIER = LabelPrivacy("paillier", True, "labels kept by their holder under its own Paillier key; the "
                                          "master blind")
BY_NAME = {p.name: p for p in (PLAIN, PAILLIER)}


def of(name):
    """The :class:`LabelPrivacy` named ``name`` (None: None, a mode without the setting)."""
    if name is None:
        return None
    if isinstance(name, LabelPrivacy):
        return name
    try:
        return BY_NAME[name]
    except (KeyError, TypeError):
        raise InputError("label_privacy", f"must be one of {', '.join(map(repr, BY_NAME))}, got {name!r}") from None


def of_manifest(manifest):
    """The label privacy a stored model was trained with (older models: plain)."""
    return of(manifest.get("label_privacy") or "plain")
