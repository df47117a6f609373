"""The ``floodgate_kafka`` source's jar: where it is, and the Spark versions it runs on.

The source runs on the JVM (``jvm/``, Java, Spark's DataSource V2 API) and ships as a
jar inside the wheel (``pipeline/spark/jars/floodgate-spark.jar``, built by the wheel's
build step with Maven; in a source checkout by ``make jar``).
:func:`~pipeline.spark.session.build_spark_session` appends it to ``spark.jars``, so the
driver loads it and Spark ships it to every executor: ``pip install floodgate`` needs no
Maven and no network at run time.

The jar is compiled against the lowest Spark that ``pyproject.toml`` allows (4.2.0, Spark
``provided``) and tested on every minor in :data:`TESTED_SPARK_MINORS`; a session on
another Spark is refused at start (:func:`check_spark_version`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pipeline.errors import ConfigError

#: The jar's file name inside the package (``pipeline/spark/jars/``).
JAR_NAME = "floodgate-spark.jar"

#: The Spark minors the jar is built for and tested on: those ``pyproject.toml`` allows
#: (``pyspark>=4.2,<5``) and CI runs (tests/integration/deployment).
TESTED_SPARK_MINORS = ("4.2", "4.3")


def source_jar() -> Path:
    """The built jar of the ``floodgate_kafka`` source.

    Raises:
        ConfigError: the package holds no jar: a source checkout where ``make jar`` (or
            ``pip install -e .``, whose build step runs Maven) has not run.
    """
    path = Path(str(resources.files("pipeline.spark").joinpath("jars", JAR_NAME)))
    if not path.is_file():
        raise ConfigError(
            f"the floodgate_kafka source's jar is missing ({path}): in a source checkout "
            "build it with `make jar` (Maven and Java 17); an installed wheel carries it",
            key="spark.jars",
            value=str(path),
            allowed="a built jar",
        )
    return path


def check_spark_version(version: str) -> None:
    """Refuse a Spark the jar was not built and tested for.

    Args:
        version: the running Spark's version (``spark.version``, e.g. ``4.3.0``).

    Raises:
        ConfigError: its minor is not one of :data:`TESTED_SPARK_MINORS`; the message
            names both.
    """
    minor = ".".join(version.split(".")[:2])
    if minor not in TESTED_SPARK_MINORS:
        raise ConfigError(
            f"Spark {version} is not a version the floodgate_kafka source's jar runs on: "
            f"it is built for Spark 4.2.0 and tested on {', '.join(TESTED_SPARK_MINORS)}.x; "
            "install a pyspark in that range (pyproject.toml allows >=4.2,<5)",
            key="spark.version",
            value=version,
            allowed=", ".join(f"{m}.x" for m in TESTED_SPARK_MINORS),
        )
