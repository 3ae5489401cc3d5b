"""The package as users see it: stubs that match the module, docstrings, py.typed."""

from __future__ import annotations

import ast
import inspect
import pathlib

import rasa_client
from rasa_client import _native

PKG = pathlib.Path(rasa_client.__file__).parent


def stub_classes() -> dict[str, set[str]]:
    tree = ast.parse((PKG / "_native.pyi").read_text())
    return {
        node.name: {
            n.name
            for n in node.body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("__")
        }
        | {
            n.target.id
            for n in node.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        }
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }


def test_stubs_match_the_module():
    stubs = stub_classes()
    native = {n for n, v in vars(_native).items() if inspect.isclass(v)}
    assert set(stubs) == native
    for name, members in stubs.items():
        real = {m for m in dir(getattr(_native, name)) if not m.startswith("__")}
        assert members == real, f"{name}: stubs {sorted(members ^ real)} differ"


def test_public_names_are_documented():
    assert (PKG / "py.typed").exists()
    for name in rasa_client.__all__:
        obj = getattr(rasa_client, name)
        assert obj.__doc__, f"{name} has no docstring"
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for m, f in vars(obj).items():
                if not m.startswith("_") and callable(f):
                    assert f.__doc__, f"{name}.{m} has no docstring"
