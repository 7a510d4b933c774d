"""The vendored axe-core is the one its README names (a changed file must be re-recorded)."""

import hashlib
import re
from pathlib import Path

ASSETS = Path(__file__).parent / "assets"


def test_vendored_axe_core_matches_its_recorded_version_and_digest() -> None:
    readme = (ASSETS / "README.md").read_text(encoding="utf-8")
    recorded = re.search(r"sha256 of axe.min.js: ([0-9a-f]{64})", readme)
    assert recorded, "tests/browser/assets/README.md must record the sha256 of axe.min.js"
    source = (ASSETS / "axe.min.js").read_bytes()
    assert hashlib.sha256(source).hexdigest() == recorded.group(1)
    version = re.search(r"axe-core (\d+\.\d+\.\d+)", readme)
    assert version and source.startswith(f"/*! axe v{version.group(1)}".encode())
