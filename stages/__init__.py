"""lmprep's application layer: the concrete stages and the click CLI on top of ``pipeline``."""

# Ctrl-C, wherever it lands: every output is replaced atomically and the run lock ends with the process.
INTERRUPTED_MESSAGE = "interrupted; the previous outputs are intact"
INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a command that Ctrl-C ended
