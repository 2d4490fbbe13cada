"""lmprep's library, grouped by role. Each room imports only the rooms below it::

    model/      the bigram model, checkpoints and the tokenizer guard, the training loop   (torch)
    shards/     token shards: format, corpus encoding, exports, stats, the torch dataset
    data/       raw sources, cleaning, prepared documents, the prepare step, ``lmprep init``
    config/     the run configuration: schema, files, safe YAML, validation
    tokenizer/  BPE: the reference and the fast trainer and encoder, tokenizer.json, tiktoken
    engine/     atomic writes, storage (local or fsspec URLs), hashing, the stage runner, executors
    errors.py   the root PipelineError, one subclass per domain, the message-shortening helpers

``tokenizer/`` knows nothing of executors, documents or the runner: it uses only the engine's
atomic writes, storage, hashing and pool. torch is imported only under ``model/`` and by
``shards/torch_dataset.py``. Nothing here imports the concrete stages (``stages/``) or click, and
importing the package has no side effects. ``tests/test_layers.py`` enforces all of this.
"""
