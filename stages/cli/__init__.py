"""The click CLI: one thin layer over the stages (``lmprep`` is ``stages.cli.main:main``)."""
