"""The import structure: no circle among the modules of any package, and the layers point one
way (app -> graders -> sandbox). Every import counts, at module level, inside a function or
under TYPE_CHECKING."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each package and the folder its top-level name is found in (the client is a package of its own).
PACKAGE_ROOTS = {"app": ROOT, "graders": ROOT, "sandbox": ROOT, "loopgrade_client": ROOT / "client"}
# Each top-level package and the packages it must never import.
LOWER_LAYERS_MUST_NOT_IMPORT = {"graders": {"app"}, "sandbox": {"app", "graders"}}


def module_files(package: str) -> dict[str, Path]:
    """Module name -> file, for every module of `package` (a package is its __init__.py)."""
    modules = {}
    root = PACKAGE_ROOTS[package]
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_names(module: str, path: Path) -> set[str]:
    """Every dotted name `module` imports, relative imports made absolute; for `from a import
    b`, `a.b` (b may be a module or a name in a: then the arrow is to a)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports (the deepest module each name is in)."""
    modules = module_files(package)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for name in imported_names(module, path):
            while name and name not in modules:
                name = name.rpartition(".")[0]
            # A name taken from a module's own package is an arrow to its __init__ like any other.
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def test_the_import_graph_sees_function_level_imports() -> None:
    # app.cli imports the app factory inside `cmd_serve` only (a cheap `keys` command).
    assert "app.main" in import_graph("app")["app.cli"]


def test_the_import_graph_sees_imports_inside_functions_of_every_package() -> None:
    # Arrows from a package's face; the sandbox's face imports seccomp inside open_runner only.
    assert "graders.grade_by_id" in import_graph("graders")["graders"]
    assert "sandbox.seccomp" in import_graph("sandbox")["sandbox"]


@pytest.mark.parametrize("package", sorted(PACKAGE_ROOTS))
def test_no_import_circle(package: str) -> None:
    try:
        TopologicalSorter(import_graph(package)).prepare()
    except CycleError as exc:
        circle = exc.args[1]
        pytest.fail(
            f"import circle in {package}: " + " -> ".join(circle)
            + ". Move what both sides need into a module below them."
        )  # fmt: skip


@pytest.mark.parametrize("package", sorted(LOWER_LAYERS_MUST_NOT_IMPORT))
def test_lower_layers_do_not_import_higher_ones(package: str) -> None:
    forbidden = LOWER_LAYERS_MUST_NOT_IMPORT[package]
    back_arrows = [
        f"{module} imports {name}"
        for module, path in module_files(package).items()
        for name in sorted(imported_names(module, path))
        if name.split(".")[0] in forbidden
    ]
    assert back_arrows == []


# app/'s surfaces: how a request arrives. They import domains, never each other; a domain (any
# other module of app/, but the two that assemble everything) imports no surface.
SURFACES = ("app.web", "app.api", "app.lti")
ASSEMBLY = frozenset({"app.main", "app.cli"})


def surface_of(module: str) -> str | None:
    return next((s for s in SURFACES if module == s or module.startswith(s + ".")), None)


def is_page(module: str) -> bool:
    return surface_of(module) == "app.web" and module.endswith("_pages")


def test_surfaces_do_not_import_each_other_and_domains_import_no_surface() -> None:
    crossings = {
        f"{module} -> {target}"
        for module, targets in import_graph("app").items()
        for target in targets
        if module not in ASSEMBLY
        and surface_of(target) is not None
        and surface_of(target) != surface_of(module)
    }
    assert crossings == set(), "what two surfaces share goes below them (app/access.py)"


def test_a_page_imports_no_other_page() -> None:
    graph = import_graph("app")
    assert [
        f"{module} -> {target}"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if is_page(module) and is_page(target)
    ] == []


def test_importing_every_module_of_graders_registers_no_diagnosis() -> None:
    # A registry below the modules that fill it is filled by a call (the loader's, the
    # grader's, the app's at start), never as a module is imported.
    modules = sorted(m for m in module_files("graders") if not m.endswith(".__main__"))
    probe = (
        "import importlib, sys\n"
        "for module in sys.argv[1:]:\n"
        "    importlib.import_module(module)\n"
        "from graders import diagnoses, grading\n"
        "try:\n"
        "    diagnoses.registry()\n"
        "except diagnoses.DiagnosisDeclarationError:\n"
        "    print('empty')\n"
        "grading.install_diagnoses()\n"
        "print(len(diagnoses.registry()) > 0)\n"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe, *modules],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert found.stdout.split() == ["empty", "True"], found.stderr


def test_the_warm_pool_and_each_backend_import_no_other_backend() -> None:
    # The pool takes its slots' outer sandbox from the registry (sandbox/backends.py); what the
    # backends share sits below them (supervise, pipes). bwrap_pool is bwrap's own.
    backends = {"sandbox.bwrap": {"sandbox.bwrap_pool"}, "sandbox.docker": set()}
    graph = import_graph("sandbox")
    own = {module: {module, *extra} for module, extra in backends.items()}
    every_backend = {m for modules in own.values() for m in modules}
    reaching = {
        f"{module} -> {target}"
        for module in ["sandbox.pool", *every_backend]
        for target in graph[module] & every_backend
        if not any(module in mine and target in mine for mine in own.values())
    }
    assert reaching == set()
