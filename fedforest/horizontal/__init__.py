"""Horizontal federated learning: clients share columns and hold different rows.

:mod:`.common` holds the set-up every horizontal mode shares; each algorithm
lives in its own module (:mod:`.icdta4fl`, :mod:`.baselines`,
:mod:`.federated_id3`, :mod:`.fedxgbllr`) and declares its modes there.
"""
