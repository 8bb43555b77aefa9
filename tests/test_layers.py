"""The folders are the architecture: core imports neither gpu, app, cli, Qt nor CUDA; gpu no Qt."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

FORBIDDEN = {
    "core": {"gpu", "app", "cli", "PySide6", "pycuda"},
    "gpu": {"app", "cli", "PySide6"},
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports(layer):
    offenders = {str(path.relative_to(ROOT)): sorted(imported_modules(path) & FORBIDDEN[layer])
                 for path in (ROOT / layer).rglob("*.py")}
    assert {path: names for path, names in offenders.items() if names} == {}
