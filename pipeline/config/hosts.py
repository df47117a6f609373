"""The interface an HTTP endpoint listens on (a query group's ``metrics_host``, the
services' hosts): :data:`BindHost`, checked by :func:`check_bind_host`."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator


def check_bind_host(value: str) -> str:
    """``value`` if it is an interface an HTTP endpoint can listen on: an IPv4 address
    (``127.0.0.1`` loopback, ``0.0.0.0`` every interface) or a host name (RFC 1123
    section 2.1: labels of letters, digits and ``-``, joined by ``.``).

    Raises:
        ValueError: anything else, naming the value and what is allowed; an empty
            host among them, which uvicorn would bind to every interface.
    """
    try:
        ipaddress.IPv4Address(value)
    except ValueError:
        labels = value.split(".")
        if not (
            0 < len(value) <= 253
            and not value.replace(".", "").isdigit()  # 999.1.1.1 is no address, nor a name
            and all(_HOST_LABEL.fullmatch(label) for label in labels)
        ):
            raise ValueError(
                f"host {value!r} is no interface to listen on; allowed: an IPv4 address "
                "(127.0.0.1 loopback, 0.0.0.0 every interface) or a host name (letters, "
                "digits, '-' and '.'); empty is refused, as it would bind every interface"
            ) from None
    return value


_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


#: The interface of an HTTP endpoint a service listens on (:func:`check_bind_host`).
BindHost = Annotated[str, AfterValidator(check_bind_host)]


def check_host_name(value: str) -> str:
    """``value`` if it is a host name (RFC 1123 section 2.1) an HTTP endpoint may be
    reached by (an ``allowed_hosts`` entry), lower-cased.

    Raises:
        ValueError: anything else (an address, a port, a pattern), naming the value.
    """
    labels = value.split(".")
    if not (
        0 < len(value) <= 253
        and not value.replace(".", "").isdigit()
        and all(_HOST_LABEL.fullmatch(label) for label in labels)
    ):
        raise ValueError(
            f"{value!r} is no host name; allowed: letters, digits, '-' and '.', without "
            "a port (IP addresses and localhost are always answered)"
        )
    return value.lower()


#: A host name an endpoint answers to in ``Host`` (:func:`check_host_name`).
HostName = Annotated[str, AfterValidator(check_host_name)]
