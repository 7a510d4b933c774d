"""Where the client keeps the server's URL and your token: one JSON file, readable by you alone."""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from loopgrade_client.errors import ClientError

CONFIG_ENV = "LOOPGRADE_CLIENT_CONFIG"


def config_path() -> Path:
    """$LOOPGRADE_CLIENT_CONFIG, else the user's config dir (XDG on Linux, the usual elsewhere)."""
    given = os.environ.get(CONFIG_ENV)
    if given:
        return Path(given)
    if os.name == "nt":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    elif os.uname().sysname == "Darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "loopgrade" / "client.json"


def checked_server_url(url: str) -> str:
    """`url` without its trailing slash, if it is https (or plain http to this computer itself);
    else ClientError. Over plain http anyone on the way reads the token and answers as the
    server."""
    url = url.strip().rstrip("/")
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError:
        raise ClientError(f"{url!r} is not a web address: give it as https://host") from None
    if parts.scheme not in ("http", "https") or not host:
        raise ClientError(f"{url!r} is not a web address: give it as https://host")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ClientError(f"{url!r} holds more than a server's address: give it as https://host")
    if parts.scheme == "http" and not _is_loopback(host):
        raise ClientError(
            f"{url} is plain http: the token would cross the network readable by anyone on the "
            "way. Use the server's https:// address (http is for this computer alone: "
            "localhost, 127.0.0.1, ::1)"
        )
    return url


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Login:
    url: str
    token: str


def save_login(login: Login, path: Path | None = None) -> Path:
    """Write the login with mode 0600 (its directory 0700): the token acts as you."""
    path = path or config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # Created 0600 from the start: never a moment when others may read it.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        json.dump({"url": login.url, "token": login.token}, file)
    os.chmod(path, 0o600)
    return path


def load_login(path: Path | None = None) -> Login:
    path = path or config_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        login = Login(url=str(data["url"]), token=str(data["token"]))
    except FileNotFoundError:
        raise ClientError("not logged in: run 'loopgrade-client login URL' first") from None
    except (ValueError, KeyError, TypeError):
        raise ClientError(
            f"{path} is not a login this client wrote: run 'loopgrade-client login URL' again"
        ) from None
    # A login an older client kept over plain http is not used either.
    return Login(checked_server_url(login.url), login.token)
