"""Which ``Host`` headers the web UI answers: the defence against DNS rebinding.

A page on ``evil.example`` can make its own name resolve to 127.0.0.1 and
then talk to the loopback web UI as a same-origin site: the browser sends
``Host: evil.example:8780``. Answering only the names this server is
actually reached by (127.0.0.1, localhost, [::1] and the listen address,
with the port it listens on, plus ``webui.allowed_hosts``) closes that
door before authentication is even looked at.

On a non-loopback listen address (``webui.allow_remote``) the names users
reach it by are not known, so the check applies only once
``webui.allowed_hosts`` lists them; ``*`` in that list turns the check off.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from homeagent.msg import Msg

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def _host_name(host: str) -> str:
    """A listen host as it appears in a Host header: IPv6 in brackets, lower case, no trailing dot."""
    host = host.strip().lower().rstrip(".")
    if ":" in host and not host.startswith("["):
        try:
            host = f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            pass
    return host


def split_host(value: str) -> tuple[str, int | None]:
    """``Host`` header → (name, port or None); names lower-cased, a trailing dot dropped, IPv6 bracketed."""
    value = value.strip().lower()
    port: int | None = None
    if value.startswith("["):
        name, _, rest = value.partition("]")
        name += "]"
        if rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit():  # ("²".isdigit(), but int refuses it)
            port = int(rest[1:])
    else:
        name, sep, port_text = value.rpartition(":")
        if not sep:
            name = value
        elif port_text.isascii() and port_text.isdigit():
            port = int(port_text)
        else:
            name = value
    return _host_name(name), port


@dataclass
class HostCheck:
    """The Host headers one running server accepts; configured once it knows its address and port."""

    names: frozenset[str] = frozenset()  # accepted with the server's port (or none when it is 80)
    exact: frozenset[tuple[str, int]] = frozenset()  # name:port pairs from webui.allowed_hosts
    port: int = 0
    enabled: bool = False
    shown: list[str] = field(default_factory=list)

    def configure(self, listen_host: str, port: int, *, loopback: bool, allowed: Iterable[str]) -> None:
        extra = [a.strip() for a in allowed if a.strip()]
        self.port = port
        self.enabled = (loopback or bool(extra)) and "*" not in extra
        names = set(LOOPBACK_NAMES)
        names.add(_host_name(listen_host))
        exact = set()
        for item in extra:
            name, item_port = split_host(item)
            if item_port is None:
                names.add(name)
            else:
                exact.add((name, item_port))
        self.names, self.exact = frozenset(names), frozenset(exact)
        self.shown = sorted(f"{n}:{port}" for n in names) + sorted(f"{n}:{p}" for n, p in exact)

    def allows(self, header: str | None) -> bool:
        if not self.enabled or header is None:  # no Host at all (HTTP/1.0) is not a browser being rebound
            return True
        name, port = split_host(header)
        if (name, port) in self.exact:
            return True
        return name in self.names and (port == self.port or (port is None and self.port == 80))

    def refusal(self, header: str) -> str:
        return Msg(
            "this web UI answers only as {names}; Host {host!r} is not one of them "
            "(protection against DNS rebinding). To reach it by another name, add the name to webui.allowed_hosts.",
            names=", ".join(self.shown), host=header[:200],
        )
