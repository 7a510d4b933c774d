"""docs/exercises.md's table of diagnosis codes, made from their declarations (graders.diagnoses).

`python scripts/diagnosis_codes.py` writes the table between its two markers in the doc;
`--check` writes nothing and exits 1 when the doc's table is not the one made here
(tests/graders/test_diagnosis.py holds the committed doc to it).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "exercises.md"
START = "<!-- diagnosis codes: made by scripts/diagnosis_codes.py from the declarations -->"
END = "<!-- end of diagnosis codes -->"
# Where a code is given, for the codes every kind may give, by what they speak of.
ABOUT = {
    "": "every exercise",
    "steps": "exercises that step",
    "micro-batches": "exercises with micro-batches",
    "clipping": "exercises that clip",
}


def table() -> str:
    """One row per declared code, in the order of the modules that declare them."""
    from graders.diagnoses import registry
    from graders.grading import install_diagnoses
    from graders.kinds import owner

    install_diagnoses()

    rows = ["| code | name | given on |", "| --- | --- | --- |"]
    for code, record in registry().items():
        kind = owner(code)
        where = f"`{kind}` exercises" if kind else ABOUT[record.about]
        rows.append(f"| `{code}` | {record.name} | {where} |")
    return "\n".join(rows)


def with_table(doc: str) -> str:
    """The doc with the table between its markers made anew."""
    before, start, rest = doc.partition(START)
    _, end, after = rest.partition(END)
    if not (start and end):
        raise SystemExit(f"{DOC}: the markers {START!r} and {END!r} are missing")
    return f"{before}{START}\n{table()}\n{END}{after}"


def main(argv: list[str]) -> int:
    doc = DOC.read_text()
    made = with_table(doc)
    if "--check" in argv:
        if made != doc:
            print(f"{DOC}: the table of diagnosis codes is not the declared one: run {__file__}")
            return 1
        return 0
    DOC.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
