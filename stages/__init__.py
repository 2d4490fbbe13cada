"""lmprep's application layer: the concrete stages and the click CLI on top of ``pipeline``."""
