"""`loopgrade lti ...`: register platforms, list them, rotate the tool's key."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def cmd_platforms_add(args: argparse.Namespace) -> int:
    from app.cli import CommandFailed, build_settings, database_session
    from app.lti.platforms import PlatformError, add_platform, deployments_of

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
    from app.cli import build_settings, database_session
    from app.lti.platforms import deployments_of, list_platforms

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
    from app.cli import build_settings, check_tool_keys, database_session
    from app.lti.keys import KEY_RETENTION, key_sealing, rotate_tool_key

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
