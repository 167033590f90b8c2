"""The Paillier label channel of the vertical algorithms (``label_privacy =
"paillier"``), with the key at the label holder.

* :mod:`.holder`: the label holder (the active party).  It generates the key
  pair, encrypts its own rows with its own randomness, scores its own columns
  in plaintext, decrypts the other parties' per-bin sums, chooses every
  split and keeps the node statistics and leaf values;
* :mod:`.relay`: the master's grower.  It draws the samples and feature
  subsets, asks for sums and partitions, relays ciphertexts to the label
  holder and keeps the tree structure; it holds no key and sees no label
  statistic;
* the parties without labels are the splitters of
  :mod:`fedforest.vertical.encrypted_labels` (labels) and
  :mod:`fedforest.vertical.boost.encrypted_gradients` (gradients).

See docs/protocol.md, "Encrypted labels" and "What each rank learns".
"""
