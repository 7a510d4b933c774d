"""LTI tables: registered platforms and their deployments, the tool's key pairs, login states,
and what a platform's users, contexts and resource links are here (users, courses, exercises).

Also the course's REST integrations that are not API keys: webhooks.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.models import Base, UTCDateTime, new_id, utc_now


class LtiPlatform(Base):
    """An LMS registered by an operator: one issuer and the client id it gave this tool."""

    __tablename__ = "lti_platforms"
    __table_args__ = (UniqueConstraint("issuer", "client_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    issuer: Mapped[str] = mapped_column(String(255))
    client_id: Mapped[str] = mapped_column(String(255))
    auth_url: Mapped[str] = mapped_column(String(1000))
    token_url: Mapped[str] = mapped_column(String(1000))
    jwks_url: Mapped[str] = mapped_column(String(1000))
    # Origins the platform's pages frame the tool from, learned from its signed launches.
    frame_origins: Mapped[list[str] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class LtiDeployment(Base):
    """A deployment of the tool on a platform (a site, a sub-account): launches must name one."""

    __tablename__ = "lti_deployments"
    __table_args__ = (UniqueConstraint("platform_id", "deployment_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    platform_id: Mapped[str] = mapped_column(ForeignKey("lti_platforms.id"), index=True)
    deployment_id: Mapped[str] = mapped_column(String(255))


class LtiToolKey(Base):
    """One of the tool's RSA key pairs. The newest unretired one signs; a retired one stays
    published in the JWKS until every token it signed has expired."""

    __tablename__ = "lti_tool_keys"

    kid: Mapped[str] = mapped_column(String(64), primary_key=True)
    # The PKCS#8 PEM sealed (Fernet) under the key-encryption key, which is kept outside the
    # database (app/integrations/keys.py). It signs client assertions and deep-linking responses.
    private_key_sealed: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class LtiLoginState(Base):
    """A login in progress: the state and nonce sent to the platform, kept here rather than in a
    cookie (a cross-site iframe often keeps none). Used once."""

    __tablename__ = "lti_login_states"

    state: Mapped[str] = mapped_column(String(64), primary_key=True)
    nonce: Mapped[str] = mapped_column(String(64))
    platform_id: Mapped[str] = mapped_column(ForeignKey("lti_platforms.id"))
    target_link_uri: Mapped[str] = mapped_column(String(1000))
    # Anyone may start a login: they are counted per client address and in all.
    client_address: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now, index=True)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # LTI Platform Storage: the frame the platform named (lti_storage_target), and the value
    # put there at login, which the launch must read back from the same LMS page.
    storage_target: Mapped[str | None] = mapped_column(String(100))
    storage_value: Mapped[str | None] = mapped_column(String(64))


class LtiUser(Base):
    """A platform's user (`sub`) and the local account made for them."""

    __tablename__ = "lti_users"
    __table_args__ = (UniqueConstraint("platform_id", "subject"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    platform_id: Mapped[str] = mapped_column(ForeignKey("lti_platforms.id"))
    subject: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class LtiContext(Base):
    """A platform's course (context) and the local course made for it."""

    __tablename__ = "lti_contexts"
    __table_args__ = (UniqueConstraint("platform_id", "context_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    platform_id: Mapped[str] = mapped_column(ForeignKey("lti_platforms.id"))
    deployment_id: Mapped[str] = mapped_column(String(255))
    context_id: Mapped[str] = mapped_column(String(255))
    course_id: Mapped[str] = mapped_column(ForeignKey("courses.id"), index=True)
    # Names and Role Provisioning Service, when the platform offers it.
    memberships_url: Mapped[str | None] = mapped_column(String(1000))
    # Assignment and Grade Services: the course's line items container, when offered.
    lineitems_url: Mapped[str | None] = mapped_column(String(1000))
    roster_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class LtiResourceLink(Base):
    """A link placed in a platform's course, the exercise it opens, and its gradebook column."""

    __tablename__ = "lti_resource_links"
    __table_args__ = (UniqueConstraint("platform_id", "resource_link_id"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    platform_id: Mapped[str] = mapped_column(ForeignKey("lti_platforms.id"))
    resource_link_id: Mapped[str] = mapped_column(String(255))
    lti_context_id: Mapped[str] = mapped_column(ForeignKey("lti_contexts.id"), index=True)
    # None until the link names one (custom parameter) or an instructor chooses one.
    exercise_id: Mapped[str | None] = mapped_column(String(100))
    title: Mapped[str | None] = mapped_column(String(255))
    # Assignment and Grade Services: the column scores go to, and the scopes granted.
    lineitem_url: Mapped[str | None] = mapped_column(String(1000))
    ags_scopes: Mapped[list[str] | None] = mapped_column(JSON)
    # While a delivery makes the line item of a link that came without one: its random token
    # and when the claim lapses (its holder is presumed dead then). app/integrations/line_items.py.
    lineitem_claim: Mapped[str | None] = mapped_column(String(32))
    lineitem_claimed_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)


class LtiLaunchTicket(Base):
    """A one-time token handing a launch's sign-in to the browser (in the frame or a new
    window). Only its SHA-256 is kept."""

    __tablename__ = "lti_launch_tickets"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id"))
    target_path: Mapped[str] = mapped_column(String(1000))
    # The launching LMS page's origin, which the session the ticket starts keeps.
    lms_origin: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Webhook(Base):
    """A course's subscriber: every graded submission is POSTed to `url`, signed with `secret`."""

    __tablename__ = "webhooks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    course_id: Mapped[str] = mapped_column(ForeignKey("courses.id"), index=True)
    url: Mapped[str] = mapped_column(String(1000))
    secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utc_now)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
