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
        # Underscored classes are the stubs' own typing helpers (protocols), not the module's.
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_")
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


USER_CODE = """
from __future__ import annotations

import numpy as np
import numpy.typing as npt

import rasa_client


def main(url: str) -> int:
    c = rasa_client.Client(url, fast_path="auto")
    arr: npt.NDArray[np.float16] = np.zeros((4, 1024), dtype=np.float16)
    c.put("k", arr)
    c.put("k2", b"bytes", if_none_match="*")
    n: int = c.get_into("k", arr[0])
    got = c.get_many_into(["k", "k2"], arr, offsets=[0, 2048])
    reg = c.register(1 << 20)
    view = np.frombuffer(memoryview(reg), dtype=np.uint8)
    c.get_into("k", reg)
    c.get_range_into("k", 0, 100, bytearray(100))
    data: bytes = bytes(c.get("k", version=None))
    c.put_many({"a": arr, "b": arr[1:]})
    ok: list[bool] = c.exists_many(["a", "b"])
    return n + len(got) + int(view[0]) + len(data) + len(ok)


async def amain(url: str) -> bytes:
    a = rasa_client.AsyncClient(url)
    await a.put("k", np.ones(8, dtype=np.int64))
    return bytes(await a.get("k"))
"""


def test_user_code_with_numpy_arrays_passes_mypy_strict_on_python_3_11(tmp_path):
    """numpy's stubs declare ``ndarray.__buffer__`` only for Python >= 3.12: the stubs take
    array-interface objects too, so code passing arrays type-checks on 3.11."""
    import subprocess
    import sys

    (tmp_path / "user.py").write_text(USER_CODE)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--python-version", "3.11",
         "--no-incremental", str(tmp_path / "user.py")],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
