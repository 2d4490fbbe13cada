"""``python -m stages``, the ``lmprep`` command: Ctrl-C while it loads ends it as Ctrl-C in a stage does."""

import signal
import sys

from stages import INTERRUPTED_MESSAGE, INTERRUPTED_STATUS, interrupted_while_loading


def main() -> None:
    signal.signal(signal.SIGINT, interrupted_while_loading)  # until the command runs: see stages.cli.main
    try:
        from stages.cli.main import main as run_cli
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED_MESSAGE + "\n")
        sys.exit(INTERRUPTED_STATUS)
    run_cli()


if __name__ == "__main__":
    main()
