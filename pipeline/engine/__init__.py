"""The engine: what every stage runs on, knowing no stage by name.

``atomic`` (temp + rename outputs), ``storage`` (the one module that opens, sizes and stamps files,
local or fsspec URLs), ``hashing`` (content hashes and the hash cache), ``runner`` (the DVC-like stage
runner: staleness reasons, the run lock, early cutoff), ``executor`` (partition tasks on a local pool or
Dask) and ``pool`` (an order-preserving bounded map). Imports only ``pipeline.errors``.
"""
