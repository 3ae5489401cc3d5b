"""Fixtures: the real gateway with its S3 listener on free loopback ports, access keys
made by `rasa-gateway s3-key new`, and the real clients (aws-cli, boto3, s5cmd, pyarrow)
pointed at it."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest
from botocore.config import Config

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = pathlib.Path(os.environ.get("VIRTUAL_ENV", pathlib.Path(os.sys.executable).parent.parent)) / "bin"


def binary(name: str) -> str:
    path = os.environ.get(f"RASA_{name.upper().replace('-', '_')}_BIN", str(ROOT / "target" / "debug" / name))
    if not os.access(path, os.X_OK):
        pytest.fail(f"no {name} binary at {path}: run `cargo build --workspace --bins` first")
    return path


@dataclass
class Key:
    """An S3 access key."""

    id: str
    secret: str


def new_key(file: pathlib.Path, name: str, scopes: str) -> Key:
    out = subprocess.run(
        [binary("rasa-gateway"), "s3-key", "new", name, "--scopes", scopes, "--file", str(file)],
        check=True,
        capture_output=True,
        text=True,
    )
    key_id, secret = out.stdout.split()
    return Key(key_id, secret)


class Gateway:
    """A running gateway with `--s3-listen`; `.url` (native API) and `.s3` (S3 API)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [binary("rasa-gateway"), "--listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE,
            stderr=None if os.environ.get("RASA_TEST_LOG") else subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": os.environ.get("RASA_TEST_RUST_LOG", "warn"), **(env or {})},
            text=True,
        )
        # Both listeners are bound before the first line: the lines are the signal.
        first, second = self.proc.stdout.readline().strip(), self.proc.stdout.readline().strip()
        if not first.startswith("rasa-gateway listening on ") or " S3 on " not in second:
            self.stop()
            raise RuntimeError(f"unexpected first lines from the gateway: {first!r} {second!r}")
        self.url = first.removeprefix("rasa-gateway listening on ")
        self.s3 = second.split(" S3 on ", 1)[1]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Setup:
    """A gateway, its keys, and where to write files."""

    gw: Gateway
    admin: Key
    reader: Key
    tmp: pathlib.Path
    ca: str | None = None

    def env(self, key: Key | None = None, sigv4: bool = True) -> dict[str, str]:
        key = key or self.admin
        # aws-cli v1 presigns with SigV2 unless told otherwise.
        config = self.tmp / "aws-config"
        config.write_text("[default]\ns3 =\n    signature_version = s3v4\n")
        return {
            **os.environ,
            "AWS_ACCESS_KEY_ID": key.id,
            "AWS_SECRET_ACCESS_KEY": key.secret,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": str(config) if sigv4 else "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        }

    def aws(
        self, *args: str, key: Key | None = None, check: bool = True, sigv4: bool = True
    ) -> subprocess.CompletedProcess:
        extra = ["--ca-bundle", self.ca] if self.ca else []
        return subprocess.run(
            [str(VENV_BIN / "aws"), "--endpoint-url", self.gw.s3, *extra, *args],
            env=self.env(key, sigv4),
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def boto3(self, key: Key | None = None):
        key = key or self.admin
        return boto3.client(
            "s3",
            endpoint_url=self.gw.s3,
            aws_access_key_id=key.id,
            aws_secret_access_key=key.secret,
            region_name="us-east-1",
            verify=self.ca if self.ca else True,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )

    def rasa(self, *args: str) -> subprocess.CompletedProcess:
        """The native CLI against the same gateway."""
        extra = ["--ca-file", self.ca] if self.ca else []
        return subprocess.run(
            [binary("rasa"), "--endpoint", self.gw.url, *extra, *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )


FAST = ("--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm")


def start(tmp: pathlib.Path, *extra: str, tls: bool = False) -> Setup:
    keys = tmp / "s3-keys"
    admin = new_key(keys, "admin", "read,write")
    reader = new_key(keys, "reader", "read")
    args = ["--s3-bucket", "data", "--s3-credentials-file", str(keys), *FAST, *extra]
    ca = None
    if tls:
        flags, ca = tls_args(tmp)
        args += flags
    return Setup(Gateway(*args), admin, reader, tmp, ca)


class Etcd:
    """A real etcd (Debian's etcd-server) on free loopback ports, for a cluster."""

    def __init__(self, tmp: pathlib.Path) -> None:
        client, peer = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        self.proc = subprocess.Popen(
            ["etcd", "--data-dir", str(tmp / "etcd"), "--name", "s3-clients",
             "--listen-client-urls", client_url, "--advertise-client-urls", client_url,
             "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
             "--initial-cluster", f"s3-clients={peer_url}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        # It says when it serves clients: the signal to wait for.
        for line in self.proc.stderr:
            if "ready to serve client requests" in line:
                break
        else:
            raise RuntimeError("etcd ended before serving clients")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()
        self.endpoint = f"etcd://127.0.0.1:{client}"

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_members(gw: Gateway, n: int, ca: str | None = None) -> None:
    """Until `gw` sees `n` serving members (following its view with the long poll)."""
    url = f"{gw.url}/v1/cluster"
    deadline = time.monotonic() + 30
    context = ssl.create_default_context(cafile=ca) if ca else None
    while True:
        with urllib.request.urlopen(url, timeout=35, context=context) as r:
            view = json.load(r)
        if sum(m["state"] == "serving" for m in view["members"]) == n:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{gw.url} does not see {n} serving members: {view}")
        url = f"{gw.url}/v1/cluster?after={view['revision']}"


def wait_ready(gw: Gateway, ca: str | None = None) -> None:
    """Until `gw` answers /readyz with 200: a member that just registered owns its keys
    a moment later, once the others have seen it."""
    context = ssl.create_default_context(cafile=ca) if ca else None
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{gw.url}/readyz", timeout=5, context=context) as r:
                if r.status == 200:
                    return
        except urllib.error.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{gw.url} is not ready")
        time.sleep(0.02)


def start_cluster(tmp: pathlib.Path, members: int = 3, tls: bool = False) -> tuple[Setup, Etcd, list[Gateway]]:
    """`members` gateways of one cluster, each with its S3 listener, one credentials file
    (with `tls`, one private CA that the members trust with --cluster-ca-file); the setup
    talks to the first."""
    keys = tmp / "s3-keys"
    admin = new_key(keys, "admin", "read,write")
    reader = new_key(keys, "reader", "read")
    etcd = Etcd(tmp)
    name = f"s3-{uuid.uuid4().hex[:8]}"
    extra, ca = tls_args(tmp) if tls else ([], None)
    if ca:
        extra += ["--cluster-ca-file", ca]
    gws = [
        Gateway("--s3-bucket", "data", "--s3-credentials-file", str(keys), *FAST, *extra,
                "--cluster", etcd.endpoint, "--cluster-name", name, "--node-id", f"g{i}")
        for i in range(1, members + 1)
    ]
    for gw in gws:
        wait_for_members(gw, members, ca)
    for gw in gws:
        wait_ready(gw, ca)
    return Setup(gws[0], admin, reader, tmp, ca), etcd, gws


def tls_args(tmp: pathlib.Path) -> tuple[list[str], str]:
    """A certificate for 127.0.0.1 from a private CA (`rasa-gateway tls self-signed`): the
    gateway's flags, and the CA file clients trust."""
    subprocess.run(
        [binary("rasa-gateway"), "tls", "self-signed", "--host", "127.0.0.1", "--out", str(tmp / "tls")],
        check=True,
        capture_output=True,
    )
    return (
        ["--tls-cert", str(tmp / "tls" / "cert.pem"), "--tls-key", str(tmp / "tls" / "key.pem")],
        str(tmp / "tls" / "ca.pem"),
    )


@pytest.fixture(scope="session", params=["http", "https", "cluster", "cluster-https"])
def s3(request) -> Iterator[Setup]:
    """One gateway per scheme, and the first member of a 3-member cluster (every member
    serves S3; keys live at their owners), over http and over https with a private CA,
    shared by the tests that do not need flags of their own."""
    with tempfile.TemporaryDirectory() as d:
        if request.param.startswith("cluster"):
            setup, etcd, gws = start_cluster(pathlib.Path(d), tls=request.param == "cluster-https")
            yield setup
            for gw in gws:
                gw.stop()
            etcd.stop()
            return
        setup = start(pathlib.Path(d), tls=request.param == "https")
        yield setup
        setup.gw.stop()


@pytest.fixture
def prefix() -> str:
    """A key prefix of the test's own."""
    return f"t-{uuid.uuid4().hex[:12]}/"


@pytest.fixture
def tmp_path_factory_dir() -> Iterator[pathlib.Path]:
    with tempfile.TemporaryDirectory() as d:
        yield pathlib.Path(d)


def json_of(p: subprocess.CompletedProcess):
    return json.loads(p.stdout)


class S3sFs:
    """s3s-fs (an S3 server over a directory; `make test` installs it) with one bucket."""

    ACCESS, SECRET = "origin-key", "origin-secret"

    def __init__(self, root: pathlib.Path, bucket: str) -> None:
        (root / bucket).mkdir(parents=True)
        self.proc = subprocess.Popen(
            [os.environ.get("RASA_S3S_FS_BIN", "s3s-fs"), "--host", "127.0.0.1", "--port", "0",
             "--access-key", self.ACCESS, "--secret-key", self.SECRET, str(root)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "RUST_LOG": "s3s_fs=info", "NO_COLOR": "1"},
        )
        # It announces its address once it listens: the signal to wait for.
        for line in self.proc.stdout:
            if "server is running at " in line:
                self.url = line.split("server is running at ", 1)[1].strip()
                break
        else:
            raise RuntimeError("s3s-fs ended without announcing its address")

    def client(self):
        return boto3.client(
            "s3", endpoint_url=self.url, aws_access_key_id=self.ACCESS,
            aws_secret_access_key=self.SECRET, region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
