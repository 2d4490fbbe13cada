"""The engine: what every stage runs on, knowing no stage by name.

``locations`` (local paths and URLs as names: joined, compared, made absolute), ``storage`` (the one module
that opens, sizes and stamps files, local or fsspec URLs), ``local_files`` (local files to refuse: FIFOs,
devices, link loops), ``retries`` (deadlines and retries of store requests), ``store_fork`` (forked workers
kept off the driver's event loop), ``atomic`` (temp + rename outputs), ``hashing`` (content hashes and the
hash cache), ``runner`` (the DVC-like stage runner: staleness reasons, early cutoff), ``run_lock`` (two runs never
interleave; a read-only state dir only reads),
``reasons`` (its words for a changed setting), ``file_sets`` (a glob's files as one digest in the lock and a
listing on disk), ``run_cache`` (outputs found again by what made them),
``stage_log`` (a stage's log file), ``progress`` (bars and progress lines), ``executor`` (partition tasks on a
local pool or Dask), ``memory`` (a worker's free memory given back between tasks), ``completion`` (records of
finished tasks, for a re-run to skip them), ``dask_watch`` (Dask workers gone silent) and ``pool`` (an
order-preserving bounded map). Imports only ``pipeline.errors``.
"""
