"""lmprep's library: text preparation, BPE tokenizer, Arrow shards, fingerprints,
a content-addressed stage runner, and a tiny model.

Nothing here imports the CLI or the concrete stages (``stages/``), and importing
the package has no side effects and does not import torch.
"""
