"""The README's sessions run as written (against a test gateway instead of
127.0.0.1:8080): its curl session line by line, with the answers it claims, and its
Python session; and the Python SDK guide's first examples."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide" / "python-sdk.md"


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def try_it() -> str:
    text = README.read_text()
    return text[text.index("## Try it") : text.index("## The book")]


def python_examples() -> list[str]:
    return blocks(GUIDE.read_text(), "python")


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= 200


def test_the_readme_curl_session_answers_as_it_says(gateway):
    (session,) = blocks(try_it(), "sh")
    lines = [ln for ln in session.splitlines() if ln.strip()]
    assert len(lines) == 5
    # `curl … | head -1` fails now and then (curl: (23) Failed writing body, under
    # pipefail) when the body arrives in more than one read: head has exited by the
    # second write. A reader in the session reads all of its input.
    early = [ln for ln in lines if re.search(r"\|\s*head\b", ln)]
    assert not early, f"readers that stop before the end of curl's output: {early}"
    out = []
    for ln in lines:
        cmd = ln.split("  #")[0].replace("http://127.0.0.1:8080", gateway.url)
        r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (cmd, r.stderr)
        out.append(r.stdout)
    descriptor = json.loads(out[0])
    assert descriptor["length"] == README.stat().st_size
    assert out[1] == README.read_text().splitlines(keepends=True)[0]
    assert out[2].lower().startswith("etag:")
    assert json.loads(out[3])["version"] == descriptor["version"]
    assert out[4].strip() == "204"


def test_the_readme_python_session_runs(gateway):
    (code,) = blocks(try_it(), "python")
    exec(compile(code.replace("http://127.0.0.1:8080", gateway.url), "README.md python", "exec"), {})


def test_the_guide_has_python_examples():
    assert len(python_examples()) >= 3


@pytest.mark.parametrize("n", range(3))
def test_a_python_sdk_guide_example_runs_as_written(gateway, n):
    code = python_examples()[n].replace("http://127.0.0.1:8080", gateway.url)
    exec(compile(code, f"docs/guide/python-sdk.md python example {n + 1}", "exec"), {})
