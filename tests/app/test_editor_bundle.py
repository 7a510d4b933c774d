"""The committed editor bundle (app/web/static/editor.js) was built from the committed lock file
and sources: its header records their sha256, and scripts/build-editor.sh rewrites it."""

from __future__ import annotations

import hashlib
import json
import re

from tests.app.conftest import REPO

BUNDLE = REPO / "app" / "web" / "static" / "editor.js"
FRONTEND = REPO / "frontend"
HEADER_LINE = re.compile(r"// sha256 (frontend/\S+) ([0-9a-f]{64})")


def recorded_hashes() -> dict[str, str]:
    header = BUNDLE.read_text(encoding="utf-8").split("\n", 12)[:12]
    return {m[1]: m[2] for line in header if (m := HEADER_LINE.fullmatch(line))}


def test_the_bundle_was_built_from_the_current_lock_and_sources() -> None:
    recorded = recorded_hashes()
    sources = {str(path.relative_to(REPO)) for path in (FRONTEND / "src").glob("*.js")} | {
        "frontend/package-lock.json"
    }
    assert set(recorded) == sources, "rebuild: scripts/build-editor.sh"
    for name, digest in recorded.items():
        actual = hashlib.sha256((REPO / name).read_bytes()).hexdigest()
        assert actual == digest, (
            f"{name} changed since the bundle was built: scripts/build-editor.sh"
        )


def test_the_lock_pins_every_package_the_manifest_names() -> None:
    manifest = json.loads((FRONTEND / "package.json").read_text())
    lock = json.loads((FRONTEND / "package-lock.json").read_text())
    wanted = {**manifest["dependencies"], **manifest["devDependencies"]}
    for name, version in wanted.items():
        # Exact versions in the manifest too: `npm install` alone cannot move them.
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: pin an exact version"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
        assert lock["packages"][f"node_modules/{name}"]["integrity"].startswith("sha512-")
