"""Load samples for the admission decision: system CPU and memory.

Emergency mode is entered when *any* memory watched is nearly full (the rule was
written for a core's and each worker's JVM heap). Here the memory figure is the highest
of the host's memory usage and the heap usage of every Spark driver whose metrics
endpoint is known: a driver near its ``-Xmx`` fails its jobs with OutOfMemoryError
long before the host runs short, and starting more jobs then only adds to it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from admission.algorithm import Load
from pipeline.errors import FloodgateError, UntrustedEndpointError, UntrustedFileError
from pipeline.http.control_file import ControlFile, read_control_file, verify_endpoint

log = logging.getLogger(__name__)

#: The query group's driver heap gauges (``pipeline.metrics.QueryGroupMetrics``).
HEAP_USED = "floodgate_query_group_jvm_heap_used_bytes"
HEAP_MAX = "floodgate_query_group_jvm_heap_max_bytes"
#: The least CPU time, per CPU, a CPU reading must span to count, seconds (the kernel
#: counts CPU time in ticks of 10 ms: 5 ticks).
MIN_READING_S = 0.05


def heap_ratios(metrics_text: str) -> dict[str, float]:
    """``{query group: heap used / heap max}`` from a query group's ``/metrics`` text
    (groups without both samples, or with a max of 0, are left out)."""
    used: dict[str, float] = {}
    most: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name not in (HEAP_USED, HEAP_MAX):
            continue
        into = used if family.name == HEAP_USED else most
        for sample in family.samples:
            into[sample.labels.get("query_group", "")] = sample.value
    return {name: used[name] / most[name] for name in used if most.get(name)}


def combine(host_memory: float, heaps: Mapping[str, float]) -> tuple[float, str]:
    """The memory figure and where it came from: the highest of the host's usage
    (``"host"``) and each driver heap's (``"jvm:<query group>"``); the host on a tie.

    Args:
        host_memory: host memory usage ratio, 0..1.
        heaps: ``{query group: heap usage ratio}``.
    """
    memory, source = host_memory, "host"
    for name, ratio in sorted(heaps.items()):
        if ratio > memory:
            memory, source = ratio, f"jvm:{name}"
    return memory, source


class DriverHeaps:
    """The heap usage of Spark drivers, read from their metrics endpoints in the background.

    Endpoints: every query group control file in ``control_dir``
    (``<name>.json`` with its ``url``: the query groups of this host, found as they
    start and stop) plus ``urls`` (``http://host:port``, any host). Each is read every
    ``interval_s`` with a short timeout by a daemon thread, so the check (10 times a
    second) never waits on HTTP; an endpoint that does not answer drops out until it
    does. A control file is trusted only when it is a regular file of the service's
    own user that others cannot write to, reached without a symbolic link
    (:func:`~pipeline.state.files.read_trusted`: another user could have written any
    other), and its
    endpoint is read only when it proves it is the driver that wrote the file
    (:func:`~pipeline.http.control_file.verify_endpoint`: the process alive, ours,
    listening on the port, answering the file's identity challenge), checked before
    every read. Another is left out, with one warning naming the file (its owner and
    mode, or the pid and port).

    Args:
        control_dir: where query groups write their control files (``None``: none).
        urls: metrics endpoints named in the config.
        interval_s: seconds between reads.
        timeout_s: per request.
    """

    def __init__(
        self,
        *,
        control_dir: str | Path | None,
        urls: Iterable[str] = (),
        interval_s: float = 1.0,
        timeout_s: float = 0.5,
    ) -> None:
        self.control_dir = Path(control_dir) if control_dir is not None else None
        # ``http://host:port``; a URL given with its ``/metrics`` path (as Prometheus
        # scrape targets are written) is the same endpoint.
        self.urls = [u.rstrip("/").removesuffix("/metrics") for u in urls]
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._ratios: dict[str, float] = {}
        self._untrusted: set[tuple[object, ...]] = set()  # warned of already
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def control_files(self) -> list[ControlFile]:
        """The trusted control files in ``control_dir`` now (others warned of once)."""
        found: list[ControlFile] = []
        if self.control_dir is not None and self.control_dir.is_dir():
            for path in sorted(self.control_dir.glob("*.json")):
                try:
                    found.append(read_control_file(path))
                except UntrustedFileError as exc:
                    self._warn_untrusted((exc.path, exc.uid, exc.mode), exc)
                except (OSError, ValueError):
                    continue  # being written or removed: next time
        return found

    def endpoints(self) -> list[str]:
        """The base URLs to read now (those of control files not yet verified)."""
        found = list(self.urls) + [c.url for c in self.control_files()]
        return list(dict.fromkeys(found))

    def _warn_untrusted(self, seen: tuple[object, ...], exc: FloodgateError) -> None:
        """Warn once of a control file that is not trusted (again if it changes)."""
        if seen not in self._untrusted:
            self._untrusted.add(seen)
            log.warning("driver heap not read: control file %s", exc)

    def refresh(self) -> dict[str, float]:
        """Read every endpoint once; the new ``{query group: heap usage ratio}``."""
        ratios: dict[str, float] = {}
        with httpx.Client(timeout=self.timeout_s) as client:
            urls = list(self.urls)
            for control in self.control_files():
                try:
                    verify_endpoint(control, client)
                except UntrustedEndpointError as exc:
                    self._warn_untrusted((exc.path, exc.pid, exc.port), exc)
                    continue
                urls.append(control.url)
            for url in dict.fromkeys(urls):
                try:
                    response = client.get(f"{url}/metrics")
                    response.raise_for_status()
                except httpx.HTTPError as exc:
                    log.debug("driver metrics at %s not read: %s", url, exc)
                    continue
                ratios.update(heap_ratios(response.text))
        with self._lock:
            self._ratios = ratios
        return ratios

    def ratios(self) -> dict[str, float]:
        """The last read ``{query group: heap usage ratio}``."""
        with self._lock:
            return dict(self._ratios)

    def start(self) -> DriverHeaps:
        """Read in the background every ``interval_s``."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, name="floodgate-driver-heaps", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _loop(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception:
                log.warning("driver heaps not read", exc_info=True)
            if self._stop.wait(self.interval_s):
                return


def busy_and_total(times: Any) -> tuple[float, float]:
    """The busy and total CPU seconds of a ``psutil.cpu_times()`` reading, summed over
    every CPU, as psutil's own ``cpu_percent`` counts them: idle and iowait are idle;
    guest time is already in user time on Linux, so it is not counted twice; steal is
    busy (a CPU another tenant holds is not ours to start jobs on)."""
    fields: dict[str, float] = times._asdict()
    total = sum(fields.values()) - fields.get("guest", 0.0) - fields.get("guest_nice", 0.0)
    idle = fields["idle"] + fields.get("iowait", 0.0)
    return total - idle, total


class HostLoadSampler:
    """Samples the host: CPU busy ratio over the last ``window`` samples, and memory
    usage: the host's, or a known Spark driver's heap when that is higher.

    The rule uses the system CPU load of the whole machine (every process, ours or
    not). Called once per check (10 times a second); one 100 ms CPU reading is noisy,
    so the decision uses the mean of the last second.

    Each reading is the busy share of the CPU time since the previous one, from this
    sampler's own ``psutil.cpu_times()`` (not ``cpu_percent(interval=None)``, whose
    reference point is shared by every caller in the process). A reading over less
    than :data:`MIN_READING_S` of CPU time means nothing -- ``cpu_percent`` calls one
    0.0 -- and is not counted: the service's first sample, taken right after this
    sampler was made, used to read 0.0 and pulled the first second's mean under the
    limit, so a service started on a saturated host started its queue at once. The
    first call therefore waits until a reading means something.

    Args:
        window: samples averaged for the CPU figure.
        heaps: the drivers' heaps (``None``: host memory only).
    """

    def __init__(self, window: int = 10, heaps: DriverHeaps | None = None) -> None:
        self._cpu: deque[float] = deque(maxlen=window)
        self.heaps = heaps
        self._last = busy_and_total(psutil.cpu_times())

    def _read_cpu(self) -> float | None:
        busy, total = busy_and_total(psutil.cpu_times())
        d_busy, d_total = busy - self._last[0], total - self._last[1]
        if d_total < MIN_READING_S * psutil.cpu_count():
            return None
        self._last = (busy, total)
        return min(max(d_busy / d_total, 0.0), 1.0)

    def cpu(self) -> float:
        """The mean CPU busy ratio of the last ``window`` readings (0..1); the first call
        waits (up to a second) for a reading that means something."""
        reading = self._read_cpu()
        deadline = time.monotonic() + 1.0
        while reading is None and not self._cpu and time.monotonic() < deadline:
            time.sleep(MIN_READING_S)
            reading = self._read_cpu()
        if reading is not None:
            self._cpu.append(reading)
        return sum(self._cpu) / len(self._cpu) if self._cpu else math.nan

    def __call__(self) -> Load:
        """A :class:`Load` now."""
        cpu = self.cpu()
        host = psutil.virtual_memory().percent / 100.0
        memory, source = combine(host, self.heaps.ratios() if self.heaps is not None else {})
        return Load(cpu=cpu, memory=memory, memory_source=source)
