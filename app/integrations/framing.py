"""Who may frame the pages: this site and the registered platforms, not everyone.

Pages are rendered with `frame-ancestors *` in their Content-Security-Policy; this
middleware narrows that to `'self'` and the origins of the registered platforms: their
issuer and auth URLs, and the origins their signed launches name (`tool_platform.url`,
`launch_presentation.return_url`: Canvas frames from the school's own domain, which is
neither its issuer nor its auth host).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import anyio.to_thread
from sqlalchemy import select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.db import SessionFactory
from app.integrations.models import LtiPlatform

CACHE_SECONDS = 10.0
# Threads, and so database connections, the reload of the origins takes at once.
FRAME_ANCESTORS_RELOADS = 1
_ANY_ANCESTOR = b"frame-ancestors *"


def origin_of(url: object) -> str | None:
    """`scheme://host[:port]` of an http(s) URL, or None."""
    if not isinstance(url, str):
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return None
    # Only characters a CSP source may hold; anything else is not an origin we keep.
    origin = f"{parts.scheme}://{parts.netloc}".lower()
    if any(c in origin for c in " ;,'\"\\") or "@" in parts.netloc:
        return None
    return origin


def platform_origins(session_factory: SessionFactory) -> list[str]:
    with session_factory() as session:
        origins: set[str] = set()
        for platform in session.scalars(select(LtiPlatform)):
            for url in (platform.issuer, platform.auth_url, *(platform.frame_origins or [])):
                origin = origin_of(url)
                if origin is not None:
                    origins.add(origin)
    return sorted(origins)


class FrameAncestors:
    """Narrow each page's `frame-ancestors *` to this site and the registered platforms."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._origins: list[str] = []
        self._loaded_at = float("-inf")
        # One reload at a time, on a thread of its own: it runs as a response starts, outside
        # admission control, so it must not take a request's thread (app/admission.py counts
        # one connection of the requests' pool for it). Made in the event loop.
        self._reloading: tuple[anyio.Lock, anyio.CapacityLimiter] | None = None

    def forget(self) -> None:
        """Reload the origins for the next page (a platform was added or learned one)."""
        self._loaded_at = float("-inf")

    def _expired(self) -> bool:
        return time.monotonic() - self._loaded_at > CACHE_SECONDS

    async def _directive(self, scope: Scope) -> bytes:
        sessions: SessionFactory | None = getattr(scope["app"].state, "sessions", None)
        if self._expired() and sessions is not None:
            if self._reloading is None:
                self._reloading = (anyio.Lock(), anyio.CapacityLimiter(FRAME_ANCESTORS_RELOADS))
            lock, thread = self._reloading
            async with lock:
                if self._expired():  # not reloaded by another response meanwhile
                    self._origins = await anyio.to_thread.run_sync(
                        platform_origins, sessions, limiter=thread
                    )
                    self._loaded_at = time.monotonic()
        return " ".join(["frame-ancestors 'self'", *self._origins]).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope["app"].state.frame_ancestors = self

        async def narrowed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = []
                for name, value in message.get("headers", []):
                    if name == b"content-security-policy" and _ANY_ANCESTOR in value:
                        value = value.replace(_ANY_ANCESTOR, await self._directive(scope))
                    headers.append((name, value))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, narrowed)
