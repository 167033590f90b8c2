"""The model output of a vertical algorithm: how every row's leaf in each
tree becomes the model's output, the way scikit-learn's forest averages its
trees' ``predict_proba`` and gradient boosting sums its stages.  Each
algorithm declares one (:class:`~fedforest.vertical.forest.output.ForestOutput`,
:class:`~fedforest.vertical.boost.output.BoostOutput`); the shared
one-round prediction (:mod:`.job_master`, :mod:`.job_party`) calls it
where the leaf values are: the master (plain labels) or the label holder
(encrypted labels)."""
import abc


class ModelOutput(abc.ABC):
    """What the shared prediction needs of an algorithm's model."""

    @abc.abstractmethod
    def values(self, trees, row_leaves, n_rows, manifest):
        """The ``(n_rows, k)`` output of every row (class probabilities, or
        values in the first column) from its leaf (node id) in each of
        ``trees`` (``row_leaves[i]``: an array of ``n_rows`` leaves of tree
        ``i``), with the model's ``manifest``."""


def prediction_roles(output):
    """A mode's ``server_predict`` and ``client_predict`` roles: the shared
    prediction (:func:`~.job_master.master_predict`,
    :func:`~.job_party.party_predict`) with the algorithm's ``output``."""
    from .job_master import master_predict
    from .job_party import party_predict

    def server_predict(comm, cfg):
        return master_predict(comm, cfg, output)

    def client_predict(comm, cfg):
        return party_predict(comm, cfg, output)
    return server_predict, client_predict
