"""The export formats and the most IDs each holds, checked as a config loads and again before an export writes."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.errors import ConfigError

# Parquet and nanoGPT's .bin store the shards' dtype, uint32 at most; Megatron's indexed dataset int32
# (pipeline/shards/megatron.py).
EXPORT_MAX_IDS = {"parquet": 1 << 32, "nanogpt": 1 << 32, "megatron": 1 << 31}
EXPORT_FORMATS = tuple(EXPORT_MAX_IDS)


def check_export_ids(formats: Sequence[str], vocab_size: int, source: str, where: str = "export.formats") -> None:
    """ConfigError naming the first of ``formats`` that cannot hold ``vocab_size`` IDs (``source``: whose)."""
    for format_ in formats:
        if vocab_size > EXPORT_MAX_IDS[format_]:
            raise ConfigError(f"{where}: {format_} holds at most {EXPORT_MAX_IDS[format_]:,} IDs, but {source} "
                              f"{vocab_size:,}; remove {format_} from export.formats")
