"""Fixtures: the real gateway binary on a free loopback port, with the fast path over
libfabric's ``tcp;ofi_rxm`` provider on loopback (as the Rust end-to-end tests run it)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import tempfile
import threading
import urllib.request
from collections.abc import Iterator

import pytest

import rasa_client

ROOT = pathlib.Path(__file__).resolve().parents[2]


def gateway_bin() -> str:
    """The gateway binary: ``RASA_GATEWAY_BIN``, else the workspace's debug build."""
    path = os.environ.get("RASA_GATEWAY_BIN", str(ROOT / "target" / "debug" / "rasa-gateway"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"no gateway binary at {path}: run `cargo build -p rasa-gateway` first")
    return path


class Gateway:
    """A running ``rasa-gateway`` process and its URL."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [gateway_bin(), "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("RASA_TEST_LOG") else subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": os.environ.get("RASA_TEST_RUST_LOG", "warn")},
            text=True,
        )
        # The gateway prints one line once it accepts connections: the signal to wait for.
        line = self.proc.stdout.readline().strip()
        prefix = "rasa-gateway listening on "
        if not line.startswith(prefix):
            self.stop()
            raise RuntimeError(f"unexpected first line from the gateway: {line!r}")
        self.url = line[len(prefix) :]

    def stop(self) -> None:
        """Stops the gateway (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def requests_to(url: str, route: str) -> float:
    """Requests the gateway answered on ``route``, from ``/metrics``."""
    total = 0.0
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("rasa_http_requests_total{") and f'route="{route}"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


FAST = ("--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm")


@pytest.fixture(scope="session")
def gateway() -> Iterator[Gateway]:
    """One gateway with the fast path on, shared by the tests that only read and write."""
    gw = Gateway(*FAST)
    yield gw
    gw.stop()


@pytest.fixture
def own_gateway() -> Iterator[type[Gateway]]:
    """Start gateways of a test's own (with its own flags); stopped at the end."""
    started: list[Gateway] = []

    class Own(Gateway):
        def __init__(self, *args: str) -> None:
            super().__init__(*args)
            started.append(self)

    yield Own
    for gw in started:
        gw.stop()


@pytest.fixture
def client(gateway: Gateway) -> Iterator[rasa_client.Client]:
    """A client that must read one-sided."""
    with rasa_client.Client(gateway.url, fast_path="required") as c:
        yield c


@pytest.fixture
def tmp_token_file() -> Iterator[pathlib.Path]:
    """A path for a new token file."""
    with tempfile.TemporaryDirectory() as d:
        yield pathlib.Path(d) / "tokens"


def new_token(file: pathlib.Path, name: str, scopes: str) -> str:
    """A token made by ``rasa-gateway token new``, appended to ``file``."""
    out = subprocess.run(
        [gateway_bin(), "token", "new", name, "--scopes", scopes, "--file", str(file)],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


class S3Origin:
    """A real S3-compatible server (``s3s-fs``, installed by ``make test``'s set-up) over a
    directory, taking unsigned requests like a public bucket; objects are written straight
    into the directory (s3s-fs serves files)."""

    BUCKET = "rasa-bucket"

    def __init__(self, root: pathlib.Path) -> None:
        (root / self.BUCKET).mkdir(parents=True)
        self.root = root
        self.proc = subprocess.Popen(
            [os.environ.get("RASA_S3S_FS_BIN", "s3s-fs"), "--host", "127.0.0.1", "--port", "0", str(root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"},
            text=True,
        )
        # s3s-fs logs one line naming its address once it listens: the signal to wait for.
        for line in self.proc.stdout:
            if "server is running at " in line:
                self.endpoint = line.split("server is running at ")[1].strip()
                break
        else:
            raise RuntimeError("s3s-fs exited without announcing its address")
        # Its later lines are read and dropped, so that a full pipe never stops it.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def put(self, key: str, body: bytes) -> None:
        path = self.root / self.BUCKET / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)

    def gateway_args(self, prefix: str) -> tuple[str, ...]:
        """Flags that make a gateway a read-through cache of the bucket under ``prefix``."""
        return ("--origin", f"s3://{self.BUCKET}/{prefix}", "--s3-endpoint", self.endpoint, "--s3-anonymous")


@pytest.fixture
def s3_origin(tmp_path: pathlib.Path) -> Iterator[S3Origin]:
    """An S3 origin of a test's own, stopped at its end."""
    s3 = S3Origin(tmp_path / "s3")
    yield s3
    s3.proc.kill()
    s3.proc.wait()


def metric(url: str, name: str) -> float:
    """The value of an unlabelled metric on ``/metrics`` (0 when absent)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    return 0.0
