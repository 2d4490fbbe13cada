"""A worker forked from a driver that has talked to an object store must never touch the driver's event loop.

fsspec runs every request of an async backend (s3fs) in one event loop, in a thread of its own, and gives a
forked process a new loop. But the driver's loop object is copied into the child with its *epoll instance*,
which the two processes then share, and the file systems the child inherited close their connections as they
are collected (s3fs's finalizer): on the copied loop, so each idle keep-alive connection is unregistered from
the driver's epoll (``epoll_ctl(DEL)`` acts on the instance, not on the child's copy of the descriptor). The
driver then never learns that the store answered on that connection, and its next request waits for ever in
fsspec's ``sync()`` ("... attached to a different loop" in the log). A store that closes every connection
(moto's server) has none idle at the fork, which is why only a keep-alive endpoint (real S3) showed it.

So in the child, the copied loop gets a selector of its own and is marked as not running: whatever the
inherited file systems do on it stays in the child, and what they report to it as they are collected
unclosed is not shown (they are the driver's; the child makes file systems of its own).
"""

from __future__ import annotations

import os
import selectors
import sys
from typing import Any

_at_fork: list[Any] = [None]  # fsspec's loop as the fork began


def _remember_loop() -> None:
    asyn = sys.modules.get("fsspec.asyn")
    _at_fork[0] = asyn.loop[0] if asyn is not None else None


def _detach_loop() -> None:
    loop, _at_fork[0] = _at_fork[0], None
    if loop is None:
        return
    # the driver's epoll instance is not this process's to change (the copy dropped here closes only this
    # process's descriptor of it)
    loop._selector = selectors.DefaultSelector()
    loop._thread_id = None  # no thread runs it here: is_running() is False, so nothing waits on it
    # the inherited sessions, collected here unclosed, report it to their loop ("Unclosed client session"):
    # they are the driver's, which closes them
    loop.set_exception_handler(lambda loop, context: None)


def _parent_done() -> None:
    _at_fork[0] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_remember_loop, after_in_parent=_parent_done, after_in_child=_detach_loop)
