"""A job's environment: built, never inherited from the service (issue 26).

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
2. plus the job's own ``env``, each name checked against the **deny-list**
   (:func:`denied_reason`): variables that make a loader, an interpreter, a shell,
   the JVM or Spark's launch scripts load or run something else. A job naming one
   is refused (403) and nothing is stored or started.

Nothing else of the service's environment reaches a job: not its
``FLOODGATE__*`` variables (``FLOODGATE__ADMISSION__TOKEN`` among them), not its
cloud credentials. The deny-list is matched without regard to case.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

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
    "FLOODGATE__ADMISSION__": "the admission service's own settings are not a job's",
}


def denied_reason(name: str) -> str | None:
    """Why a job's ``env`` may not set ``name``; ``None`` when it may.

    The deny-list (issue 26) is :data:`DENIED_NAMES` and :data:`DENIED_PREFIXES`,
    matched upper-cased.
    """
    upper = name.upper()
    if upper in DENIED_NAMES:
        return DENIED_NAMES[upper]
    for prefix, reason in DENIED_PREFIXES.items():
        if upper.startswith(prefix):
            return reason
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
