"""A service keeps its memory and its secrets to itself.

* :func:`make_undumpable` makes the calling process non-dumpable
  (``prctl(PR_SET_DUMPABLE, 0)``, Linux's prctl(2)): the kernel then refuses other
  processes of the same user -- a job the admission service started, a Python worker
  -- ``/proc/<pid>/environ``, ``/proc/<pid>/mem``, ``ptrace`` and core dumps
  (proc(5): such files belong to root, and ``ptrace_may_access`` fails without
  ``CAP_SYS_PTRACE``). ``execve`` of an ordinary program sets the flag back to 1, so
  what the service starts (jobs, the Spark JVM) is dumpable as before.
* :func:`take_secret_variables` removes the service's secrets from its own
  environment once they are read, so no child inherits them (PySpark launches the
  JVM with a copy of ``os.environ``; the JVM its Python workers).

The admission service, the sweeper and the query-group driver call both as they start
(``floodgate admission serve``, ``floodgate sweeper serve``, ``floodgate run``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys
from collections.abc import MutableMapping
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: ``prctl`` option (linux/prctl.h).
PR_SET_DUMPABLE = 4
#: ``prctl`` option (linux/prctl.h).
PR_GET_DUMPABLE = 3

#: Floodgate's own variables, the only ones :func:`take_secret_variables` removes
#: (``FLOODGATE_CONTROL_TOKEN``, ``FLOODGATE__<SECTION>__<KEY>`` overrides). A
#: credential the JVM reads from the environment (s3a's ``AWS_SECRET_ACCESS_KEY``) is
#: left for it.
FLOODGATE_PREFIX = "FLOODGATE"
#: A secret's name, as Spark's ``spark.redaction.regex`` (``secret|password|token|
#: access[.]key``) recognises one, widened to any ``*_KEY`` (``INTAKE_KEY``), JAAS
#: settings and credentials.
SECRET_NAME = re.compile(r"(?i)secret|passw(or)?d|token|jaas|credential|_key$")


def _prctl(option: int, value: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.prctl(option, value, 0, 0, 0))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}): {os.strerror(errno)}")
    return result


def make_undumpable() -> bool:
    """Make this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``).

    Returns:
        ``True`` when the flag is now 0; ``False`` on a system without ``prctl`` (not
        Linux), where nothing is done.

    Raises:
        OSError: the kernel refused the call (never expected on Linux).
    """
    if not sys.platform.startswith("linux"):
        return False
    _prctl(PR_SET_DUMPABLE, 0)
    return True


def is_dumpable() -> bool | None:
    """This process's dumpable flag (``None`` where ``prctl`` does not exist)."""
    if not sys.platform.startswith("linux"):
        return None
    return _prctl(PR_GET_DUMPABLE) != 0


def is_secret_variable(name: str, value: str) -> bool:
    """Whether ``name=value`` is one of Floodgate's variables that carries a secret:
    its name says so (:data:`SECRET_NAME`), or it is a URL with a password
    (``postgresql://user:password@host/db``)."""
    if not name.upper().startswith(FLOODGATE_PREFIX):
        return False
    if SECRET_NAME.search(name):
        return True
    try:
        return urlsplit(value).password is not None
    except ValueError:
        return False


def take_secret_variables(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Remove Floodgate's secret-bearing variables (:func:`is_secret_variable`) from
    ``env``, once they have been read: whatever the process starts later does not
    inherit them.

    Args:
        env: the environment (default ``os.environ``, which also unsets them in the
            process's C environment).

    Returns:
        ``{name: value}`` of what was removed (held in memory by the caller, if needed).
    """
    env = os.environ if env is None else env
    taken = {name: env[name] for name in list(env) if is_secret_variable(name, env[name])}
    for name in taken:
        del env[name]
    if taken:
        log.debug("removed from the environment of what this process starts: %s", sorted(taken))
    return taken


def keep_to_ourselves() -> None:
    """:func:`make_undumpable`, with a warning when the system cannot."""
    if not make_undumpable():
        log.warning(
            "this system has no prctl(PR_SET_DUMPABLE): other processes of this user may "
            "read this service's memory and environment"
        )
