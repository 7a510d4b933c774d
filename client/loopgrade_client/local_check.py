"""`loopgrade-client check`: run your code on the exercise's visible cases here, with your own
torch and the harness this package ships, and record what it does, as the sandbox would. The
server then judges that trace with its own grader (the same diagnosis and words as a grading
of those cases). The server's practice kit is data, checked against the case schema shipped
beside the harness; nothing the server sends is ever run.

Only the visible cases ever leave the server, and only the server grades: its hidden cases
decide the score, and a check is never stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import math
import sys
import types
from importlib import resources
from typing import Any

from loopgrade_client.errors import BadAnswer, ClientError

# The harness and the schema of its cases ship inside this package, versioned with it
# (written by `python -m graders client-files`): a server sends data only, never code.
HARNESS_FILE = "practice_harness.py"
CASE_SCHEMA_FILE = "practice_case_schema.json"
# As many cases as an exercise may have (graders/exercises.py MAX_CASES).
MAX_CASES = 64
MAX_NAME_CHARS = 100


def _shipped(name: str) -> str:
    return resources.files("loopgrade_client").joinpath(name).read_text(encoding="utf-8")


def harness_sha256() -> str:
    """The digest of the harness this client ships: the kit must be for this one."""
    return hashlib.sha256(_shipped(HARNESS_FILE).encode()).hexdigest()


def _matches(value: Any, schema: dict[str, Any]) -> bool:
    """`value` against the subset of JSON Schema pydantic writes for a case's fields."""
    if "anyOf" in schema:
        return any(_matches(value, option) for option in schema["anyOf"])
    kind = schema.get("type")
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return (
            isinstance(value, str)
            and schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", MAX_NAME_CHARS)
            and ("enum" not in schema or value in schema["enum"])
        )
    if kind == "array":
        items = schema.get("prefixItems", [])
        return (
            isinstance(value, list)
            and schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", len(items))
            and all(_matches(v, item) for v, item in zip(value, items, strict=False))
        )
    if kind in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if kind == "integer" and not isinstance(value, int):
            return False
        return (
            math.isfinite(value)
            and value >= schema.get("minimum", -math.inf)
            and value <= schema.get("maximum", math.inf)
            and value > schema.get("exclusiveMinimum", -math.inf)
            and value < schema.get("exclusiveMaximum", math.inf)
        )
    if kind == "object":
        properties = schema.get("properties", {})
        return (
            isinstance(value, dict)
            and all(name in value for name in schema.get("required", []))
            and all(
                name in properties and _matches(item, properties[name])
                for name, item in value.items()
            )
        )
    return False


def _load_harness() -> types.ModuleType:
    try:
        import torch  # noqa: F401  (the harness needs it; say so plainly when it is missing)
    except ImportError:
        raise ClientError(
            "torch is not installed here, so nothing can be checked locally: install it "
            "('pip install torch'), or submit to have the server grade it"
        ) from None
    return importlib.import_module(f"loopgrade_client.{HARNESS_FILE.removesuffix('.py')}")


def checked_kit(kit: Any) -> dict[str, Any]:
    """The server's practice kit if it is data this client's harness can check, else
    BadAnswer (or ClientError when the server's harness is another version)."""
    if not isinstance(kit, dict):
        raise BadAnswer("the server's practice kit is not a JSON object")
    if kit.get("harness_sha256") != harness_sha256():
        raise ClientError(
            "this client's harness is not the server's: the server or the client was updated. "
            "Update the client from the server's repository (pip install --upgrade ./client), "
            "or submit to have the server grade it"
        )
    entry_point, kind = kit.get("entry_point"), kit.get("kind")
    if not (
        isinstance(entry_point, str)
        and entry_point.isidentifier()
        and len(entry_point) <= MAX_NAME_CHARS
    ):
        raise BadAnswer("the server's practice kit names no function a Python file can define")
    if not isinstance(kind, str) or len(kind) > MAX_NAME_CHARS:
        raise BadAnswer("the server's practice kit names no kind of exercise")
    schema = json.loads(_shipped(CASE_SCHEMA_FILE))
    cases = kit.get("cases")
    if not (
        isinstance(cases, list)
        and 0 < len(cases) <= MAX_CASES
        and all(_matches(case, schema) for case in cases)
    ):
        raise BadAnswer("the server's practice kit holds cases this client cannot check")
    return kit


def record_locally(kit: dict[str, Any], source: str) -> dict[str, Any]:
    """Your code on each visible case of the kit (checked_kit's), run by the harness this
    client ships: the trace, as the sandbox would write it. What your code prints goes to
    stderr, so that `--json` output stays JSON."""
    harness = _load_harness()
    recorder = harness.RECORDERS.get(kit["kind"])
    if recorder is None:
        raise ClientError(f"this client cannot check exercises of kind {kit['kind']!r}")
    cases = kit["cases"]
    with contextlib.redirect_stdout(sys.stderr):
        loaded = harness.load_submission(source, kit["entry_point"], cases, seeded=True)
        if isinstance(loaded, dict):  # did not load: the failure is the trace
            return loaded
        trace: dict[str, Any] = harness.run_cases(recorder, loaded, cases, seeded=True)
    return trace
