"""Documents before they are tokens: raw sources, cleaning, prepared part files, the prepare step.

``record`` (the document a step sees, its answers, the two kinds of step), ``registry`` (every step and
reader), ``reading`` and ``readers`` (the files a task reads; txt, jsonl, parquet and a user's reader),
``custom`` and ``user_code`` (a user's own step), ``sources`` (globs, the task plan, reading partitions),
``file_table`` (the raw files as the driver holds them, in columns),
``cleaning`` (the per-document rules and the seeded split), ``documents`` (prepared Arrow part files),
``prepare`` (the prepare step as rounds of partition tasks), ``resume`` (what a killed prepare had finished),
``steps`` (its chain, from ``prepare.steps``), ``dedup`` and ``near_dedup`` with ``minhash`` (exact and near-
duplicate removal), ``quality`` and ``language`` (the filter steps), ``accounting`` (what was read, kept and
dropped per source and step), ``chunk_counts`` (BPE training's counting pass over prepared parts, as tasks),
``scaffold`` (``lmprep init``) and ``web`` (WARC and HTML readers, HTML extraction, the URL filter, PII
redaction, decontamination). May import the engine, the tokenizer and the config.
"""
