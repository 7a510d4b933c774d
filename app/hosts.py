"""This server's own address: the one absolute links are built on, and the hosts it answers to.

A request's `Host` header is the client's to write. A link built on it, mailed to someone else
(a password reset), would carry that person's secret to whatever host the sender named. So:
absolute links are built on `LOOPGRADE_PUBLIC_URL` (required once mail can be sent), and a
request whose `Host` names another server is refused before any route runs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.admission import LIVENESS_PATH
from app.settings import Settings

log = logging.getLogger("loopgrade.hosts")

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


class PublicUrlRequired(RuntimeError):
    """Mail can be sent, but no public address is set to build its links on."""


def public_url_problem(settings: Settings) -> str | None:
    """Why this server must not start as configured, or None."""
    if settings.smtp_host and not settings.public_url:
        return (
            "LOOPGRADE_PUBLIC_URL must be set (e.g. https://grader.example.edu) when "
            "LOOPGRADE_SMTP_HOST is: mailed links are built on it, never on a request's Host"
        )
    return None


def public_base_url(request: Request, settings: Settings) -> str:
    """This server's address, without a trailing slash, for a link that leaves the page: the
    public URL, else (no mail is sent then) the address the request came to, whose host
    `AllowedHosts` has checked."""
    return (settings.public_url or str(request.base_url)).rstrip("/")


# A name or IPv4 address, or a bracketed IPv6 address, and an optional port: nothing else
# (no user info, path or spaces that another parser could read differently).
_HOST = re.compile(r"(?:(?P<name>[A-Za-z0-9.-]+)|\[(?P<ipv6>[0-9A-Fa-f:.]+)\])(?::[0-9]{1,5})?")


def host_name(host_header: str) -> str:
    """The name in a `Host` header, without its port, lower case ("[::1]:8000" is "::1");
    "" when the header is not a plain host."""
    match = _HOST.fullmatch(host_header.strip())
    if match is None:
        return ""
    return (match["name"] or match["ipv6"]).lower().rstrip(".")


def allowed_host_names(settings: Settings) -> frozenset[str]:
    """The names this server answers to, besides the address each connection came to."""
    names = set(LOOPBACK_NAMES)
    if settings.public_url:
        names.add(host_name(urlsplit(settings.public_url).netloc))
    names.update(
        host_name(name.strip()) for name in settings.allowed_hosts.split(",") if name.strip()
    )
    return frozenset(names)


ErrorResponse = Callable[[Request, int, str, str], Response]


class AllowedHosts:
    """Refuse (400, with a sentence) a request whose `Host` is not this server's: a name of
    `allowed_host_names`, or the address the connection came to (what `serve` binds)."""

    def __init__(self, app: ASGIApp, *, settings: Settings, error_response: ErrorResponse) -> None:
        self.app = app
        self.names = allowed_host_names(settings)
        self.public_url = settings.public_url
        self.error_response = error_response

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host")
        # No Host (HTTP/1.0): the request's address is the socket's own. A liveness probe
        # (a load balancer's, by an internal name) is answered whatever its Host: its answer
        # carries no link.
        if host is None or scope["path"] == LIVENESS_PATH or self._is_ours(host, scope):
            await self.app(scope, receive, send)
            return
        where = self.public_url or "the address it was started at"
        log.warning("refused a request for host %r (not this server's)", host[:100])
        response = self.error_response(
            Request(scope),
            400,
            "Wrong address",
            f"This server does not answer to the host “{host[:100]}”. Open it at {where}.",
        )
        await response(scope, receive, send)

    def _is_ours(self, host: str, scope: Scope) -> bool:
        name = host_name(host)
        if name and name in self.names:
            return True
        server = scope.get("server")
        return bool(name) and server is not None and name == str(server[0]).lower()
