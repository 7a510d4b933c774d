"""The tool's private keys at rest: sealed under a key-encryption key kept outside the
database, sealed on start-up when stored in plain text, and a wrong KEK stops the start."""

from __future__ import annotations

import asyncio
import stat

import httpx
import pytest
from alembic import command
from cryptography.fernet import Fernet
from joserfc.jwk import RSAKey
from sqlalchemy import text

from app.db import SessionFactory, alembic_config, create_db_engine
from app.integrations.keys import KEK_FILE_NAME, ToolKeysUnreadable, key_sealing
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import loopgrade
from tests.servers import HTTP_TIMEOUT_SECONDS


def stored_keys(sessions: SessionFactory) -> dict[str, str]:
    with sessions() as session:
        rows = session.execute(text("SELECT kid, private_key_sealed FROM lti_tool_keys"))
        return {kid: sealed for kid, sealed in rows}


def start(settings: Settings) -> None:
    app = create_app(settings)

    async def run() -> None:
        async with app.router.lifespan_context(app):
            pass

    asyncio.run(run())


def test_the_database_holds_no_private_key(
    tool_url: str, settings: Settings, sessions: SessionFactory
) -> None:
    published = httpx.get(f"{tool_url}/lti/jwks", timeout=HTTP_TIMEOUT_SECONDS).json()["keys"]
    (sealed,) = stored_keys(sessions).values()
    assert "PRIVATE KEY" not in sealed and "BEGIN" not in sealed
    # What is stored unseals, with the KEK file, to the key the JWKS publishes.
    kek_file = settings.data_dir / KEK_FILE_NAME
    assert stat.S_IMODE(kek_file.stat().st_mode) == 0o600
    pem = Fernet(kek_file.read_text().strip()).decrypt(sealed.encode())
    assert RSAKey.import_key(pem).as_dict(private=False)["n"] == published[0]["n"]


def test_a_plain_key_from_before_sealing_is_sealed_at_start(settings: Settings) -> None:
    """A database at migration 0007 held PEM; 0008 renames the column; the start seals it."""
    config = alembic_config(settings.database_url)
    command.downgrade(config, "0007")
    engine = create_db_engine(settings.database_url)
    pem = RSAKey.generate_key(2048, private=True).as_pem(private=True).decode()
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO lti_tool_keys (kid, private_key_pem, created_at) "
                "VALUES ('old-kid', :pem, CURRENT_TIMESTAMP)"
            ),
            {"pem": pem},
        )
    command.upgrade(config, "head")
    with engine.connect() as connection:
        (still_plain,) = connection.execute(text("SELECT private_key_sealed FROM lti_tool_keys"))
    assert still_plain[0] == pem  # the migration cannot seal: the KEK is not in the database
    start(settings)
    with engine.connect() as connection:
        (sealed,) = connection.execute(text("SELECT private_key_sealed FROM lti_tool_keys"))
    engine.dispose()
    assert "BEGIN" not in sealed[0]
    assert key_sealing(settings).decrypt(sealed[0].encode()).decode() == pem


def test_a_wrong_key_encryption_key_stops_the_start_with_a_sentence(
    tool_url: str, settings: Settings, sessions: SessionFactory
) -> None:
    assert (
        httpx.get(f"{tool_url}/lti/jwks", timeout=HTTP_TIMEOUT_SECONDS).status_code == 200
    )  # a key is made and sealed
    (kid,) = stored_keys(sessions)
    wrong = settings.model_copy(update={"lti_key_encryption_keys": Fernet.generate_key().decode()})
    with pytest.raises(ToolKeysUnreadable, match=f"private key {kid} cannot be unsealed"):
        start(wrong)
    rotated = loopgrade(
        "lti",
        "keys",
        "rotate",
        data_dir=settings.data_dir,
        env={"LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS": wrong.lti_key_encryption_keys},
    )
    assert rotated.returncode == 1
    assert "LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS" in rotated.stderr
    assert "Traceback" not in rotated.stderr
    malformed = settings.model_copy(update={"lti_key_encryption_keys": "not-a-key"})
    with pytest.raises(ToolKeysUnreadable, match="is not a Fernet key"):
        start(malformed)


def test_the_key_encryption_key_rotates(
    tool_url: str, settings: Settings, sessions: SessionFactory
) -> None:
    published = httpx.get(f"{tool_url}/lti/jwks", timeout=HTTP_TIMEOUT_SECONDS).json()["keys"]
    old_kek = (settings.data_dir / KEK_FILE_NAME).read_text().strip()
    new_kek = Fernet.generate_key().decode()
    # The new KEK first, the old one after it: the start re-seals every key under the new.
    start(settings.model_copy(update={"lti_key_encryption_keys": f"{new_kek},{old_kek}"}))
    (sealed,) = stored_keys(sessions).values()
    Fernet(new_kek).decrypt(sealed.encode())
    # From then on the new KEK alone unseals, and `lti keys rotate` works with it.
    only_new = {"LOOPGRADE_LTI_KEY_ENCRYPTION_KEYS": new_kek}
    rotated = loopgrade("lti", "keys", "rotate", data_dir=settings.data_dir, env=only_new)
    assert rotated.returncode == 0, rotated.stderr
    new_settings = settings.model_copy(update={"lti_key_encryption_keys": new_kek})
    start(new_settings)
    assert len(stored_keys(sessions)) == 2
    assert published[0]["kid"] in stored_keys(sessions)
