"""Private files and folders: what the services and the CLI write is their user's
alone, and what they trust was written by that user: a file another user could have
planted or swapped is refused.

* :func:`private_file` opens every file Floodgate creates: the SQLite databases and
  their ``.leader`` lock files, job logs, a query group's control and token files,
  BLOBs, the files of a broker Floodgate starts. Mode 0600 whatever the umask;
  ``O_NOFOLLOW``, so a symbolic link planted at the name is refused, never followed
  (a job's output once went to whatever file ``<log_dir>/<next id>.log`` pointed at,
  and that file became 0600); ``O_EXCL`` when the file must be new.
* :func:`restrict_file` makes a file that exists 0600 without opening it for reading
  or writing (the SQLite files a connection of this process may hold locks on).
* :func:`write_private_text` replaces a whole file atomically through a new
  :func:`private_file` beside it.
* :func:`private_dir` makes a folder 0700, or checks one that exists: a folder another
  user owns, or that others can write to (``mode & 0o022``, sticky ``/tmp``-like ones
  too), is refused with its path and mode, as OpenSSH refuses such key files -- its
  files could be swapped under us. So is one under a folder that others could change
  (:func:`check_parents`, OpenSSH's ``safe_path``): whoever can write to a parent can
  rename the private folder away and put a symbolic link in its place.
* :func:`read_trusted` reads a file another process of ours wrote and whose content is
  trusted (a query group's control file, naming the URL its token goes to): it must be
  a regular file of our own user, not writable by others, reached without a symbolic
  link.

Processes started to write into a private folder (the brokers) run with
:data:`PRIVATE_UMASK`.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import stat
from pathlib import Path

from pipeline.errors import ConfigError, UntrustedFileError

log = logging.getLogger(__name__)

#: Mode of every file Floodgate creates.
PRIVATE_FILE_MODE = 0o600
#: Mode of every folder Floodgate creates for its files.
PRIVATE_DIR_MODE = 0o700
#: The umask of a process Floodgate starts to write into a private folder (a broker):
#: its files 0600, its folders 0700.
PRIVATE_UMASK = 0o077
#: Permission bits that let others than the owner write (group, other).
WRITABLE_BY_OTHERS = 0o022
#: The most :func:`read_trusted` reads, bytes (a control file is a line of JSON).
TRUSTED_READ_LIMIT = 1 << 20

#: ``os.open`` with ``O_NOFOLLOW`` fails with these when the name is a symbolic link
#: (Linux: ELOOP; FreeBSD: EMLINK); with ``O_CREAT | O_EXCL``, with EEXIST.
_LINK_ERRNOS = {errno.ELOOP, errno.EMLINK, errno.EEXIST}


def describe(st: os.stat_result) -> str:
    """``"owner uid N, mode 0NNN"`` of a file's status, for messages."""
    return f"owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}"


def _untrusted(path: Path, st: os.stat_result, reason: str, what: str) -> UntrustedFileError:
    return UntrustedFileError(
        f"{path} is {reason} ({describe(st)}): not {what}",
        path=str(path),
        uid=st.st_uid,
        mode=stat.S_IMODE(st.st_mode),
        reason=reason,
    )


