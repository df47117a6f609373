"""A job's environment: built, never inherited from the service.

The allowlist says which programs a job may run; a job's environment must not
change what those programs load before they do their work. Once a dynamic loader
honoured ``LD_PRELOAD``, Python ``PYTHONPATH`` (a ``sitecustomize.py``),
``spark-submit`` ``SPARK_HOME`` (another ``bin/spark-class``), and a
``#!/usr/bin/env bash`` script ``PATH``, the allowlist could be walked around
through the job's ``env``; and every job saw the service's own variables, its
token among them. So a job's environment is:

1. the **base set**: ``PATH`` from ``admission.job_path``; ``HOME``, ``USER``,
   ``LOGNAME``, ``SHELL``, ``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``, ``TMPDIR`` and
   ``JAVA_HOME`` when the service has them (:data:`BASE_NAMES`); then
   ``admission.job_env``, the operator's own fixed variables (``SPARK_HOME``,
   ``HADOOP_CONF_DIR``, ...); and ``FLOODGATE_ADMISSION_JOB_ID``, the job's id;
2. plus the job's own ``env``, each name checked twice: it must be on the
   operator's **allow-list**, ``admission.job_env_allowlist`` (:func:`env_allowed`:
   names, and prefixes ending in ``*``; empty by default, so a job sets nothing the
   operator did not name), and off the **deny-list** (:func:`denied_reason`):
   variables that make a loader, an interpreter, a shell, the JVM or Spark's launch
   scripts load or run something else -- glibc's whole list of unsafe variables
   among them. The deny-list is a second guard the allow-list cannot override: an
   allow-list entry it wholly covers is refused at start
   (:func:`allowlist_entry_reason`). A job naming a variable either refuses is
   refused (403) and nothing is stored or started.

Nothing else of the service's environment reaches a job: not its
``FLOODGATE__*`` variables (``FLOODGATE__ADMISSION__TOKEN`` among them), not its
cloud credentials. The deny-list is matched without regard to case.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

#: The variable that tells a job's process its job id (set by the service, last:
#: a job cannot set it). Adoption after a restart looks for it (see
#: :mod:`admission.runner`).
JOB_ID_VARIABLE = "FLOODGATE_ADMISSION_JOB_ID"

#: Names passed from the service's own environment to every job, when set: who the
#: job runs as, its locale and time zone, its temporary directory, and the Java that
#: ``spark-submit`` and PySpark start (``JAVA_HOME``; ``java`` on ``PATH`` otherwise).
BASE_NAMES: tuple[str, ...] = (
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "JAVA_HOME",
)
#: Prefixes of more base names (the locale's categories: ``LC_ALL``, ``LC_CTYPE``, ...).
BASE_PREFIXES: tuple[str, ...] = ("LC_",)

#: Names a job's ``env`` may not set, and why (matched upper-cased).
DENIED_NAMES: Mapping[str, str] = {
    "PATH": "it decides which program a bare name or a '#!/usr/bin/env' line runs",
    "HOME": "programs read their start-up files from it (git, Python's user site, Ivy)",
    "ENV": "sh and bash in POSIX mode run the file it names at start",
    "BASH_ENV": "bash runs the file it names at start",
    "SHELLOPTS": "it turns on shell options (xtrace, which runs PS4) in every bash",
    "BASHOPTS": "it turns on shell options in every bash",
    "PS4": "bash expands it, command substitutions included, under xtrace",
    "IFS": "it changes how shell scripts split words",
    "CDPATH": "it changes where shell scripts' cd goes",
    "GLOBIGNORE": "it changes how shell scripts expand file names",
    "ZDOTDIR": "zsh reads its start-up files from it",
    "FPATH": "ksh and zsh load functions from it",
    "PROMPT_COMMAND": "bash runs it",
    "CLASSPATH": "the JVM loads classes from it",
    "_JAVA_OPTIONS": "the JVM takes options from it (-javaagent runs code)",
    "NODE_OPTIONS": "node takes options from it (--require runs code)",
    "NODE_PATH": "node loads modules from it",
    "PERLLIB": "perl loads modules from it",
    "GCONV_PATH": "glibc loads character set converters (shared objects) from it",
    "GLIBC_TUNABLES": "it changes glibc's allocator and loader",
    "LOCPATH": "glibc reads locale files from it",
    "NLSPATH": "programs read message catalogs from it",
    "HOSTALIASES": "it changes how host names resolve",
    "RESOLV_HOST_CONF": "it changes how host names resolve",
    "OPENSSL_CONF": "OpenSSL loads engines and providers (shared objects) its file names",
    "OPENSSL_ENGINES": "OpenSSL loads engines (shared objects) from it",
    "OPENSSL_MODULES": "OpenSSL loads providers (shared objects) from it",
    # glibc's own list of variables unsafe for a privileged program (elf/dl-support and
    # sysdeps/generic/unsecvars.h), each refused by name; LD_* is refused by prefix.
    "GETCONF_DIR": "getconf runs the programs in the folder it names (glibc's unsafe list)",
    "LOCALDOMAIN": "it changes how host names resolve (glibc's unsafe list)",
    "RES_OPTIONS": "it changes the resolver's options (glibc's unsafe list)",
    "NIS_PATH": "it changes where NIS+ looks names up (glibc's unsafe list)",
    "TZDIR": "glibc reads time zone files from it (glibc's unsafe list)",
    "TMPDIR": "it moves where programs write temporary files (glibc's unsafe list); "
    "the service passes its own",
    "MALLOC_TRACE": "glibc's mtrace writes to the file it names (glibc's unsafe list)",
    # Libraries that load plug-ins or configuration named by a variable.
    "KRB5_CONFIG": "Kerberos reads its configuration (and the plug-ins it names) from it",
    "KRB5CCNAME": "Kerberos takes the credentials cache (and its kind) from it",
    "KRB5_KTNAME": "Kerberos takes the keytab from it",
    "KRB5_CLIENT_KTNAME": "Kerberos takes the client keytab from it",
    "KRB5_TRACE": "Kerberos writes a trace to the file it names",
    "SASL_PATH": "Cyrus SASL loads its mechanisms (shared objects) from it",
    "SASL_CONF_PATH": "Cyrus SASL reads its configuration (and the plug-ins it names) from it",
    "GIO_MODULE_DIR": "GLib loads modules (shared objects) from it",
    "GIO_EXTRA_MODULES": "GLib loads modules (shared objects) from it",
    "GTK_MODULES": "GTK loads the modules (shared objects) it names",
    "QT_PLUGIN_PATH": "Qt loads plug-ins (shared objects) from it",
    "SSLKEYLOGFILE": "TLS libraries write every session's keys to the file it names",
    "LIBC_FATAL_STDERR_": "it changes where glibc writes its fatal errors",
    JOB_ID_VARIABLE: "the service sets it: it identifies the job's process",
}

#: Prefixes a job's ``env`` may not use, and why (matched upper-cased).
DENIED_PREFIXES: Mapping[str, str] = {
    "LD_": "the dynamic loader takes libraries and paths from LD_* (LD_PRELOAD runs code)",
    "DYLD_": "the macOS loader takes libraries from DYLD_*",
    "PYTHON": "Python takes its path, start-up file and home from PYTHON* (PYTHONPATH "
    "with a sitecustomize.py runs code)",
    "PYSPARK_": "PySpark takes the Python it runs from PYSPARK_*",
    "SPARK_": "Spark's launch scripts take their home, conf dir (spark-env.sh is run), "
    "JVM options and classpath from SPARK_*; give Spark settings as --conf in argv",
    "HADOOP_": "Hadoop's client takes its home, native libraries and options from HADOOP_*",
    "YARN_": "YARN's client takes its conf dir and options from YARN_*",
    "JAVA_": "JAVA_HOME picks the java that runs and JAVA_TOOL_OPTIONS adds -javaagent",
    "JDK_": "the java launcher takes options from JDK_JAVA_OPTIONS (-javaagent runs code)",
    "BASH_FUNC_": "bash imports functions from BASH_FUNC_* (they replace commands)",
    "PERL5": "perl takes modules and options from PERL5LIB / PERL5OPT",
    "RUBY": "ruby takes modules and options from RUBYLIB / RUBYOPT",
    "GEM_": "ruby loads gems from GEM_PATH / GEM_HOME",
    "LUA_": "lua loads modules from LUA_PATH / LUA_CPATH",
    "XDG_": "programs read their configuration from XDG_CONFIG_HOME and the like",
    "GIT_": "git runs programs GIT_* name (GIT_SSH_COMMAND, GIT_EXEC_PATH, ...)",
    "MALLOC_": "glibc's allocator takes checks, traces and tunables from MALLOC_* "
    "(glibc's unsafe list names MALLOC_TRACE)",
    "GCONV_": "glibc loads character set converters from GCONV_PATH",
    "KRB5": "Kerberos takes its configuration, plug-ins, keytabs and caches from KRB5*",
    "SASL_": "Cyrus SASL loads mechanisms and configuration from SASL_*",
    "GST_PLUGIN": "GStreamer loads plug-ins (shared objects) from GST_PLUGIN_*",
    "FLOODGATE__ADMISSION__": "the admission service's own settings are not a job's",
}


def denied_reason(name: str) -> str | None:
    """Why a job's ``env`` may not set ``name``; ``None`` when it may.

    The deny-list is :data:`DENIED_NAMES` and :data:`DENIED_PREFIXES`,
    matched upper-cased.
    """
    upper = name.upper()
    if upper in DENIED_NAMES:
        return DENIED_NAMES[upper]
    for prefix, reason in DENIED_PREFIXES.items():
        if upper.startswith(prefix):
            return reason
    return None


def env_allowed(name: str, allowlist: Sequence[str]) -> bool:
    """Whether ``admission.job_env_allowlist`` lets a job's ``env`` set ``name``.

    An entry is a variable's name, matched exactly (names are case-sensitive), or a
    prefix followed by ``*`` (``APP_*`` allows ``APP_MODE``); ``*`` alone allows every
    name. The deny-list (:func:`denied_reason`) is checked as well, whatever this says.
    """
    for entry in allowlist:
        if entry.endswith("*"):
            if name.startswith(entry[:-1]):
                return True
        elif name == entry:
            return True
    return False


def allowlist_entry_reason(entry: str) -> str | None:
    """Why ``entry`` cannot be on ``admission.job_env_allowlist``; ``None`` when it can.

    Refused: an entry the deny-list wholly covers (``LD_PRELOAD``, ``SPARK_*``: the
    deny-list would refuse every name it allows, so the operator meant something the
    service will not do), an entry with ``*`` anywhere but at its end, and one that
    is no valid name (:func:`invalid_reason`).
    """
    stem = entry[:-1] if entry.endswith("*") else entry
    if "*" in stem:
        return f"{entry!r}: '*' may only end an entry (a prefix)"
    if stem:
        invalid = invalid_reason(stem, "")
        if invalid is not None:
            return f"{entry!r}: {invalid}"
    upper = stem.upper()
    if stem == entry:
        denied = denied_reason(entry)
        if denied is not None:
            return f"{entry!r} is on the deny-list: {denied}"
        return None
    for prefix, reason in DENIED_PREFIXES.items():
        if upper.startswith(prefix):
            return f"every name {entry!r} allows is on the deny-list: {reason}"
    return None


def invalid_reason(name: str, value: str) -> str | None:
    """Why ``name=value`` cannot be put in a process's environment at all (an empty
    name, ``=`` in the name, a NUL byte: ``execve`` cannot carry them); ``None`` when
    it can."""
    if not name:
        return "an environment variable needs a name"
    if "=" in name:
        return f"environment variable name {name!r} holds '=' (names cannot)"
    if "\0" in name:
        return f"environment variable name {name!r} holds a NUL byte"
    if "\0" in value:
        return f"the value of environment variable {name!r} holds a NUL byte"
    return None


def base_environment(
    *, job_path: str, job_env: Mapping[str, str], service_env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The base set every job starts from (see the module's docstring).

    Args:
        job_path: ``admission.job_path``, the jobs' ``PATH``.
        job_env: ``admission.job_env``, the operator's fixed variables (they may name
            variables a job's own ``env`` may not: the operator owns the service).
        service_env: the service's environment (default ``os.environ``); only
            :data:`BASE_NAMES` and :data:`BASE_PREFIXES` are read from it.
    """
    source = os.environ if service_env is None else service_env
    base = {
        name: value
        for name, value in source.items()
        if name in BASE_NAMES or name.startswith(BASE_PREFIXES)
    }
    base["PATH"] = job_path
    base.update(job_env)
    return base


def job_environment(base: Mapping[str, str], env: Mapping[str, str], job_id: int) -> dict[str, str]:
    """The environment of job ``job_id``: ``base`` (:func:`base_environment`), the job's
    ``env`` over it, and :data:`JOB_ID_VARIABLE`. The job's ``env`` must have passed
    :func:`denied_reason` and :func:`invalid_reason` (the service checks both at
    submit and again at start)."""
    return {**base, **env, JOB_ID_VARIABLE: str(job_id)}
