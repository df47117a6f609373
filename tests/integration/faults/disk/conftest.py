"""Small disks for the full-disk faults: a size-limited tmpfs per test, filled on demand.

``small_disk(path, size_bytes)`` mounts ``tmpfs`` (``size=``, ``mode=0700``, so
Floodgate's private-folder checks take it as the test user's own) on ``path`` and
returns a :class:`SmallDisk`; every mount is unmounted when the test ends, pass or
fail (lazily, ``umount -l``, if a process the test started still holds a file there).
Mounting needs root, as CI's runner is: the test fails, never skips, without it.

A tmpfs answers a write past its size with ``ENOSPC`` at once (no delayed
allocation, no reserved blocks), which is what a full disk returns to every
writer: Spark's checkpoint files, the sweeper's BLOBs, a broker's log segments.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

#: The name of the file :meth:`SmallDisk.fill` writes.
FILLER = "filler.bin"


class SmallDisk:
    """A mounted tmpfs of ``size_bytes``.

    Attributes:
        path: the mount point.
        size_bytes: the file system's size, bytes.
    """

    def __init__(self, path: Path, size_bytes: int) -> None:
        self.path = path
        self.size_bytes = size_bytes

    @property
    def filler(self) -> Path:
        return self.path / FILLER

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still write (``statvfs``: ``f_bavail`` blocks)."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, *, leave_bytes: int = 0) -> int:
        """Write :data:`FILLER` until the disk refuses a byte (``ENOSPC``), then give
        back ``leave_bytes`` (rounded to whole pages by tmpfs).

        Returns:
            The bytes the filler holds.

        Raises:
            AssertionError: a write failed on another error than ``ENOSPC``.
        """
        chunk = b"\0" * 65_536
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            written = 0
            while True:
                try:
                    n = os.write(fd, chunk if self.free_bytes() >= len(chunk) else chunk[:4096])
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
                written += n
            if leave_bytes:
                written = max(0, written - leave_bytes)
                os.ftruncate(fd, written)
        finally:
            os.close(fd)
        return written

    def unfill(self) -> None:
        """Remove :data:`FILLER`: the space comes back at once."""
        self.filler.unlink(missing_ok=True)


def _mounted(path: Path) -> bool:
    return os.path.ismount(path)


@pytest.fixture
def small_disk() -> Iterator[Callable[[Path, int], SmallDisk]]:
    """A factory of size-limited tmpfs mounts, each unmounted after the test."""
    mounted: list[Path] = []

    def mount(path: Path, size_bytes: int) -> SmallDisk:
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_bytes // 1024}k,mode=0700", "tmpfs",
             str(path)],
            check=True, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        mounted.append(path)
        return SmallDisk(path, size_bytes)

    yield mount
    for path in reversed(mounted):
        if not _mounted(path):
            continue
        done = subprocess.run(["umount", str(path)], capture_output=True, timeout=30)
        if done.returncode != 0:  # a file still open: detach now, freed when closed
            with contextlib.suppress(subprocess.SubprocessError):
                subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)
