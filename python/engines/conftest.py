"""The engines' tests against Rasa: one real gateway (fast path over ``tcp;ofi_rxm`` on
loopback) for the session, and a ``RasaConnector`` factory the patched tests build their
connectors with — each under a key prefix of its own, so that every test starts from an
empty store as it would with the engine's in-memory mock."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _gateway_bin() -> str:
    path = os.environ.get("RASA_GATEWAY_BIN", str(ROOT / "target" / "debug" / "rasa-gateway"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"no gateway binary at {path}: run `cargo build -p rasa-gateway` first")
    return path


def start_gateway(*args: str) -> tuple[subprocess.Popen, str]:
    """A gateway with ``args`` (fast path over ``tcp;ofi_rxm``), and its URL."""
    proc = subprocess.Popen(
        [_gateway_bin(), "--fast-path", "on", "--fabric-provider", "tcp;ofi_rxm", *args],
        stdout=subprocess.PIPE,
        stderr=None if os.environ.get("RASA_TEST_LOG") else subprocess.DEVNULL,
        env={**os.environ, "RUST_LOG": "warn"},
        text=True,
    )
    line = proc.stdout.readline().strip()
    prefix = "rasa-gateway listening on "
    if not line.startswith(prefix):
        proc.kill()
        raise RuntimeError(f"unexpected first line from the gateway: {line!r}")
    return proc, line[len(prefix):]


def stop_gateway(proc: subprocess.Popen) -> None:
    """Stops a gateway as an operator would (SIGTERM: memory written down to its disk
    tier, if it has one)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError("the gateway did not stop within 20 s of SIGTERM") from None


@pytest.fixture(scope="session", autouse=True)
def rasa_gateway():
    """Starts the gateway and publishes its URL to the tests (``RASA_ENDPOINT``)."""
    proc, url = start_gateway("--listen", "127.0.0.1:0", "--memory", "512MiB")
    os.environ["RASA_ENDPOINT"] = url
    yield url
    stop_gateway(proc)


def rasa_connector(**params):
    """A ``RasaConnector`` on the session's gateway, under a fresh key prefix."""
    from rasa_client.lmcache import RasaConnector

    params = {"endpoint": os.environ["RASA_ENDPOINT"], "prefix": f"t{uuid.uuid4().hex}/", "timeout": 10, **params}
    return RasaConnector(**params)


# NIXL's agent, as the NIXL tests drive it (test_nixl_obj.py, test_nixl_rasa.py).

def nixl_run(a, op: str, local, remote) -> str:
    """One NIXL transfer to its end (NIXL's own polling loop); its handle released."""
    h = a.initialize_xfer(op, local, remote, a.name)
    try:
        state = a.transfer(h)
        while state == "PROC":
            state = a.check_xfer_state(h)
        return state
    finally:
        a.release_xfer_handle(h)


_nixl_ids = iter(range(1 << 30))


def nixl_objects(a, names: list[str], length: int):
    """Registers ``names`` with NIXL as OBJ memory (a device id of its own each, the name
    as the descriptor's metadata); a function making transfer descriptors of ``n`` bytes
    at ``offset`` in the objects ``which`` (indices into ``names``)."""
    ids = [next(_nixl_ids) for _ in names]
    a.register_memory([(0, length, d, n) for d, n in zip(ids, names)], "OBJ")
    return lambda offset, n, which: a.get_xfer_descs([(offset, n, ids[i]) for i in which], "OBJ")
