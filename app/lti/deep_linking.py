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

from app.access import sign, unsign
from app.integrations.keys import SIGNED_TOKEN_LIFETIME, sign_jwt
from app.integrations.launch import DL_CLAIM, LTI_CLAIM, LTI_VERSION, ValidatedLaunch
from app.integrations.provisioning import EXERCISE_PARAMETER
from graders.exercise import Exercise

MAX_DATA_CHARS = 4096
# Time to pick an exercise; a copied request URL is useless to anyone after it, and before it
# to anyone but the instructor who launched.
DEEP_LINK_LIFETIME_SECONDS = 3600
_PURPOSE = "lti-deep-link"


@dataclass(frozen=True)
class DeepLinkRequest:
    """What the answer needs from the platform's request, carried signed through the page,
    for the user the launch signed in and until `expires_at` (unix seconds). `course_id` is the
    course the launch's context maps to (a launch without a context has its deployment's
    course): only that course's exercise list is offered."""

    platform_id: str
    deployment_id: str
    return_url: str
    data: str | None
    user_id: str
    expires_at: int
    course_id: str

    def to_signed(self, secret_key: bytes) -> str:
        return sign(secret_key, _PURPOSE, json.dumps(self.__dict__, separators=(",", ":")))

    @classmethod
    def from_signed(cls, secret_key: bytes, signed: str, *, user_id: str) -> DeepLinkRequest | None:
        """The request, when it was signed here for `user_id` and has not expired."""
        value = unsign(secret_key, _PURPOSE, signed)
        if value is None:
            return None
        try:
            found = cls(**json.loads(value))
        except TypeError:  # signed before requests carried their user, expiry and course
            return None
        if found.user_id != user_id or found.expires_at < time.time():
            return None
        return found


def deep_link_request(launch: ValidatedLaunch, *, user_id: str, course_id: str) -> DeepLinkRequest:
    settings = launch.claims[DL_CLAIM + "deep_linking_settings"]
    data = settings.get("data")
    return DeepLinkRequest(
        platform_id=launch.platform.id,
        deployment_id=launch.deployment_id,
        return_url=settings["deep_link_return_url"],
        data=data if isinstance(data, str) and len(data) <= MAX_DATA_CHARS else None,
        user_id=user_id,
        expires_at=int(time.time()) + DEEP_LINK_LIFETIME_SECONDS,
        course_id=course_id,
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
