"""Horizontal federated learning: clients share columns and hold different rows.

Shared modules: :mod:`.setup` (the start-up every horizontal mode shares),
:mod:`.encoding` (the clients' tables and the job-wide row encoding),
:mod:`.message_checks` (a client's checks of the server's messages),
:mod:`.client_tree` (the client-tree job of the tree modes),
:mod:`.model_files` (model files, local prediction and explanation),
:mod:`.binned_id3` (the ID3 job on binned numeric columns) and
:mod:`.declare` (the declarations the modes share).  Each algorithm is a
package of its own (:mod:`.icdta4fl`, :mod:`.baselines`, :mod:`.federated_id3`,
:mod:`.fedxgbllr`, :mod:`.efdt`, :mod:`.fedga`) that declares its modes in
its ``__init__`` (cheap to import) and implements them in its ``roles``
module (fedga: also ``baselines``), imported when a mode runs; an algorithm
never imports another one.
"""
