"""`loopgrade lti ...`: register platforms, list them, rotate the tool's key, read an LMS
course's line items and reconcile its gradebook with loopgrade's scores."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def cmd_platforms_add(args: argparse.Namespace) -> int:
    from app.cli_support import CommandFailed, build_settings, database_session
    from app.integrations.platforms import PlatformError, add_platform, deployments_of

    try:
        with database_session(build_settings(args)) as session:
            platform = add_platform(
                session,
                issuer=args.issuer,
                client_id=args.client_id,
                deployment_ids=args.deployment_id,
                auth_url=args.auth_url,
                token_url=args.token_url,
                jwks_url=args.jwks_url,
            )
            summary = (
                f"Registered platform {platform.issuer} (client id {platform.client_id}, id "
                f"{platform.id}) with deployments: {', '.join(deployments_of(session, platform))}."
            )
    except PlatformError as exc:
        raise CommandFailed(str(exc)) from None
    print(summary)
    return 0


def cmd_platforms_list(args: argparse.Namespace) -> int:
    from app.cli_support import build_settings, database_session
    from app.integrations.platforms import deployments_of, list_platforms

    with database_session(build_settings(args)) as session:
        platforms = list_platforms(session)
        for platform in platforms:
            print(
                f"{platform.issuer}  client id {platform.client_id}  "
                f"deployments {', '.join(deployments_of(session, platform))}\n"
                f"  auth {platform.auth_url}\n  token {platform.token_url}\n"
                f"  jwks {platform.jwks_url}"
            )
        if not platforms:
            print("No platform is registered (loopgrade lti platforms add --help).")
    return 0


def cmd_keys_rotate(args: argparse.Namespace) -> int:
    from app.cli_support import build_settings, check_tool_keys, database_session
    from app.integrations.keys import KEY_RETENTION, key_sealing, rotate_tool_key

    settings = build_settings(args)
    # A new key sealed under a KEK that does not unseal the others would split the keys.
    check_tool_keys(settings)
    with database_session(settings) as session:
        kid = rotate_tool_key(session, key_sealing(settings)).kid
    hours = KEY_RETENTION.total_seconds() / 3600
    print(
        f"New signing key {kid}. The previous key stays in /lti/jwks for {hours:g} hours, "
        "for tokens it signed."
    )
    return 0


def cmd_lineitems(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from app.cli_support import CommandFailed, build_settings, check_tool_keys, database_session
    from app.integrations.ags_client import AccessTokens
    from app.integrations.delivery_errors import PlatformRefused, PlatformUnavailable
    from app.integrations.keys import key_sealing
    from app.integrations.line_items import list_line_items
    from app.integrations.models import LtiContext

    settings = build_settings(args)
    check_tool_keys(settings)
    tokens = AccessTokens()
    with database_session(settings) as session:
        contexts = session.scalars(select(LtiContext).where(LtiContext.course_id == args.course))
        lines = []
        try:
            for context in contexts:
                for item in list_line_items(session, key_sealing(settings), tokens, context):
                    lines.append(
                        f"{item.label}  max {item.score_maximum}  resource {item.resource_id}  "
                        f"link {item.resource_link_id}  tag {item.tag}  {item.url}"
                    )
        except (PlatformRefused, PlatformUnavailable) as exc:
            raise CommandFailed(f"the LMS did not list its line items: {exc}") from None
    print("\n".join(lines) if lines else "The LMS course has no line items.")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    from app.cli_support import CommandFailed, build_settings, check_tool_keys, database_session
    from app.integrations.ags_client import AccessTokens
    from app.integrations.delivery_errors import PlatformRefused, PlatformUnavailable
    from app.integrations.keys import key_sealing
    from app.integrations.line_items import reconcile_course

    settings = build_settings(args)
    check_tool_keys(settings)
    with database_session(settings) as session:
        try:
            rows = reconcile_course(session, key_sealing(settings), AccessTokens(), args.course)
        except (PlatformRefused, PlatformUnavailable) as exc:
            raise CommandFailed(f"the LMS did not give its results: {exc}") from None
    for row in rows:
        lms = "-" if row.lms_score is None else f"{row.lms_score:g}/{row.lms_maximum or 0:g}"
        ours = "-" if row.counted_score is None else f"{row.counted_score:g}/{row.max_score:g}"
        verdict = "agrees" if row.agrees else "DIFFERS"
        print(f"{row.exercise_id}  {row.learner}  LMS {lms}  loopgrade {ours}  {verdict}")
    if not rows:
        print("No LMS column of this course holds a score yet.")
    return 0


def add_lti_commands(
    commands: Any, add_data_dir: Callable[[argparse.ArgumentParser], None]
) -> None:
    lti = commands.add_parser("lti", help="LTI 1.3: platforms (LMSs) and the tool's keys")
    lti_commands = lti.add_subparsers(dest="lti_command", required=True, metavar="COMMAND")

    platforms = lti_commands.add_parser("platforms", help="LMSs allowed to launch this tool")
    platform_commands = platforms.add_subparsers(
        dest="platforms_command", required=True, metavar="COMMAND"
    )
    add = platform_commands.add_parser(
        "add",
        help="register a platform (or add deployments and new URLs to a registered one)",
    )
    add.add_argument("--issuer", required=True, help="the platform's issuer (iss), exactly")
    add.add_argument("--client-id", required=True, help="the client id it gave this tool")
    add.add_argument(
        "--deployment-id",
        required=True,
        action="append",
        help="a deployment id (repeat for several)",
    )
    add.add_argument("--auth-url", required=True, help="its OIDC authentication request URL")
    add.add_argument("--token-url", required=True, help="its OAuth2 access token URL")
    add.add_argument("--jwks-url", required=True, help="its public keyset (JWKS) URL")
    add_data_dir(add)
    add.set_defaults(run=cmd_platforms_add)
    listing = platform_commands.add_parser("list", help="every registered platform")
    add_data_dir(listing)
    listing.set_defaults(run=cmd_platforms_list)

    keys = lti_commands.add_parser("keys", help="the tool's signing keys")
    key_commands = keys.add_subparsers(dest="lti_keys_command", required=True, metavar="COMMAND")
    rotate = key_commands.add_parser(
        "rotate", help="make a new signing key; the old one stays published for a day"
    )
    add_data_dir(rotate)
    rotate.set_defaults(run=cmd_keys_rotate)

    lineitems = lti_commands.add_parser(
        "lineitems", help="the LMS gradebook columns (AGS line items) of a course"
    )
    lineitems.add_argument("--course", required=True, help="the loopgrade course id")
    add_data_dir(lineitems)
    lineitems.set_defaults(run=cmd_lineitems)
    results = lti_commands.add_parser(
        "results",
        help="each learner's score in the LMS gradebook beside loopgrade's, and whether they agree",
    )
    results.add_argument("--course", required=True, help="the loopgrade course id")
    add_data_dir(results)
    results.set_defaults(run=cmd_results)
