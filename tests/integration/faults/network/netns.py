"""A private network of Linux network namespaces, and partitions in it.

The layout is a star: a *hub* namespace routes between *spokes*, each a veth pair
from the hub to one namespace (a broker's, the producer's), or to the root namespace
(the test process, and so the query group's driver in the session's SparkSession).
Every spoke has one address of ``10.213.<n>.0/24`` (``<n>`` one that no address or
route of the root namespace uses), as a ``/32`` routed by the hub; the hub forwards
between them (``net.ipv4.ip_forward`` in the hub alone).

A partition is a policy rule of the hub, ``ip rule add from A to B blackhole``:
packets from A to B that the hub would forward are dropped, silently (Linux's
``blackhole`` drops a forwarded packet without an ICMP answer), so both ends see what
a real partition shows them: a TCP connection whose packets go unanswered until its
own timeouts, not a refusal. A rule is one direction; :meth:`PrivateNetwork.cut`
adds both unless told otherwise. Nothing but iproute2 (``ip netns``, ``ip link``,
``ip addr``, ``ip route``, ``ip rule``) is used.

Every namespace and link this module makes is removed by :meth:`PrivateNetwork.close`
(the root namespace's veth goes with the hub, and with it its routes), which the
fixtures call whatever happened. One thing stays until the test process has exited:
an ``unreachable`` route for the subnet in the root namespace (below the spokes' routes
while they exist), so that a client the process still holds after the teardown (an
abandoned librdkafka producer, a pooled consumer of the shared SparkSession, which
live until the interpreter's very end) fails at once instead of sending to the
machine's default route: without it, such a client reached something outside the
machine that answered on port 9092 with HTTP. A small watcher process started with it
removes it once the test process is gone. It needs root (``CAP_NET_ADMIN``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

#: The private range the networks take a /24 of (RFC 1918; checked free at start).
RANGE = ipaddress.IPv4Network("10.213.0.0/16")

#: The hub's own address on every spoke link (the spokes' gateway).
HUB_HOST = 254

#: The first ``ip rule`` preference this module uses (below the main table's 32766).
RULE_PREFERENCE = 1000

#: The metric of the root namespace's ``unreachable`` route for the subnet: above the
#: spokes' routes (metric 0), which win while they exist.
FENCE_METRIC = 4000


class NetworkError(RuntimeError):
    """An ``ip`` command failed: its words and what it printed are in the message."""


def ip(*args: str) -> str:
    """Run ``ip <args>`` and return what it printed.

    Raises:
        NetworkError: it exited non-zero (names the command and its stderr).
    """
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class Host:
    """A spoke of the network.

    Attributes:
        name: a short name (``k1``, ``driver``...).
        address: its IPv4 address.
        namespace: its network namespace; ``None``: the root namespace.
    """

    name: str
    address: str
    namespace: str | None

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host's namespace (``ip netns exec``; as it is in
        the root namespace)."""
        if self.namespace is None:
            return list(argv)
        return ["ip", "netns", "exec", self.namespace, *argv]


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of :data:`RANGE` that no address or route of the root namespace touches.

    Raises:
        NetworkError: every /24 of the range is in use.
    """
    used = ip("-4", "addr") + ip("-4", "route", "show", "table", "all") + ip("-4", "rule")
    candidates = list(RANGE.subnets(new_prefix=24))[1:-1]
    start = secrets.randbelow(len(candidates))
    for subnet in candidates[start:] + candidates[:start]:
        prefix = ".".join(str(subnet.network_address).split(".")[:3]) + "."
        if prefix not in used:
            return subnet
    raise NetworkError(f"every /24 of {RANGE} is in use on this machine")


class PrivateNetwork:
    """Namespaces and veth links of one test run, and the partitions between them.

    Names: namespaces ``fg<tag>-<name>`` and the root's link ``fg<tag>`` (``<tag>``
    6 random hex digits), so that two runs on one machine never meet.

    Raises:
        NetworkError: from any method, when an ``ip`` command fails (not root, no
            free subnet).
    """

    def __init__(self) -> None:
        self.tag = secrets.token_hex(3)
        self.subnet = _free_subnet()
        self.hub = f"fg{self.tag}-hub"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._rules: list[tuple[str, str]] = []
        self._next_host = 1
        self._fence()
        try:
            self._add_namespace(self.hub)
            ip("netns", "exec", self.hub, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")
        except NetworkError:
            self.close()
            raise

    # -- building -------------------------------------------------------------

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self._namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def _address(self) -> str:
        address = str(self.subnet.network_address + self._next_host)
        self._next_host += 1
        return address

    @property
    def gateway(self) -> str:
        """The hub's address on every spoke link."""
        return str(self.subnet.network_address + HUB_HOST)

    def add(self, name: str, *, root: bool = False) -> Host:
        """A new spoke: a namespace ``fg<tag>-<name>`` (or, with ``root``, the root
        namespace), joined to the hub by a veth pair, with an address of its own.

        Raises:
            ValueError: ``name`` is taken, or longer than 8 characters (link names
                are at most 15).
            NetworkError: an ``ip`` command failed.
        """
        if name in self.hosts or len(name) > 8:
            raise ValueError(f"spoke name {name!r}: taken, or over 8 characters")
        address = self._address()
        hub_side = f"h-{name}"
        if root:
            namespace, inside = None, f"fg{self.tag}"
            ip("link", "add", inside, "type", "veth", "peer", "name", hub_side, "netns", self.hub)
            on_spoke: tuple[str, ...] = ()
        else:
            namespace, inside = f"fg{self.tag}-{name}", "eth0"
            self._add_namespace(namespace)
            ip("-n", self.hub, "link", "add", hub_side, "type", "veth", "peer", "name", inside,
               "netns", namespace)  # fmt: skip
            on_spoke = ("-n", namespace)
        ip("-n", self.hub, "addr", "add", f"{self.gateway}/32", "dev", hub_side)
        ip("-n", self.hub, "link", "set", hub_side, "up")
        ip("-n", self.hub, "route", "add", f"{address}/32", "dev", hub_side)
        ip(*on_spoke, "addr", "add", f"{address}/32", "dev", inside)
        ip(*on_spoke, "link", "set", inside, "up")
        ip(*on_spoke, "route", "add", f"{self.gateway}/32", "dev", inside)
        ip(*on_spoke, "route", "add", str(self.subnet), "via", self.gateway, "dev", inside)
        host = Host(name=name, address=address, namespace=namespace)
        self.hosts[name] = host
        return host

    def reach(self, source: Host, address: str, owner: Host) -> None:
        """Let ``source`` (a spoke namespace) reach ``address``, an address of
        ``owner`` outside the subnet (an interface of the root namespace, such as
        ``eth0``'s): ``source`` routes it through the hub, the hub to ``owner``'s link.
        Gone with the namespaces.

        Raises:
            ValueError: ``source`` is the root namespace.
            NetworkError: an ``ip`` command failed.
        """
        if source.namespace is None:
            raise ValueError(f"spoke {source.name!r} is the root namespace")
        ip("-n", self.hub, "route", "add", f"{address}/32", "dev", f"h-{owner.name}")
        ip("-n", source.namespace, "route", "add", f"{address}/32", "via", self.gateway,
           "dev", "eth0")  # fmt: skip

    # -- partitions -------------------------------------------------------------

    def cut(self, a: Host, b: Host, *, both_ways: bool = True) -> None:
        """Drop what the hub would forward from ``a`` to ``b`` (and from ``b`` to
        ``a`` unless ``both_ways`` is false), silently. Established connections stay
        open at both ends, unanswered, until their own timeouts or :meth:`heal`."""
        pairs = [(a, b), (b, a)] if both_ways else [(a, b)]
        for src, dst in pairs:
            if (src.address, dst.address) in self._rules:
                continue
            ip("-n", self.hub, "rule", "add", "from", f"{src.address}/32", "to",
               f"{dst.address}/32", "blackhole", "pref", str(RULE_PREFERENCE))  # fmt: skip
            self._rules.append((src.address, dst.address))

    def heal(self) -> None:
        """Remove every partition :meth:`cut` made."""
        while self._rules:
            src, dst = self._rules.pop()
            ip("-n", self.hub, "rule", "del", "from", f"{src}/32", "to", f"{dst}/32",
               "blackhole", "pref", str(RULE_PREFERENCE))  # fmt: skip

    @contextlib.contextmanager
    def partitioned(self, a: Host, b: Host, *, both_ways: bool = True) -> Iterator[None]:
        """:meth:`cut` for the ``with`` block, then :meth:`heal`, whatever happened."""
        self.cut(a, b, both_ways=both_ways)
        try:
            yield
        finally:
            self.heal()

    # -- removal ----------------------------------------------------------------

    def close(self) -> None:
        """Remove every namespace made (the hub last: its veths, the root's among
        them, go with it, and their routes with them). Processes still in a spoke
        namespace keep it alive (unnamed) until they exit: stop them first.

        Raises:
            NetworkError: a namespace could not be removed (after trying all).
        """
        failures = []
        with contextlib.suppress(NetworkError):  # gone with the hub too, but not at once
            if any(host.namespace is None for host in self.hosts.values()):
                ip("link", "del", f"fg{self.tag}")
        for namespace in reversed(self._namespaces):
            try:
                ip("netns", "del", namespace)
            except NetworkError as exc:
                failures.append(str(exc))
        self._namespaces.clear()
        self._rules.clear()
        if failures:
            raise NetworkError("; ".join(failures))

    def _fence(self) -> None:
        """The root namespace's ``unreachable`` route for the subnet, and a watcher
        (``sh``, in a session of its own) that deletes it once this process is gone."""
        route = ["route", "add", "unreachable", str(self.subnet), "metric", str(FENCE_METRIC)]
        ip(*route)
        script = (
            f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done; "
            f"ip route del unreachable {self.subnet} metric {FENCE_METRIC}"
        )
        subprocess.Popen(
            ["sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def __enter__(self) -> PrivateNetwork:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
