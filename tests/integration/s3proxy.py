"""A real S3-compatible server for the tests of swept BLOBs on object storage:
S3Proxy (Apache-2.0, https://github.com/gaul/s3proxy) on a jclouds ``filesystem``
blobstore in a temporary directory.

``FLOODGATE_TEST_S3_ENDPOINT`` names an existing server instead (with
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` set for it). Otherwise S3Proxy's
runnable jar (``jar-with-dependencies``) is fetched from Maven Central with Maven into
Floodgate's cache directory (:func:`pipeline.brokers.apache_kafka.artifacts.cache_dir`,
never the checkout), once per version, and started with ``java -jar`` on a free
loopback port with AWS signature v2/v4 authentication; stopped by its PID after.

Why S3Proxy: Maven Central serves it whole, under a licence the project can depend
on, and it speaks the S3 API that pyarrow's filesystem and Hadoop's ``s3a`` use. MinIO
is not on a registry this machine reaches.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow.fs as pafs

from pipeline.brokers.apache_kafka.artifacts import cache_dir, java_command
from pipeline.brokers.engines import free_port
from pipeline.brokers.maven import once, run_maven
from tests.integration.java_service import running_service

ENV_ENDPOINT = "FLOODGATE_TEST_S3_ENDPOINT"

#: The S3Proxy release (4.x runs on Java 17; its jar is 55 MB).
S3PROXY_VERSION = "4.1.0"

#: How long fetching the jar may take, seconds.
FETCH_TIMEOUT_S = 600.0

#: How long S3Proxy may take to answer after its start, seconds (~1 s here).
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class S3Server:
    """A running S3-compatible server.

    Attributes:
        endpoint: ``http://127.0.0.1:<port>``.
        access_key, secret_key: its credentials.
        region: the region clients sign for.
    """

    endpoint: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def environment(self) -> dict[str, str]:
        """The standard AWS environment that points a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def create_bucket(self, bucket: str) -> None:
        """Make ``bucket`` (Floodgate never creates one)."""
        filesystem = pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=self.region,
            endpoint_override=self.endpoint,
            allow_bucket_creation=True,
        )
        filesystem.create_dir(bucket)


def s3proxy_jar(*, timeout_s: float = FETCH_TIMEOUT_S) -> Path:
    """S3Proxy's runnable jar, fetched with Maven when not cached yet.

    Raises:
        BrokerError: no ``mvn`` on PATH, or Maven failed (with its last lines).
    """
    root = cache_dir() / f"s3proxy-{S3PROXY_VERSION}"
    jar = root / f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"

    def fetch() -> None:
        run_maven(
            [
                "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy",
                f"-Dartifact=org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies",
                f"-DoutputDirectory={root}",
            ],
            what=f"S3Proxy {S3PROXY_VERSION}",
            repository=cache_dir() / "m2",
            timeout_s=timeout_s,
            cwd=root,
        )

    once(root, fetch, version=S3PROXY_VERSION)
    return jar


@contextmanager
def s3_server() -> Iterator[S3Server]:
    """An S3-compatible server for the duration.

    Raises:
        BrokerError: the jar could not be fetched (:func:`s3proxy_jar`).
        RuntimeError: it did not answer within :data:`START_TIMEOUT_S` (with the end
            of its log).
    """
    if os.environ.get(ENV_ENDPOINT):
        yield S3Server(
            os.environ[ENV_ENDPOINT],
            os.environ["AWS_ACCESS_KEY_ID"],
            os.environ["AWS_SECRET_ACCESS_KEY"],
            os.environ.get("AWS_REGION", "us-east-1"),
        )
        return
    jar = s3proxy_jar()
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="floodgate-s3-"))
    server = S3Server(f"http://127.0.0.1:{port}", "floodgate-test", "floodgate-test-secret")
    (workdir / "data").mkdir()
    properties = workdir / "s3proxy.conf"
    properties.write_text(
        f"s3proxy.endpoint={server.endpoint}\n"
        "s3proxy.authorization=aws-v2-or-v4\n"
        f"s3proxy.identity={server.access_key}\n"
        f"s3proxy.credential={server.secret_key}\n"
        "jclouds.provider=filesystem\n"
        f"jclouds.filesystem.basedir={workdir / 'data'}\n"
    )
    try:
        with running_service(
            [*java_command(), "-Xmx256m", "-jar", str(jar), "--properties", str(properties)],
            cwd=workdir,
            log_path=workdir / "s3proxy.log",
            answers=lambda: _answers(server.endpoint),
            what=f"S3Proxy at {server.endpoint}",
            timeout_s=START_TIMEOUT_S,
        ):
            yield server
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(endpoint, timeout=2):
            return True
    except urllib.error.HTTPError:  # 403 to an anonymous request: it is up
        return True
    except OSError:
        return False
