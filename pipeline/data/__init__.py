"""Documents before they are tokens: raw sources, cleaning, prepared part files, the prepare step.

``sources`` (streaming readers for .txt/.jsonl/.parquet and text-like files, gzip, URLs), ``cleaning`` (the
per-document rules and the seeded split), ``documents`` (prepared Arrow part files), ``prepare`` (the prepare
step as rounds of partition tasks), ``steps`` (its chain, from ``prepare.steps``), ``dedup`` and
``near_dedup`` with ``minhash`` (exact and near-duplicate removal), ``quality`` and ``language`` (the filter
steps), ``accounting`` (what was read, kept and dropped per source and step), ``chunk_counts`` (BPE training's
counting pass over prepared parts, as tasks) and ``scaffold`` (``lmprep init``). May import the engine, the
tokenizer and the config.
"""
