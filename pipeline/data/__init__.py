"""Documents before they are tokens: raw sources, cleaning, prepared part files, the prepare step.

``sources`` (streaming readers for .txt/.jsonl/.parquet, gzip, URLs), ``cleaning`` (the per-document rules
and the seeded split), ``documents`` (prepared Arrow part files), ``prepare`` (the prepare step as partition
tasks), ``chunk_counts`` (BPE training's counting pass over prepared parts, as tasks) and ``scaffold``
(``lmprep init``). May import the engine, the tokenizer and the config.
"""
