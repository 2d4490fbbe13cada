"""Checkpoint homes: where a checkpoint directory lives, and the order in which a run replaces it.

A local ``train.output_dir`` is replaced by renames: the new checkpoint is trained in a staging
directory, the old one renamed aside (never deleted; :mod:`pipeline.model.resume` says under which
name), then the new one renamed in.

``train.output_dir`` may be a URL (``s3://bucket/ckpt``): checkpoints in object
storage, which cannot rename. The trainer then works in a local scratch copy
and publishes every step of the local logic as a committed remote output
(:mod:`pipeline.engine.storage`), in the order that keeps the local case safe:

1. download the committed ``<url>`` and ``<url>.partial`` (so an interrupted run
   resumes on any machine; nothing local is needed);
2. train as locally, committing each periodic save to ``<url>.partial`` as it is
   written (a preempted driver loses at most ``checkpoint_every`` steps);
3. upload an old checkpoint being set aside to a free ``<url>-<tag>`` and commit it;
4. commit the new checkpoint to ``<url>`` (the swap: one PUT of its commit record);
5. delete ``<url>.partial``.

A kill between any two steps loses nothing: before 4 the previous commit of
``<url>`` stands (and the next run resumes from ``<url>.partial``); between 3
and 4 the old checkpoint is at both names, so the next run sets it aside once
more, as ``<url>-<tag>-2``. Messages name the URLs, never the scratch copy. As
for any remote output, one project owns it: runs of that project hold its lock,
so no other run replaces ``<url>`` meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pipeline.engine import locations, storage
from pipeline.engine.locations import Location
from pipeline.errors import PipelineError


def set_aside_path(directory: Location, tag: str) -> Path | str:
    """The first free sibling of ``directory`` among ``<name>-<tag>``, ``<name>-<tag>-2``, … (for a URL,
    the first prefix holding no object).

    :func:`set_aside` moves the directory there (a remote one is copied there), and ``status`` names it beforehand.
    """
    remote = locations.is_url(directory)
    base = os.fspath(directory).rstrip("/") if remote else os.fspath(Path(directory))
    taken = storage.holds_anything if remote else os.path.exists
    candidate, number = f"{base}-{tag}", 2
    while taken(candidate):
        candidate, number = f"{base}-{tag}-{number}", number + 1
    return candidate if remote else Path(candidate)


def set_aside(directory: Location, tag: str) -> Path:
    """Rename the local ``directory`` to :func:`set_aside_path` and return the new path."""
    candidate = Path(set_aside_path(directory, tag))
    os.replace(directory, candidate)
    return candidate


class LocalHome:
    """Where a checkpoint directory lives and how its steps are made: here, a local directory, by renames."""

    def __init__(self, directory: Path):
        self.directory = directory

    def name(self, path: Path) -> Path | str:
        """What to call a path under the working directory (its parent) in messages and results."""
        return path

    def words(self, message: str) -> str:
        """``message`` with the paths it names as :meth:`name` calls them."""
        return message

    def partial_saved(self, partial: Path) -> None:
        """A periodic checkpoint was just saved into ``partial``."""

    def set_aside(self, tag: str) -> Path | str:
        """Keep the old checkpoint under a free name ``<name>-<tag>``, before the new one replaces it."""
        return set_aside(self.directory, tag)

    def publish(self) -> None:
        """The new checkpoint is in place in the working directory: make it the checkpoint."""

    def remove_partial(self) -> None:
        partial = partial_dir(self.directory)
        if partial.exists():
            shutil.rmtree(partial)


class RemoteHome(LocalHome):
    """A checkpoint directory at a URL, worked on in the local copy ``directory`` (see the module docstring)."""

    def __init__(self, url: str, directory: Path):
        super().__init__(directory)
        self.url = url

    def name(self, path: Path) -> Path | str:
        return self.words(str(path))

    def words(self, message: str) -> str:
        return message.replace(str(self.directory), self.url)

    def partial_saved(self, partial: Path) -> None:
        _commit_copy(partial, self.url + ".partial")

    def set_aside(self, tag: str) -> str:
        target = os.fspath(set_aside_path(self.url, tag))
        _commit_copy(self.directory, target)
        return target

    def publish(self) -> None:
        _commit_copy(self.directory, self.url)

    def remove_partial(self) -> None:
        storage.remove(self.url + ".partial")


@contextlib.contextmanager
def checkpoint_home(output_dir: str) -> Iterator[LocalHome]:
    """The home of ``train.output_dir``; for a URL, a scratch copy of its committed checkpoint and partial
    checkpoint, for as long as the run lasts, and errors raised meanwhile name the URL."""
    if not locations.is_url(output_dir):
        yield LocalHome(Path(output_dir))
        return
    url = os.fspath(output_dir).rstrip("/")
    with tempfile.TemporaryDirectory(prefix="lmprep-") as scratch:
        home = RemoteHome(url, Path(scratch) / locations.name_of(url))
        for remote, copy in ((url, home.directory), (url + ".partial", partial_dir(home.directory))):
            if storage.exists(remote):
                storage.download_dir(remote, copy)
        try:
            yield home
        except PipelineError as exc:
            exc.args = (home.words(str(exc)),)
            raise


def _commit_copy(directory: Path, url: str) -> None:
    """Upload a local directory as the new committed output at ``url`` (its previous commit stands until then)."""
    with storage.output_dir(url) as attempt:
        storage.upload_dir(directory, attempt)


def partial_dir(directory: Location) -> Path:
    """Where ``train.checkpoint_every`` saves the checkpoints of a run in progress: ``<name>.partial``."""
    directory = Path(directory)
    return directory.with_name(directory.name + ".partial")


