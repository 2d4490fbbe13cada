"""``python -m stages``, the ``lmprep`` command: Ctrl-C while it loads ends it as Ctrl-C in a stage does.

SIGINT is handled from this module's first lines, through ``_signal``, the built-in module that the interpreter
loaded as it started: ``import signal`` reads and compiles a file, and a Ctrl-C landing there was a traceback
(2 of 150 tries in the first 0.1 s). Before these lines only the interpreter runs: its start-up, and importing
the ``stages`` package, whose ``__init__`` defines the handler.
"""

import _signal
import sys

from stages import INTERRUPTED_MESSAGE, INTERRUPTED_STATUS, interrupted_while_loading

if "__mp_main__" in sys.modules:
    # A process multiprocessing spawned from the lmprep command, which runs the command's script first thing:
    # a Dask LocalCluster's worker. A Ctrl-C at the terminal reaches it too (it is in the driver's process
    # group); the driver stops its workers and says so in one line, where each worker printed a traceback of
    # its own. (Spawned from ``python -m stages``, a worker skips its parent's ``__main__`` and still does.)
    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
elif __name__ == "__main__":
    _signal.signal(_signal.SIGINT, interrupted_while_loading)  # python -m stages: until the command runs


def main() -> None:
    _signal.signal(_signal.SIGINT, interrupted_while_loading)  # until the command runs: see stages.cli.main
    one_blas_thread()
    try:
        from stages.cli.main import main as run_cli
    except KeyboardInterrupt:
        sys.stderr.write(INTERRUPTED_MESSAGE + "\n")
        sys.exit(INTERRUPTED_STATUS)
    run_cli()


def one_blas_thread() -> None:
    """numpy's OpenBLAS starts a thread per core as numpy loads, and each spins for about 0.1 s of CPU before it
    sleeps; lmprep calls no BLAS routine and runs its work in processes (one per core), so, as Dask's workers do,
    it asks for one thread, unless the user chose a number (docs/performance.md). Before any import of numpy."""
    import os  # loaded with the interpreter: no file is read

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


if __name__ == "__main__":
    main()
