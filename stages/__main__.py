"""``python -m stages``, the ``lmprep`` command: Ctrl-C while it loads ends it as Ctrl-C in a stage does."""

import sys

from stages import INTERRUPTED_MESSAGE, INTERRUPTED_STATUS


def main() -> None:
    try:
        from stages.cli.main import main as run_cli
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED_MESSAGE + "\n")
        sys.exit(INTERRUPTED_STATUS)
    run_cli()


if __name__ == "__main__":
    main()
