"""`loopgrade users ...`: list, reset-password, disable, enable, set-role."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy import select

from app.audit import AuditAction
from app.db import SessionFactory
from app.integrations.models import LtiUser
from app.integrations.platforms import add_platform
from app.models import (
    AuditEvent,
    Draft,
    Enrolment,
    ExerciseOpen,
    Extension,
    HintOpen,
    SiteRole,
    Submission,
    User,
    utc_now,
)
from app.people.tokens import authenticate, create_personal_token
from app.settings import Settings
from tests.app.conftest import EXERCISE, loopgrade
from tests.app.people import PASSWORD, graded, make_course, make_user, sign_in, token_of
from tests.servers import HTTP_TIMEOUT_SECONDS


def test_reset_password_prints_a_one_time_link(
    client: httpx.Client, settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    result = loopgrade("users", "reset-password", "ada@example.org", data_dir=settings.data_dir)
    assert result.returncode == 0, result.stderr
    assert "LOOPGRADE_PUBLIC_URL is not set" in result.stderr
    link = result.stdout.strip()
    path = link[link.index("/reset-password") :]
    page = client.get(path)
    assert page.status_code == 200
    token = path.split("token=")[1]
    done = client.post(
        "/reset-password",
        data={
            "csrf_token": token_of(page),
            "token": token,
            "password": "set from the link",
            "password_again": "set from the link",
        },
    )
    assert done.status_code == 303
    assert client.get(path).status_code == 400

    unknown = loopgrade("users", "reset-password", "nobody@example.org", data_dir=settings.data_dir)
    assert unknown.returncode == 1 and "no account has the email" in unknown.stderr


def test_reset_password_set_ends_the_sessions(
    client: httpx.Client, settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    sign_in(client, "ada@example.org")
    result = loopgrade(
        "users",
        "reset-password",
        "ada@example.org",
        "--set",
        data_dir=settings.data_dir,
        env={"LOOPGRADE_PASSWORD": "set by the operator"},
    )
    assert result.returncode == 0, result.stderr
    assert "1 sessions ended" in result.stdout
    assert client.get("/account").status_code == 303
    fresh = httpx.Client(base_url=str(client.base_url), timeout=HTTP_TIMEOUT_SECONDS)
    assert sign_in(fresh, "ada@example.org", "set by the operator").status_code == 303

    short = loopgrade(
        "users",
        "reset-password",
        "ada@example.org",
        "--set",
        data_dir=settings.data_dir,
        env={"LOOPGRADE_PASSWORD": "short"},
    )
    assert short.returncode == 1 and "at least" in short.stderr


def test_disable_enable_and_set_role_are_audited(
    client: httpx.Client, settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "ada@example.org")
    sign_in(client, "ada@example.org")
    disabled = loopgrade("users", "disable", "ada@example.org", data_dir=settings.data_dir)
    assert disabled.returncode == 0, disabled.stderr
    assert "1 sessions ended" in disabled.stdout
    assert client.get("/account").status_code == 303
    assert sign_in(client, "ada@example.org").status_code == 403
    listed = loopgrade("users", "list", data_dir=settings.data_dir)
    assert "ada@example.org  learner  disabled" in listed.stdout

    enabled = loopgrade("users", "enable", "ada@example.org", data_dir=settings.data_dir)
    assert enabled.returncode == 0, enabled.stderr
    assert sign_in(client, "ada@example.org", PASSWORD).status_code == 303

    role = loopgrade(
        "users", "set-role", "ada@example.org", "instructor", data_dir=settings.data_dir
    )
    assert role.returncode == 0 and "learner -> instructor" in role.stdout
    bad = loopgrade("users", "set-role", "ada@example.org", "king", data_dir=settings.data_dir)
    assert bad.returncode == 2
    with sessions() as session:
        assert session.scalars(select(User.site_role)).one() == SiteRole.INSTRUCTOR
        actions = session.scalars(select(AuditEvent.action).order_by(AuditEvent.id)).all()
    assert actions == [
        AuditAction.ACCOUNT_DISABLED,
        AuditAction.ACCOUNT_ENABLED,
        AuditAction.SITE_ROLE_CHANGED,
    ]


def test_merge_reports_first_then_moves_everything_and_resolves_conflicts(
    settings: Settings, sessions: SessionFactory
) -> None:
    make_user(sessions, "tess@example.org", SiteRole.INSTRUCTOR)
    kept = make_user(sessions, "ada@example.org")
    duplicate = make_user(sessions, "ada.l@example.org")
    course_id = make_course(sessions, "tess@example.org", "ada@example.org", "ada.l@example.org")
    submission = graded(
        sessions, user_id=duplicate, course_id=course_id, score=7, learner="ada.l@example.org"
    )
    with sessions.begin() as session:
        platform = add_platform(
            session,
            issuer="https://lms.example.edu",
            client_id="loopgrade",
            deployment_ids=["1"],
            auth_url="https://lms.example.edu/auth",
            token_url="https://lms.example.edu/token",
            jwks_url="https://lms.example.edu/jwks",
        )
        session.add(LtiUser(platform_id=platform.id, subject="sub-1", user_id=duplicate))
        _, secret = create_personal_token(
            session, session.get_one(User, duplicate), name="laptop", lifetime_days=30, max_days=30
        )
        now = utc_now()
        session.add(
            Draft(
                user_id=kept,
                course_id=course_id,
                exercise_id=EXERCISE,
                code="old",
                updated_at=now - timedelta(hours=1),
            )
        )
        session.add(
            Draft(
                user_id=duplicate,
                course_id=course_id,
                exercise_id=EXERCISE,
                code="newer",
                updated_at=now,
            )
        )
        # Both opened the exercise: the earlier open (the duplicate's) is the one kept. Both
        # were given an extension: the kept account's stays. The hint opened follows the person.
        session.add(
            ExerciseOpen(course_id=course_id, exercise_id=EXERCISE, user_id=kept, opened_at=now)
        )
        session.add(
            ExerciseOpen(
                course_id=course_id,
                exercise_id=EXERCISE,
                user_id=duplicate,
                opened_at=now - timedelta(days=2),
            )
        )
        for user_id, extra in ((kept, 1), (duplicate, 5)):
            session.add(
                Extension(
                    course_id=course_id, exercise_id=EXERCISE, user_id=user_id, extra_attempts=extra
                )
            )
        session.add(
            HintOpen(
                user_id=duplicate,
                course_id=course_id,
                exercise_id=EXERCISE,
                submission_id=submission,
                diagnosis="missing-zero-grad",
                level=1,
            )
        )

    dry = loopgrade(
        "users", "merge", "ada@example.org", "ada.l@example.org", data_dir=settings.data_dir
    )
    assert dry.returncode == 0, dry.stderr
    assert "Dry run" in dry.stdout and "moves 1 submissions" in dry.stdout
    assert "1 personal tokens" in dry.stdout
    assert "both were enrolled in course" in dry.stdout
    assert f"both had a draft of {EXERCISE}" in dry.stdout
    assert f"both had an extension of {EXERCISE}" in dry.stdout
    with sessions() as session:
        assert session.get(Submission, submission).user_id == duplicate  # type: ignore[union-attr]
        assert session.scalars(select(AuditEvent)).all() == []

    applied = loopgrade(
        "users",
        "merge",
        "ada@example.org",
        "ada.l@example.org",
        "--apply",
        data_dir=settings.data_dir,
    )
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.replace("Merged", "Dry run (nothing changed; --apply to merge)") == (
        dry.stdout
    )
    with sessions() as session:
        moved = session.get(Submission, submission)
        assert moved is not None
        assert (moved.user_id, moved.learner) == (kept, "ada@example.org")
        assert session.scalars(select(LtiUser.user_id)).one() == kept
        assert (
            session.scalars(select(Enrolment.user_id).where(Enrolment.course_id == course_id))
            .all()
            .count(kept)
            == 1
        )
        assert session.scalars(select(Draft.code)).all() == ["newer"]
        opens = session.scalars(select(ExerciseOpen)).all()
        assert [(o.user_id, o.opened_at < now - timedelta(days=1)) for o in opens] == [(kept, True)]
        extensions = session.scalars(select(Extension)).all()
        assert [(e.user_id, e.extra_attempts) for e in extensions] == [(kept, 1)]
        assert session.scalars(select(HintOpen.user_id)).all() == [kept]
        # The duplicate's token now acts for the kept account: its client keeps working.
        assert authenticate(session, secret).user.id == kept
        gone = session.get(User, duplicate)
        assert gone is not None and gone.disabled_at is not None
        assert gone.email.endswith("@merged.invalid")
        event = session.scalars(select(AuditEvent)).one()
        assert event.action == AuditAction.ACCOUNTS_MERGED
        assert event.details["duplicate_email"] == "ada.l@example.org"

    same = loopgrade(
        "users", "merge", "ada@example.org", "ADA@example.org", data_dir=settings.data_dir
    )
    assert same.returncode == 1 and "one account" in same.stderr
