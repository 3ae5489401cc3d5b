"""NIXL's ``OBJ`` backend (S3, through NIXL's own Python agent and its aws-sdk-cpp plugin)
against Rasa's S3 listener, unchanged: a value written from registered DRAM, read back
whole and at an offset, a batch of descriptors in one transfer, a missing object an error;
what NIXL wrote is what Rasa's own API serves.

``nixl_cu12`` is imported directly: the engines' torch is a CUDA 13 build, so NIXL's
``nixl`` front package would ask for ``nixl-cu13``; the CUDA 12 build runs on CPU the same.
"""

from __future__ import annotations

import subprocess
import urllib.request
import uuid

import pytest
import torch
from conftest import _gateway_bin, nixl_objects, nixl_run
from nixl_cu12._api import nixl_agent, nixl_agent_config
from nixl_cu12._bindings import nixlBackendError

MiB = 1 << 20


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway with its S3 listener (bucket ``data``) and an access key for NIXL."""
    tmp = tmp_path_factory.mktemp("nixl")
    keys = tmp / "s3-keys"
    out = subprocess.run(
        [_gateway_bin(), "s3-key", "new", "nixl", "--scopes", "read,write", "--file", str(keys)],
        check=True, capture_output=True, text=True,
    )
    key_id, secret = out.stdout.split()
    proc = subprocess.Popen(
        [_gateway_bin(), "--listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0",
         "--s3-bucket", "data", "--s3-credentials-file", str(keys), "--memory", "256MiB",
         "--max-object-size", "64MiB"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    first, second = proc.stdout.readline(), proc.stdout.readline()
    if " S3 on " not in second:
        proc.kill()
        raise RuntimeError(f"unexpected first lines from the gateway: {first!r} {second!r}")
    url = first.strip().removeprefix("rasa-gateway listening on ")
    s3 = second.split(" S3 on ", 1)[1].strip()
    yield url, s3, key_id, secret
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture
def agent(gateway):
    """A NIXL agent with the OBJ backend pointed at the S3 listener, as the engines guide
    configures it."""
    _, s3, key_id, secret = gateway
    a = nixl_agent(f"rasa-{uuid.uuid4().hex[:8]}", nixl_agent_config(backends=[]))
    a.create_backend("OBJ", {
        "endpoint_override": s3.removeprefix("http://"), "scheme": "http", "bucket": "data",
        "access_key": key_id, "secret_key": secret, "region": "us-east-1",
        "use_virtual_addressing": "false",
    })
    return a


def test_nixl_writes_and_reads_objects_through_the_s3_listener(gateway, agent):
    url = gateway[0]
    key = f"nixl/{uuid.uuid4().hex}"
    src = (torch.arange(9 * MiB, dtype=torch.int64) % 251).to(torch.uint8)
    whole = torch.zeros(9 * MiB, dtype=torch.uint8)
    part = torch.zeros(MiB, dtype=torch.uint8)
    agent.register_memory([src, whole, part])
    obj = nixl_objects(agent, [key], 9 * MiB)

    assert nixl_run(agent, "WRITE", agent.get_xfer_descs([src]), obj(0, 9 * MiB, [0])) == "DONE"
    # What NIXL wrote is what Rasa's own API serves.
    with urllib.request.urlopen(f"{url}/v1/objects/{key}") as r:
        assert r.read() == src.numpy().tobytes()

    assert nixl_run(agent, "READ", agent.get_xfer_descs([whole]), obj(0, 9 * MiB, [0])) == "DONE"
    assert torch.equal(whole, src)
    # At an offset: a ranged GET.
    assert nixl_run(agent, "READ", agent.get_xfer_descs([part]), obj(5 * MiB + 3, MiB, [0])) == "DONE"
    assert torch.equal(part, src[5 * MiB + 3 : 6 * MiB + 3])


def test_a_batch_of_descriptors_is_one_transfer_and_a_missing_object_an_error(agent):
    names = [f"nixl/batch/{uuid.uuid4().hex}/{i}" for i in range(8)]
    src = [torch.full((256 << 10,), i + 1, dtype=torch.uint8) for i in range(8)]
    dst = [torch.zeros(256 << 10, dtype=torch.uint8) for _ in range(8)]
    agent.register_memory(src + dst)
    obj = nixl_objects(agent, names, 256 << 10)
    ids = list(range(8))
    assert nixl_run(agent, "WRITE", agent.get_xfer_descs(src), obj(0, 256 << 10, ids)) == "DONE"
    assert nixl_run(agent, "READ", agent.get_xfer_descs(dst), obj(0, 256 << 10, ids)) == "DONE"
    assert all(torch.equal(d, s) for d, s in zip(dst, src))

    missing = nixl_objects(agent, [f"nixl/missing/{uuid.uuid4().hex}"], MiB)
    lost = torch.zeros(MiB, dtype=torch.uint8)
    agent.register_memory([lost])
    # S3's 404, as NIXL reports a failed transfer. (Its OBJ plugin leaves the S3 error
    # document in the buffer: a caller checks the transfer's state, never the bytes.)
    with pytest.raises(nixlBackendError):
        nixl_run(agent, "READ", agent.get_xfer_descs([lost]), missing(0, MiB, [0]))
