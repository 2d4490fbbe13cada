"""lmprep's application layer: the concrete stages and the click CLI on top of ``pipeline``.

``registry`` (the pipeline: its stages in order, each declared once), one module per stage (``prepare``,
``tokenizer``, ``encode``, ``train``, ``export``, ``stats``, ``report``), ``console`` (how stages talk to the
user), ``cli`` (the click commands) and ``__main__`` (``python -m stages``: Ctrl-C handled from the first
line).
"""

# Ctrl-C, wherever it lands: every output is replaced atomically and the run lock ends with the process.
INTERRUPTED_MESSAGE = "interrupted; the previous outputs are intact"
INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a command that Ctrl-C ended


def interrupted_while_loading(signum, frame) -> None:
    """SIGINT before a command runs (``stages.__main__`` sets it first thing; the command's invoke puts Python's
    own back): nothing was started or written yet, so the process ends at once, with the line and status of
    Ctrl-C in a stage. A KeyboardInterrupt raised there instead could land anywhere in the imports or in
    click's parsing (a traceback, or click's "Aborted!" with status 1)."""
    import os

    os.write(2, (INTERRUPTED_MESSAGE + "\n").encode())
    os._exit(INTERRUPTED_STATUS)
