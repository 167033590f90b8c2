"""Horizontal federated learning: clients share columns and hold different rows.

:mod:`.common` holds the set-up every horizontal mode shares and
:mod:`.declare` the declarations they share; each algorithm is a package of
its own (:mod:`.icdta4fl`, :mod:`.baselines`, :mod:`.federated_id3`,
:mod:`.fedxgbllr`, :mod:`.efdt`, :mod:`.fedga`) that declares its modes in
its ``__init__`` (cheap to import) and implements them in its ``roles``
module (fedga: also ``baselines``), imported when a mode runs.
"""
