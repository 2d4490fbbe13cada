"""``python -m stages``, the ``lmprep`` command: Ctrl-C while it loads ends it as Ctrl-C in a stage does."""

import signal
import sys

from stages import INTERRUPTED_MESSAGE, INTERRUPTED_STATUS, interrupted_while_loading

if "__mp_main__" in sys.modules:
    # A process multiprocessing spawned from the lmprep command, which runs the command's script first thing:
    # a Dask LocalCluster's worker. A Ctrl-C at the terminal reaches it too (it is in the driver's process
    # group); the driver stops its workers and says so in one line, where each worker printed a traceback of
    # its own. (Spawned from ``python -m stages``, a worker skips its parent's ``__main__`` and still does.)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
