"""The run configuration: a YAML file read into typed, frozen dataclasses.

What lives where:

- :mod:`~pipeline.config.schema`: the dataclasses (:class:`Config` and one per section), their
  defaults and bounds, and the limits shared with the rest of the pipeline;
- :mod:`~pipeline.config.files`: reading a config file: ``extends`` chains, ``--set`` overrides, paths
  rebased onto the file's directory, a frozen tokenizer's settings read in; the one module here that reads files;
- :mod:`~pipeline.config.origins`: where each value came from (:class:`Origins`);
- :mod:`~pipeline.config.yaml_safe`: the bounded YAML reader (size, nesting, alias bombs);
- :mod:`~pipeline.config.validate`: a parsed mapping checked and converted into the dataclasses, without I/O;
- :mod:`~pipeline.config.export_formats`: the export formats and the most IDs each holds.
- :mod:`~pipeline.config.frozen`: with ``tokenizer.path`` set, the tokenizer's settings read from that file.

Import from ``pipeline.config``; the modules above may import only :mod:`pipeline.errors`,
:mod:`pipeline.engine`, :mod:`pipeline.tokenizer` and one another.
"""

from pipeline.config.export_formats import EXPORT_FORMATS
from pipeline.config.files import dump_yaml, load_config, load_config_with_origins, parse_config
from pipeline.config.frozen import FROM_FILE
from pipeline.config.origins import Origins
from pipeline.config.schema import (
    MAX_TRAINED_IDS,
    Config,
    DataConfig,
    EncodeConfig,
    ExecutorConfig,
    ExportConfig,
    PrepareConfig,
    ReportConfig,
    SourceConfig,
    StatsConfig,
    StorageConfig,
    TokenizerConfig,
    TrainConfig,
    resolved_size,
)
from pipeline.config.yaml_safe import MAX_CONFIG_BYTES

__all__ = [
    "EXPORT_FORMATS", "FROM_FILE", "MAX_CONFIG_BYTES", "MAX_TRAINED_IDS", "Config", "DataConfig", "EncodeConfig",
    "ExecutorConfig", "ExportConfig", "Origins", "PrepareConfig", "ReportConfig", "SourceConfig", "StatsConfig",
    "StorageConfig", "TokenizerConfig", "TrainConfig", "dump_yaml", "load_config", "load_config_with_origins",
    "parse_config", "resolved_size",
]
