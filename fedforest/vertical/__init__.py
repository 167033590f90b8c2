"""The vertical family: parties share rows (matched by ID) and hold
different columns; one party holds the label.  Its algorithms are packages
that import neither each other, on a shared core:

* :mod:`.forest`: the Federated Forest (``--mode vertical``);
* :mod:`.boost`: gradient boosting (``--mode vertical_boost``);
* the shared core: :mod:`.job_master` and :mod:`.job_party` (a job's opening
  steps, the parties' growth loop, prediction), :mod:`.tree_grower` (the
  master's level-wise grower), :mod:`.party_splitter` (a party's side of the
  growth), :mod:`.messages`, :mod:`.model_files` (the ``fedforest-vertical``
  format), :mod:`.model_output` (what an algorithm's model output provides),
  :mod:`.estimator_base`, :mod:`.explain`, :mod:`.common`, :mod:`.declare`
  (the settings the modes share) and :mod:`.encrypted_labels`;
* :mod:`.paillier`: the encrypted modes' label holder and relay, generic over
  both algorithms, and the payloads the parties seal for each other.

docs/architecture.md lists where a new vertical algorithm goes.
"""
