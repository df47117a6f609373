# The Floodgate image: Java 17 for Spark, and the project with its dependencies.
# docker-compose.yml runs every Floodgate component from it: a query group
# (`floodgate run`, Spark in local mode inside the container), the demo producer
# (`floodgate produce`), the admission service and the sweeper.
FROM python:3.11-slim-bookworm

# default-jre-headless is OpenJDK 17 on bookworm; /usr/lib/jvm/default-java on any arch.
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless procps tini \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/default-java \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=python \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 floodgate \
    && mkdir -p /app /data \
    && chown floodgate:floodgate /app /data
WORKDIR /app

# Dependencies first (a layer that changes only with pyproject.toml), then the code,
# installed as a wheel is (not editable): schemas and shipped configs are package data.
COPY --chown=floodgate:floodgate pyproject.toml README.md ./
RUN mkdir -p pipeline/brokers/apache_kafka admission sweeper schemas conf \
    && touch pipeline/__init__.py pipeline/brokers/apache_kafka/__init__.py \
        admission/__init__.py sweeper/__init__.py \
    && pip install '.[demo]' \
    && pip uninstall -y floodgate \
    && rm -rf pipeline admission sweeper schemas conf build
COPY --chown=floodgate:floodgate pipeline pipeline
COPY --chown=floodgate:floodgate admission admission
COPY --chown=floodgate:floodgate sweeper sweeper
COPY --chown=floodgate:floodgate conf conf
COPY --chown=floodgate:floodgate schemas schemas
RUN pip install --no-deps . && rm -rf build && floodgate --help > /dev/null

USER floodgate
# Shared state of the compose stack (checkpoints, sweep catalog, BLOBs, job database).
VOLUME ["/data"]
# tini reaps Spark's child processes and passes SIGTERM on: a query group stops cleanly.
ENTRYPOINT ["tini", "--", "floodgate"]
CMD ["--help"]