def _problem(st: os.stat_result, *, writable_by_others: bool) -> str | None:
    """What makes a file unfit to be ours (``None``: nothing)."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"another user's (we are uid {os.geteuid()})"
    if not writable_by_others and st.st_mode & WRITABLE_BY_OTHERS:
        return "writable by others than its owner"
    return None


def _refuse_link(path: Path, exc: OSError, what: str) -> None:
    """Raise :class:`UntrustedFileError` if ``exc`` came from a symbolic link at
    ``path`` (``O_NOFOLLOW``, or ``O_EXCL`` on a link); return otherwise."""
    if exc.errno not in _LINK_ERRNOS:
        return
    try:
        st = os.lstat(path)
    except OSError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _untrusted(path, st, f"a symbolic link (to {_link_target(path)})", what) from exc


def _link_target(path: Path) -> str:
    """Where the symbolic link ``path`` points (``?`` when it cannot be read)."""
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _open_checked(path: Path, flags: int, *, writable_by_others: bool, what: str) -> int:
    """``os.open`` without following a symbolic link, then the checks of
    :func:`_problem` on what was opened; a blocking file descriptor."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, PRIVATE_FILE_MODE)
    except OSError as exc:
        _refuse_link(path, exc, what)
        raise
    try:
        st = os.fstat(fd)
        problem = _problem(st, writable_by_others=writable_by_others)
        if problem is not None:
            raise _untrusted(path, st, problem, what)
        os.set_blocking(fd, True)  # O_NONBLOCK only kept a planted FIFO from blocking us
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_file(
    path: Path | str, flags: int = os.O_RDWR, *, create: bool = True, new: bool = False
) -> int:
    """Open ``path`` as a file of our own user's alone: mode 0600 (also when it existed
    with a wider one), never through a symbolic link. Its folder is created 0700 when
    missing (with ``create``).

    Args:
        path: the file.
        flags: ``os.open`` flags (``O_RDWR``, ``O_WRONLY | O_APPEND``, ...); ``O_CREAT``,
            ``O_EXCL``, ``O_NOFOLLOW`` and ``O_CLOEXEC`` are added here.
        create: create it when missing (``False``: a missing file raises
            :class:`FileNotFoundError`).
        new: it must not exist yet (``O_EXCL``): anything at the name, a symbolic link
            included, is refused.

    Returns:
        The file descriptor, which the caller closes (or wraps with :func:`os.fdopen`).

    Raises:
        UntrustedFileError: the name is a symbolic link, or names something that is not
            a regular file or is owned by another user; nothing was written.
        FileExistsError: ``new`` and a file exists at the name.
        OSError: it cannot be created or opened otherwise.
    """
    path = Path(path)
    if create:
        path.parent.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
        flags |= os.O_CREAT | (os.O_EXCL if new else 0)
    fd = _open_checked(path, flags, writable_by_others=True, what="opened")
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def restrict_file(path: Path | str) -> None:
    """Set ``path``, a file that exists, to mode 0600 with the checks of
    :func:`private_file`, through an ``O_PATH`` descriptor: one that opens the file for
    neither reading nor writing.

    Why not :func:`private_file`: a process's POSIX record locks on a file are all
    released when it closes *any* descriptor of that file (fcntl(2)), and SQLite's
    locks are such locks. Opening and closing a database file, or its ``-shm`` file,
    that a connection of this process holds would drop that connection's locks:
    another process then takes the database for unused, truncates the ``-shm`` file
    this process has mapped (SIGBUS on its next read), or checkpoints and deletes the
    WAL this process still writes to (its writes lost). Closing an ``O_PATH``
    descriptor releases no lock (Linux skips ``locks_remove_posix`` for it); the mode
    is set through ``/proc/self/fd``. Where there is no ``O_PATH`` (not Linux), the
    file is opened as :func:`private_file` opens it.

    Raises:
        FileNotFoundError: nothing is at ``path``.
        UntrustedFileError: it is a symbolic link, not a regular file, or another
            user's; its mode is left as it was.
    """
    path = Path(path)
    o_path = getattr(os, "O_PATH", None)
    if o_path is None:
        os.close(private_file(path, create=False))
        return
    fd = os.open(path, o_path | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)  # of the link itself, when one is at the name (O_NOFOLLOW)
        problem = _problem(st, writable_by_others=True)
        if problem is not None:
            if stat.S_ISLNK(st.st_mode):
                problem = f"a symbolic link (to {_link_target(path)})"
            raise _untrusted(path, st, problem, "opened")
        os.chmod(f"/proc/self/fd/{fd}", PRIVATE_FILE_MODE)
    finally:
        os.close(fd)


def write_private_text(path: Path | str, text: str) -> None:
    """Replace ``path``'s content with ``text`` (UTF-8) atomically: written to a new
    :func:`private_file` beside it (``.<name>.<random>.tmp``), then renamed over it. A
    symbolic link at ``path`` is replaced, never followed; the file is 0600.

    Raises:
        OSError: it cannot be written (the temporary file is removed).
    """
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = private_file(temporary, os.O_WRONLY, new=True)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def read_trusted(path: Path | str, *, limit: int = TRUSTED_READ_LIMIT) -> str:
    """The text of a file another process of our own user wrote, if it can be trusted:
    reached without a symbolic link, a regular file, owned by our effective user, and
    not writable by others (checked on the opened file, so it cannot be swapped between
    the check and the read).

    Args:
        path: the file.
        limit: the most bytes read.

    Returns:
        Its first ``limit`` bytes, decoded as UTF-8.

    Raises:
        UntrustedFileError: it fails a check (names the path, its owner and mode);
            nothing was read.
        FileNotFoundError: it is missing.
        OSError: it cannot be read otherwise.
        UnicodeDecodeError: it is not UTF-8 (a ``ValueError``).
    """
    path = Path(path)
    fd = _open_checked(path, os.O_RDONLY, writable_by_others=False, what="trusted")
    with os.fdopen(fd, "rb") as source:
        return source.read(limit).decode("utf-8")


