"""The error codes the registry sends and the client maps come from one list
(hubcli.format.error_codes): the registry sends only those, every one of them somewhere, and
the client decides a hint for each."""

from __future__ import annotations

import ast
from pathlib import Path

from hubcli.format import error_codes
from hubcli.format.error_codes import ERROR_CODES
from hubcli.remote.errors import CODE_HINTS

ROOT = Path(__file__).resolve().parent.parent
NAMES = {name for name, value in vars(error_codes).items()
         if name.isupper() and name != "ERROR_CODES"}


def _trees(folder: str):
    for path in sorted((ROOT / folder).rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_every_code_has_a_client_hint_and_every_hint_a_code():
    assert set(CODE_HINTS) == ERROR_CODES
    assert {getattr(error_codes, n) for n in NAMES} == ERROR_CODES


def _spelled_code(node: ast.AST) -> bool:
    """A code written as a literal where one is sent: `code="..."` or `code = "..."`."""
    if isinstance(node, ast.keyword) and node.arg == "code":
        value = node.value
    elif (isinstance(node, ast.Assign) and len(node.targets) == 1
          and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "code"):
        value = node.value
    else:
        return False
    return isinstance(value, ast.Constant) and isinstance(value.value, str)


def test_the_registry_sends_every_listed_code_and_spells_none_itself():
    used, spelled = set(), []
    for path, tree in _trees("registry_server"):
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "codes"):
                used.add(node.attr)
            if _spelled_code(node):
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert spelled == []
    assert used == NAMES


def test_the_client_spells_no_code_itself():
    spelled = [f"{path.relative_to(ROOT)}:{node.lineno}" for path, tree in _trees("hubcli/remote")
               for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and node.value in ERROR_CODES]
    assert spelled == []
