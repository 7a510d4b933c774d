"""Deep Linking: an instructor picks an exercise in the platform's content selection, and the
tool answers with a signed `LtiDeepLinkingResponse` whose item makes the gradebook column.

The item's URL is the registered launch URL, with the exercise in `custom`: platforms such
as Brightspace reject item URLs with query strings, and Moodle and Blackboard refuse URLs
other than the registered redirect URL ("Invalid redirect_url").
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from cryptography.fernet import MultiFernet
from sqlalchemy.orm import Session

from app.lti.keys import SIGNED_TOKEN_LIFETIME, sign_jwt
from app.lti.launch import DL_CLAIM, LTI_CLAIM, LTI_VERSION, ValidatedLaunch
from app.lti.provisioning import EXERCISE_PARAMETER
from app.web.sessions import sign, unsign
from graders.exercises import Exercise

MAX_DATA_CHARS = 4096
_PURPOSE = "lti-deep-link"


@dataclass(frozen=True)
class DeepLinkRequest:
    """What the answer needs from the platform's request, carried signed through the page."""

    platform_id: str
    deployment_id: str
    return_url: str
    data: str | None

    def to_signed(self, secret_key: bytes) -> str:
        return sign(secret_key, _PURPOSE, json.dumps(self.__dict__, separators=(",", ":")))

    @classmethod
    def from_signed(cls, secret_key: bytes, signed: str) -> DeepLinkRequest | None:
        value = unsign(secret_key, _PURPOSE, signed)
        if value is None:
            return None
        return cls(**json.loads(value))


def deep_link_request(launch: ValidatedLaunch) -> DeepLinkRequest:
    settings = launch.claims[DL_CLAIM + "deep_linking_settings"]
    data = settings.get("data")
    return DeepLinkRequest(
        platform_id=launch.platform.id,
        deployment_id=launch.deployment_id,
        return_url=settings["deep_link_return_url"],
        data=data if isinstance(data, str) and len(data) <= MAX_DATA_CHARS else None,
    )


def content_item(exercise: Exercise, launch_url: str) -> dict[str, Any]:
    return {
        "type": "ltiResourceLink",
        "title": exercise.title,
        "url": launch_url,
        "custom": {EXERCISE_PARAMETER: exercise.id},
        "lineItem": {
            "scoreMaximum": exercise.max_score,
            "label": exercise.title,
            "resourceId": exercise.id,
        },
    }


def deep_link_response_jwt(
    session: Session,
    sealing: MultiFernet,
    request: DeepLinkRequest,
    *,
    client_id: str,
    issuer: str,
    exercise: Exercise,
    launch_url: str,
) -> str:
    """The signed answer, to be form-posted as `JWT` to `request.return_url`."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": client_id,
        "aud": issuer,
        "iat": now,
        "exp": now + int(SIGNED_TOKEN_LIFETIME.total_seconds()),
        "nonce": secrets.token_urlsafe(16),
        LTI_CLAIM + "message_type": "LtiDeepLinkingResponse",
        LTI_CLAIM + "version": LTI_VERSION,
        LTI_CLAIM + "deployment_id": request.deployment_id,
        DL_CLAIM + "content_items": [content_item(exercise, launch_url)],
    }
    if request.data is not None:
        claims[DL_CLAIM + "data"] = request.data
    return sign_jwt(session, sealing, claims)
