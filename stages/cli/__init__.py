"""The click CLI: one thin layer over the stages (``lmprep`` is ``stages.cli.main:main``).

``main`` (the command group and its error handling), ``options`` (``--config`` and ``--set``), ``pipeline``
(``run``, ``status``, ``dag``, ``clean``, ``config show``), ``init`` (``lmprep init``), ``tokenizer``
(``lmprep tokenizer …``), ``data`` (``export`` and ``stats``), ``model`` (``sample``, ``check``, ``stamp``)
and ``report`` (``lmprep report``).
"""
