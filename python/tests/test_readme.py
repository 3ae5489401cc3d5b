"""The README's Python examples run as written (against a test gateway instead of
127.0.0.1:8080), each in a namespace of its own."""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def python_examples() -> list[str]:
    text = README.read_text()
    section = text[text.index("## The Python SDK") : text.index("## The `rasa` CLI")]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_readme_has_python_examples():
    assert len(python_examples()) >= 3


@pytest.mark.parametrize("n", range(3))
def test_a_readme_example_runs_as_written(gateway, n):
    code = python_examples()[n].replace("http://127.0.0.1:8080", gateway.url)
    exec(compile(code, f"README.md python example {n + 1}", "exec"), {})
