"""One HTML page of a run, built from what the stages wrote and nothing else.

- :mod:`~pipeline.report.inputs`: reading the run's files (bounded; a corrupt JSON file is a
  :class:`~pipeline.errors.ReportError` naming it; a missing one makes its section say so);
- :mod:`~pipeline.report.rejected`: the bounded, deterministic sample of rejected documents, their
  duplicates and the differences between the two;
- :mod:`~pipeline.report.corpus`: document lengths and bytes per token, per split, source and script, and
  the tokenizer's view of sample texts;
- :mod:`~pipeline.report.sections`: every section's data, or why a section is missing;
- :mod:`~pipeline.report.svg`: the charts, hand-written SVG;
- :mod:`~pipeline.report.page` (with :mod:`~pipeline.report.assets`, the page's style and script): the page.

The room sits above ``pipeline.shards`` and never imports ``pipeline.model`` (torch): training's metrics are read
from ``metrics.jsonl`` as JSON. The page needs no server and no network: its style, script and data are inline.
"""

from pipeline.report.page import MAX_PAGE_BYTES, render
from pipeline.report.sections import gather

__all__ = ["MAX_PAGE_BYTES", "gather", "render"]