def _parents(path: Path) -> list[Path]:
    """Every folder above ``path`` up to ``/``: as written (made absolute, ``..``
    kept) and as resolved (symbolic links followed), each once."""
    written = Path(os.path.abspath(path))
    found = [*written.parents, *path.resolve().parents]
    return list(dict.fromkeys(found))


def check_parents(path: Path | str, *, key: str) -> None:
    """Refuse a private folder under a folder that others could change, as OpenSSH's
    ``safe_path`` refuses an ``authorized_keys`` file (``StrictModes``): every folder
    above it, up to ``/``, as written and as resolved, must be owned by root or by our
    effective user, and not writable by group or others -- unless its sticky bit is
    set (``/tmp``: there only a file's owner may rename or remove it). Folders that do
    not exist yet are skipped (they are made by us).

    Args:
        path: the private folder.
        key: the setting that named it, for the refusal.

    Raises:
        ConfigError: a parent fails; names ``key``, the folder, the parent, its owner
            and its mode.
    """
    path = Path(path)
    for parent in _parents(path):
        try:
            st = os.stat(parent)
        except FileNotFoundError:
            continue
        problem = None
        if st.st_uid not in (0, os.geteuid()):
            problem = f"another user's (we are uid {os.geteuid()})"
            fix = f"use a folder whose parents belong to root or to uid {os.geteuid()}"
        elif st.st_mode & WRITABLE_BY_OTHERS and not st.st_mode & stat.S_ISVTX:
            problem = "writable by others than its owner, and not sticky"
            fix = f"chmod go-w {parent} (or chmod +t, as /tmp)"
        if problem is not None:
            raise ConfigError(
                f"{key} {path}: its parent folder {parent} is {problem} ({describe(st)}): "
                "refused, as OpenSSH refuses a key file under such a folder (whoever can "
                f"write to it can move {path} away and put a symbolic link in its place); "
                f"{fix}",
                key=key,
                value=str(path),
                allowed="a folder whose every parent belongs to root or to the user "
                "Floodgate runs as and is not writable by others (unless sticky, as /tmp)",
            )


def private_dir(path: Path | str, *, key: str, tighten: bool = False) -> Path:
    """Make the folder ``path`` (and its parents) with mode 0700, or check the one that
    exists: it must be a folder of our effective user that others cannot write to.

    Args:
        path: the folder.
        key: the setting that named it (``query_group.control_dir``,
            ``admission.log_dir``, ``data_dir``), for the refusal.
        tighten: a folder of ours that others can enter or read (but not write) is set
            to 0700, with a warning: for a folder whose existing files may predate
            0600 (a broker's data). Otherwise such a folder is kept as it is (its
            files are 0600).

    Returns:
        ``path``.

    Raises:
        ConfigError: it exists but is not a folder, is owned by another user, or can be
            written by others (group or other write bit, sticky or not); or a folder
            above it is another user's or writable by others and not sticky
            (:func:`check_parents`); names ``key``, the path, its owner and its mode.
            Nothing was written into it.
        OSError: it cannot be created or read.
    """
    path = Path(path)
    check_parents(path, key=key)  # before anything is made under them
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    check_parents(path, key=key)  # and the parents just made (with the umask)
    st = os.stat(path)
    mode = stat.S_IMODE(st.st_mode)
    problem = fix = None
    if not stat.S_ISDIR(st.st_mode):
        problem, fix = "not a folder", "name a folder"
    elif st.st_uid != os.geteuid():
        problem = f"another user's (we are uid {os.geteuid()})"
        fix = "use a folder of the user Floodgate runs as"
    elif mode & WRITABLE_BY_OTHERS:
        problem, fix = "writable by others than its owner", f"chmod go-w {path}"
    if problem is not None:
        raise ConfigError(
            f"{key} {path} is {problem} ({describe(st)}): refused, as OpenSSH refuses a "
            f"key file others can change (they could swap the files in it); {fix}",
            key=key,
            value=str(path),
            allowed="a folder of the user Floodgate runs as that only it can write "
            "(mode 0700 or 0755)",
        )
    if tighten and mode & ~PRIVATE_DIR_MODE:
        os.chmod(path, PRIVATE_DIR_MODE)
        log.warning("%s %s was mode %04o: set to 0700 (its files are ours alone)", key, path, mode)
    return path
