"""Token shards: what the tokenizer makes of the prepared corpus, and what training reads.

``format`` (Arrow shard files and verified shard sets), ``manifest`` (the sidecar of a shard set: read,
checked, written, joined), ``origins`` (each row's source and document columns), ``mixture`` (sampling windows
by the sources' weights), ``corpus`` (encoding prepared documents into shards as partition tasks), ``resume``
(what a killed encode had finished), ``export`` (Parquet and nanoGPT formats), ``megatron`` (Megatron-LM's
indexed dataset), ``stats`` (summaries and plots) and ``torch_dataset`` (a torch ``IterableDataset`` over a
shard set; the only module here that imports torch). May import the engine, the tokenizer, the config and the
data room.
"""
