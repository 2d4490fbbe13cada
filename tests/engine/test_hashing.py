"""The hash cache: what it trusts (size, mtime, ctime, inode) and that it is never required."""

from __future__ import annotations

import hashlib
import json
import os
import sys

from pipeline.engine.hashing import HashCache, sha256_file


def rewrite_until_ctime_moves(path, data: bytes, stamped_ctime_ns: int) -> None:
    """Write ``data`` in place, again if needed, until the change time differs from the stamped one.

    File systems keep ctime at the kernel clock's tick, so a write in the same tick as the first
    stamp would keep it; real edits happen later than that.
    """
    while True:
        with open(path, "r+b") as handle:
            handle.write(data)
        if os.stat(path).st_ctime_ns != stamped_ctime_ns:
            return


def test_same_size_edit_with_mtime_restored_is_rehashed(tmp_path):
    """`cp -p` and `rsync -t --inplace` keep size, mtime and inode; the change time still moves."""
    path = tmp_path / "data.txt"
    path.write_bytes(b"hello world")
    before = os.stat(path)
    cache = HashCache(tmp_path / "hashes.json")
    old = cache.file_hash(path)
    cache.save()

    rewrite_until_ctime_moves(path, b"HELLO WORLD", before.st_ctime_ns)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)

    new = HashCache(tmp_path / "hashes.json").file_hash(path)
    assert new == sha256_file(path) != old


def test_the_hash_cache_keeps_a_file_whose_name_is_not_utf8(tmp_path):
    odd = os.fsencode(tmp_path) + b"/caf\xe9.txt"
    with open(odd, "wb") as file:
        file.write(b"data")
    cache = HashCache(tmp_path / "hashes.json")
    digest = cache.file_hash(os.fsdecode(odd))
    cache.save()
    assert json.loads((tmp_path / "hashes.json").read_text("utf-8"))[os.fsdecode(odd)][-1] == digest
    assert HashCache(tmp_path / "hashes.json").file_hash(os.fsdecode(odd)) == digest


def test_a_hash_cache_that_is_not_one_is_ignored(tmp_path):
    """``[]``, a number or a torn entry in hashes.json only costs the hashing it would have saved."""
    path = tmp_path / "data.txt"
    path.write_bytes(b"hello")
    for saved in ("[]", "7", json.dumps({str(path): [1, 2]}), json.dumps({str(path): "x"})):
        (tmp_path / "hashes.json").write_text(saved)
        cache = HashCache(tmp_path / "hashes.json")
        assert cache.file_hash(path) == sha256_file(path)
        cache.save()


def test_a_fifo_or_a_link_to_a_device_is_never_read(tmp_path):
    """Hashing an output or a scratch file that a FIFO or a link to /dev/zero replaced would block or never
    end: it is refused (sha256_file) or stands for what it is (the cache), unread."""
    import pytest

    from pipeline.errors import StorageError

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    for name, kind in (("fifo", "a FIFO"), ("zero", "a character device")):
        with pytest.raises(StorageError, match=f"is {kind}, not a regular file"):
            sha256_file(tmp_path / name)
        assert HashCache(tmp_path / "hashes.json").file_hash(tmp_path / name) == f"not a regular file: {kind}"
    assert HashCache(tmp_path / "hashes.json").tree_hash(tmp_path)


def test_the_hash_cache_holds_a_file_in_its_path_and_64_bytes(tmp_path):
    """prepare over a million raw files hashes each one: the cache's entry per file (its stamp and digest beside its
    path) took some 370 bytes as a list of four ints and a hex string, where 64 bytes packed take some 120."""
    import tracemalloc

    paths = [tmp_path / f"{number:05d}.txt" for number in range(2000)]
    for path in paths:
        path.write_text(path.name)
    cache = HashCache(tmp_path / "hashes.json")
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for path in paths:
            cache.file_hash(path)
        held = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    beyond_paths = (held - sum(sys.getsizeof(os.path.abspath(path)) for path in paths)) / len(paths)
    assert beyond_paths < 200, f"{beyond_paths:.0f} bytes per file"
    cache.save()
    assert HashCache(tmp_path / "hashes.json")._entries == cache._entries  # saved and read back, the same


def test_a_digest_its_writer_gave_is_taken_while_the_file_keeps_its_stamp(tmp_path, monkeypatch):
    """The encode stage's shards are hashed as they are written: the runner does not read them back."""
    from pipeline.engine import hashing

    path = tmp_path / "shard.arrow"
    path.write_bytes(b"tokens")
    hashing.remember(path, sha256_file(path))
    monkeypatch.setattr(hashing, "sha256_file", lambda path: "read again")
    cache = HashCache(tmp_path / "hashes.json")
    assert cache.file_hash(path) == hashlib.sha256(b"tokens").hexdigest()
    path.write_bytes(b"other!")  # the same size: the change time tells
    os.utime(path, ns=(0, 0))
    assert cache.file_hash(path) == "read again"


def test_a_task_takes_the_digest_the_running_stages_cache_vouches_for_while_the_file_keeps_its_stamp(tmp_path):
    """The encode stage's tasks read each part once: the runner hashed it just before the stage ran, so a task that
    opens it with the stamp the runner's cache holds does not hash it again; a part edited since is hashed."""
    from pipeline.engine import hashing

    path = tmp_path / "part.arrow"
    path.write_bytes(b"documents")
    digest = hashlib.sha256(b"documents").hexdigest()
    cache = HashCache(tmp_path / "hashes.json")
    assert cache.file_hash(path) == digest and hashing.vouched_stamp(path, digest) is None  # no stage running
    with hashing.vouching(cache):
        stamp = hashing.vouched_stamp(path, digest)
        assert hashing.vouched_stamp(path, "0" * 64) is None  # the cache holds another digest for it
    assert stamp == [len(b"documents"), *(getattr(os.stat(path), field) for field in ("st_mtime_ns", "st_ctime_ns",
                                                                                   "st_ino"))]
    # with the stamp, the vouched digest is taken as it is (here one the bytes do not have, to show it)
    assert hashing.read_with_sha256(path, known=(stamp, "vouched")) == (b"documents", "vouched")
    rewrite_until_ctime_moves(path, b"DOCUMENTS", stamp[2])
    assert hashing.read_with_sha256(path, known=(stamp, digest)) == (b"DOCUMENTS",
                                                                     hashlib.sha256(b"DOCUMENTS").hexdigest())
