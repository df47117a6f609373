"""Load samples for the admission decision: system CPU and memory (seed 004, "Load Metrics")."""

from __future__ import annotations

from collections import deque

import psutil

from admission.algorithm import Load


class HostLoadSampler:
    """Samples the host: CPU busy ratio over the last ``window`` samples, memory in use.

    Seed 004 uses the system CPU load of the whole machine (every process, ours or not)
    and the heap usage of its JVMs; here memory is the host's (``psutil``), since the
    jobs are processes of their own. Called once per check (10 times a second); one
    100 ms CPU reading is noisy, so the decision uses the mean of the last second.

    Args:
        window: samples averaged for the CPU figure.
    """

    def __init__(self, window: int = 10) -> None:
        self._cpu: deque[float] = deque(maxlen=window)
        psutil.cpu_percent(interval=None)  # the first reading is meaningless: prime it

    def __call__(self) -> Load:
        """A :class:`Load` now."""
        self._cpu.append(psutil.cpu_percent(interval=None) / 100.0)
        cpu = sum(self._cpu) / len(self._cpu)
        return Load(cpu=cpu, memory=psutil.virtual_memory().percent / 100.0, memory_source="host")
