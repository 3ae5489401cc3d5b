"""Rasa's native NIXL plugin (``libplugin_RASA.so``, built by ``scripts/nixl-plugin.sh``)
loaded by NIXL's own agent from ``NIXL_PLUGIN_DIR``: writes from the agent's registered
DRAM go one-sided into the gateway (no PUT of a value over HTTP), reads land one-sided in
the registered memory (no GET of a value over HTTP), a part of a value is a range read,
a batch of descriptors is one transfer, failures are NIXL errors, and a backend's keys
live in its namespace only.

Runs in a pytest process of its own (``scripts/engines.sh``): ``NIXL_PLUGIN_DIR`` replaces
NIXL's own plugin directory for the process.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import urllib.error
import urllib.request
import uuid

import pytest
import torch
from conftest import ROOT, nixl_objects, nixl_run, start_gateway, stop_gateway

PLUGIN_DIR = os.environ.get("RASA_NIXL_PLUGIN_DIR", str(ROOT / "target" / "debug" / "nixl"))
if not (pathlib.Path(PLUGIN_DIR) / "libplugin_RASA.so").exists():
    pytest.fail(f"no libplugin_RASA.so in {PLUGIN_DIR}: run scripts/nixl-plugin.sh first", pytrace=False)
os.environ["NIXL_PLUGIN_DIR"] = PLUGIN_DIR

from nixl_cu12._api import nixl_agent, nixl_agent_config  # noqa: E402
from nixl_cu12._bindings import nixlInvalidParamError, nixlMismatchError, nixlNotFoundError  # noqa: E402

MiB = 1 << 20


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway (fast path on, as the engines' tests run it) with two tenants."""
    tmp = tmp_path_factory.mktemp("nixl-rasa")
    (tmp / "namespaces").write_text("tenant-a 64MiB\ntenant-b 64MiB\n")
    proc, url = start_gateway("--listen", "127.0.0.1:0", "--memory", "256MiB",
                              "--max-object-size", "64MiB", "--namespaces", str(tmp / "namespaces"))
    yield url
    stop_gateway(proc)


def backend(url: str, **params) -> nixl_agent:
    """A NIXL agent with the RASA backend, made as the engines guide makes it."""
    a = nixl_agent(f"rasa-{uuid.uuid4().hex[:8]}", nixl_agent_config(backends=[]))
    a.create_backend("RASA", {"endpoint": url, "fast_path": "required", "timeout_ms": "10000", **params})
    return a


