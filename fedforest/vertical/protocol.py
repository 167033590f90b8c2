"""Names of the vertical job's messages (the ``"op"`` of each message dict),
in the order a job sends them; docs/protocol.md describes each one.  The ID
alignment and tree growth messages are named beside their code
(:mod:`fedforest.data.alignment`, :mod:`fedforest.vertical.messages`)."""

LOAD = "load"                      # master -> party: read your table, describe it
CHECK_DIR = "check_dir"            # master -> party: check your model folder for this job
SEND_LABELS = "send_labels"        # master -> label holder: send the aligned labels (plain mode)
ENCRYPT_LABELS = "encrypt_labels"  # master -> label holder: encrypt the labels under this key
SETUP = "setup"                    # master -> party: settings, labels or ciphertexts, start tree
BINS = "bins"                      # master -> party (Paillier): report your bin counts
DONE = "done"                      # master -> party: the job is over
READY = "ready"                    # master -> party (predict): kernels loaded?
LEAF_SETS = "leaf_sets"            # master -> party: your leaf row sets of every tree (one round)
CLASSICAL = "classical"            # master -> party: node-by-node prediction starts
ROUTE = "route"                    # master -> owner: route these rows at this node
END_CLASSICAL = "end_classical"    # master -> party: node-by-node prediction ends
RESULT = "result"                  # master -> result party: write these predictions
PATH = "path"                      # master -> party (explain_row): your splits on the row's paths
