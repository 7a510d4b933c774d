"""Debugging CLI: run a Python file in the sandbox and print the RunResult.

    python -m sandbox run FILE.py [--input NAME=PATH ...] [--wall-timeout-seconds S ...]

Every Limits field is an option (--memory-bytes, --max-processes, ...); unambiguous prefixes
work, e.g. --wall-timeout.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from sandbox import Limits, SandboxError, backend_name, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run FILE.py in a fresh sandbox")
    run_parser.add_argument("file", type=Path, help="Python source, placed at /sandbox/main.py")
    run_parser.add_argument(
        "--input", action="append", default=[], metavar="NAME=PATH",
        help="place the file PATH read-only at /sandbox/NAME (repeatable)",
    )  # fmt: skip
    for field in dataclasses.fields(Limits):
        run_parser.add_argument(
            "--" + field.name.replace("_", "-"), type=type(field.default), default=field.default,
            help=f"default {field.default}",
        )  # fmt: skip
    args = parser.parse_args(argv)

    inputs = {}
    for item in args.input:
        name, separator, path = item.partition("=")
        if not separator:
            parser.error(f"--input {item!r} is not NAME=PATH")
        inputs[name] = Path(path).read_bytes()
    limits = Limits(
        **{field.name: getattr(args, field.name) for field in dataclasses.fields(Limits)}
    )
    try:
        started = time.monotonic()
        result = run(args.file.read_text(), inputs, limits)
        elapsed = time.monotonic() - started
    except ValueError as error:
        parser.error(str(error))
    except SandboxError as error:
        print(f"sandbox: {error}", file=sys.stderr)
        return 2

    print(f"backend: {backend_name()}  (run() took {elapsed:.3f} s)")
    for field in dataclasses.fields(result):
        value = getattr(result, field.name)
        if isinstance(value, bytes):
            print(f"{field.name}: {len(value)} bytes")
            for line in value.decode(errors="replace").splitlines():
                print(f"  | {line}")
        else:
            print(f"{field.name}: {value}")
    print(f"limit_hit: {result.limit_hit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