def requests(url: str) -> dict[tuple[str, str], int]:
    """The gateway's HTTP requests so far, by (method, route)."""
    with urllib.request.urlopen(f"{url}/metrics") as r:
        text = r.read().decode()
    out: dict[tuple[str, str], int] = {}
    for m in re.finditer(r'^rasa_http_requests_total\{(.*)\} (\d+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        k = (labels["method"], labels["route"])
        out[k] = out.get(k, 0) + int(m.group(2))
    return out


def counted(before: dict, after: dict, method: str, route: str) -> int:
    """Requests of ``method`` on routes ending in ``route`` between two readings."""
    return sum(n - before.get(k, 0) for k, n in after.items() if k[0] == method and k[1].endswith(route))


def values_over_http(before: dict, after: dict) -> int:
    """Requests that carried a value's bytes over HTTP: an object's own route (GET, PUT)
    or the batch of values (POST /v1/batch/put)."""
    return (counted(before, after, "GET", "/objects/{*key}") + counted(before, after, "PUT", "/objects/{*key}")
            + counted(before, after, "POST", "/batch/put"))


def vtable_bytes(lib: pathlib.Path, cls: str) -> int:
    """The size of the table of virtual functions of the class ``cls`` in ``lib``."""
    out = subprocess.run(["readelf", "-sW", str(lib)], check=True, capture_output=True, text=True).stdout
    sizes = {int(f[2]) for f in (line.split() for line in out.splitlines())
             if len(f) >= 8 and f[3] == "OBJECT" and f[7].startswith("_ZTV") and f[7].endswith(cls)}
    assert len(sizes) == 1, f"no single vtable of {cls} in {lib}: {sizes}"
    return sizes.pop()


def test_the_engine_meets_the_installed_nixl_abi():
    """The plugin's engine has the table of virtual functions NIXL's own plugins have (NIXL
    calls them by their place in it; nixl-plugin/cpp/nixl_abi.h declares them)."""
    import nixl_cu12

    wheel = pathlib.Path(nixl_cu12.__file__).parents[1] / ".nixl_cu12.mesonpy.libs" / "plugins"
    ours = vtable_bytes(pathlib.Path(PLUGIN_DIR) / "libplugin_RASA.so", "10RasaEngineE")
    assert ours == vtable_bytes(wheel / "libplugin_POSIX.so", "15nixlPosixEngine")


def test_the_plugin_is_found_and_says_what_it_takes(gateway):
    a = nixl_agent(f"rasa-{uuid.uuid4().hex[:8]}", nixl_agent_config(backends=[]))
    assert "RASA" in a.get_plugin_list()
    params = a.get_plugin_params("RASA")
    assert {"endpoint", "namespace", "token", "fast_path", "timeout_ms"} <= set(params)
    assert params["fast_path"] == "auto"
    assert set(a.get_plugin_mem_types("RASA")) == {"DRAM_SEG", "OBJ_SEG"}


def test_a_write_goes_one_sided_and_reads_land_in_registered_memory(gateway):
    a = backend(gateway)
    key = f"nixl/{uuid.uuid4().hex}"
    src = (torch.arange(9 * MiB, dtype=torch.int64) % 251).to(torch.uint8)
    whole = torch.zeros(9 * MiB, dtype=torch.uint8)
    part = torch.zeros(MiB, dtype=torch.uint8)
    a.register_memory([src, whole, part])
    obj = nixl_objects(a, [key], 9 * MiB)

    before = requests(gateway)
    assert nixl_run(a, "WRITE", a.get_xfer_descs([src]), obj(0, 9 * MiB, [0])) == "DONE"
    after = requests(gateway)
    assert values_over_http(before, after) == 0, "the value went one-sided, not in a request body"
    assert counted(before, after, "POST", "/batch/commit/{upload}") == 1, "one upload, committed"
    with urllib.request.urlopen(f"{gateway}/v1/objects/{key}") as r:
        assert r.read() == src.numpy().tobytes()

    before = requests(gateway)
    assert nixl_run(a, "READ", a.get_xfer_descs([whole]), obj(0, 9 * MiB, [0])) == "DONE"
    assert values_over_http(before, requests(gateway)) == 0, "the value was read one-sided"
    assert torch.equal(whole, src)
    # A part of the value: a range read.
    assert nixl_run(a, "READ", a.get_xfer_descs([part]), obj(5 * MiB + 3, MiB, [0])) == "DONE"
    assert torch.equal(part, src[5 * MiB + 3 : 6 * MiB + 3])


def test_a_batch_of_descriptors_is_one_transfer(gateway):
    a = backend(gateway)
    names = [f"nixl/batch/{uuid.uuid4().hex}/{i}" for i in range(8)]
    # One registered pool, as an engine's KV pool is: 8 blocks written, 8 read back.
    pool = torch.zeros(16 * (256 << 10), dtype=torch.uint8)
    for i in range(8):
        pool[i * (256 << 10) : (i + 1) * (256 << 10)] = i + 1
    a.register_memory([pool])
    blocks = lambda first: a.get_xfer_descs(  # noqa: E731
        [(pool.data_ptr() + (first + i) * (256 << 10), 256 << 10, 0) for i in range(8)], "DRAM")
    obj = nixl_objects(a, names, 256 << 10)
    before = requests(gateway)
    assert nixl_run(a, "WRITE", blocks(0), obj(0, 256 << 10, range(8))) == "DONE"
    after = requests(gateway)
    # 2 MiB in one put_many: two uploads of four values (a put is cut into up to four
    # batches written together, of at least 1 MiB each), not one a value.
    assert counted(before, after, "POST", "/batch/commit/{upload}") == 2, "8 values, two uploads"
    assert nixl_run(a, "READ", blocks(8), obj(0, 256 << 10, range(8))) == "DONE"
    assert counted(after, requests(gateway), "POST", "/descriptors") == 1, "8 values, one descriptor request"
    assert torch.equal(pool[8 * (256 << 10) :], pool[: 8 * (256 << 10)])


def test_failures_are_nixl_errors_and_nothing_is_stored(gateway):
    a = backend(gateway)
    buf = torch.ones(MiB, dtype=torch.uint8)
    a.register_memory([buf])
    missing = nixl_objects(a, [f"nixl/missing/{uuid.uuid4().hex}"], MiB)
    with pytest.raises(nixlNotFoundError):
        nixl_run(a, "READ", a.get_xfer_descs([buf]), missing(0, MiB, [0]))

    # More bytes than the value has.
    key = f"nixl/short/{uuid.uuid4().hex}"
    urllib.request.urlopen(urllib.request.Request(f"{gateway}/v1/objects/{key}", b"x" * 1000, method="PUT")).close()
    short = nixl_objects(a, [key], MiB)
    with pytest.raises(nixlMismatchError):
        nixl_run(a, "READ", a.get_xfer_descs([buf]), short(0, MiB, [0]))

    # A write at an offset: values are immutable versions, written whole.
    key = f"nixl/offset/{uuid.uuid4().hex}"
    at = nixl_objects(a, [key], 2 * MiB)
    with pytest.raises(nixlInvalidParamError):
        nixl_run(a, "WRITE", a.get_xfer_descs([buf]), at(MiB, MiB, [0]))
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{gateway}/v1/objects/{key}")
    assert e.value.code == 404


def test_a_backend_lives_in_its_namespace(gateway):
    a, b = backend(gateway, namespace="tenant-a"), backend(gateway, namespace="tenant-b")
    key = f"nixl/tenant/{uuid.uuid4().hex}"
    src = torch.full((MiB,), 7, dtype=torch.uint8)
    dst = torch.zeros(MiB, dtype=torch.uint8)
    a.register_memory([src])
    b.register_memory([dst])
    assert nixl_run(a, "WRITE", a.get_xfer_descs([src]), nixl_objects(a, [key], MiB)(0, MiB, [0])) == "DONE"
    with pytest.raises(nixlNotFoundError):
        nixl_run(b, "READ", b.get_xfer_descs([dst]), nixl_objects(b, [key], MiB)(0, MiB, [0]))
    assert not dst.any()
    with urllib.request.urlopen(f"{gateway}/v1/ns/tenant-a/objects/{key}") as r:
        assert r.read() == src.numpy().tobytes()
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"{gateway}/v1/objects/{key}")
    assert e.value.code == 404


def test_a_backend_without_an_endpoint_is_not_made():
    a = nixl_agent(f"rasa-{uuid.uuid4().hex[:8]}", nixl_agent_config(backends=[]))
    with pytest.raises(Exception):
        a.create_backend("RASA", {"fast_path": "auto"})
