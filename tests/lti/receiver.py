"""A webhook subscriber that checks signatures as docs/lti.md tells receivers to."""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import Response

from app.integrations.webhooks import SIGNATURE_HEADER

REPLAY_WINDOW_SECONDS = 300


@dataclass
class Receiver:
    """A subscriber that checks signatures as docs/api.md tells receivers to."""

    secret: str = ""
    fail_next: int = 0
    refuse_next: int = 0  # answer 410 Gone: a refusal for good
    events: list[dict[str, Any]] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)  # the Host header of each delivery
    url: str = ""

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/hook")
        async def hook(request: Request) -> Response:
            if self.fail_next:
                self.fail_next -= 1
                return Response(status_code=502)
            if self.refuse_next:
                self.refuse_next -= 1
                return Response(status_code=410)
            self.hosts.append(request.headers["host"])
            body = await request.body()
            fields = dict(p.split("=", 1) for p in request.headers[SIGNATURE_HEADER].split(","))
            timestamp = int(fields["t"])
            expected = hmac.new(
                self.secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256
            ).hexdigest()
            if not hmac.compare_digest(expected, fields["v1"]):
                return Response(status_code=401)
            if abs(time.time() - timestamp) > REPLAY_WINDOW_SECONDS:
                return Response(status_code=401)
            self.events.append(await request.json())
            return Response(status_code=204)

        return app
