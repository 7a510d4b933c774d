"""`loopgrade-client check`: run your code on the exercise's visible cases here, with your own
torch, and compare what it records with the reference's records the server sent.

Only the visible cases ever leave the server, and only the server grades: its hidden cases and
its diagnosis decide the score. This says whether the visible cases behave as the reference.
"""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass
from typing import Any

from loopgrade_client.errors import ClientError

# Agreement with the reference: as close as float32 runs of the same steps on two machines.
RELATIVE_TOLERANCE = 1e-4
ABSOLUTE_TOLERANCE = 1e-6
HARNESS_MODULE = "loopgrade_practice_harness"


@dataclass(frozen=True)
class CaseOutcome:
    case: str
    passed: bool
    message: str


def _load_harness(source: str) -> types.ModuleType:
    try:
        import torch  # noqa: F401  (the harness needs it; say so plainly when it is missing)
    except ImportError:
        raise ClientError(
            "torch is not installed here, so nothing can be checked locally: install it "
            "('pip install torch'), or submit to have the server grade it"
        ) from None
    module = types.ModuleType(HARNESS_MODULE)
    # The harness's dataclasses look their module up by name while the class is made.
    sys.modules[HARNESS_MODULE] = module
    try:
        exec(compile(source, "harness.py", "exec"), module.__dict__)
    finally:
        del sys.modules[HARNESS_MODULE]
    return module


def _differs(mine: Any, reference: Any, where: str) -> str | None:
    """Where the two records first differ, in words; None when they agree."""
    if isinstance(reference, bool) or isinstance(mine, bool):
        return None if mine == reference else f"{where}: {mine!r}, expected {reference!r}"
    if isinstance(reference, int | float) and isinstance(mine, int | float):
        if math.isclose(mine, reference, rel_tol=RELATIVE_TOLERANCE, abs_tol=ABSOLUTE_TOLERANCE):
            return None
        return f"{where}: {mine:.6g}, expected {reference:.6g}"
    if isinstance(reference, list) and isinstance(mine, list):
        if len(mine) != len(reference):
            return f"{where}: {len(mine)} values, expected {len(reference)}"
        for index, (a, b) in enumerate(zip(mine, reference, strict=True)):
            found = _differs(a, b, f"{where}[{index}]")
            if found:
                return found
        return None
    if isinstance(reference, dict) and isinstance(mine, dict):
        for key in reference:
            found = _differs(mine.get(key), reference[key], f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    return None if mine == reference else f"{where}: {mine!r}, expected {reference!r}"


def check_locally(kit: dict[str, Any], source: str) -> list[CaseOutcome]:
    """Your code on each visible case of the kit, compared with the reference's records."""
    harness = _load_harness(kit["harness"])
    try:
        function = harness.load_function(source, kit["entry_point"], "submission.py")
    except SyntaxError as exc:
        raise ClientError(f"syntax error on line {exc.lineno}: {exc.msg}") from None
    except LookupError:
        raise ClientError(f"your code defines no function {kit['entry_point']!r}") from None
    # The harness holds each kind's recorder, by the kind's name.
    recorder = getattr(harness, "RECORDERS", {}).get(kit["kind"])
    if recorder is None:
        raise ClientError(f"the server's harness cannot check exercises of kind {kit['kind']!r}")
    outcomes = []
    for spec in kit["cases"]:
        ran = harness.run_case(recorder, function, spec, "submission.py")
        reference = kit["reference"].get(spec["id"], {})
        if ran.get("error"):
            error = ran["error"]
            message = error.get("message") or error.get("type") or "it raised an error"
            outcomes.append(CaseOutcome(spec["id"], False, f"your code failed: {message}"))
            continue
        mine = {"records": ran["records"], "final": ran["final"]}
        expected = {"records": reference.get("records"), "final": reference.get("final")}
        differs = _differs(mine, expected, "")
        outcomes.append(
            CaseOutcome(spec["id"], differs is None, differs or "matches the reference")
        )
    return outcomes
