"""``rasa_client.safetensors`` with torch (issue 48): every dtype safetensors defines,
written by ``safetensors.torch`` itself, loaded from a real gateway as torch tensors that
share one registered buffer — bfloat16 and float8 included."""

from __future__ import annotations

import os
import uuid

import torch
from rasa_client import Client, RegisteredBuffer
from rasa_client import safetensors as rst
from safetensors.torch import save

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.uint16, torch.int16, torch.float16,
          torch.bfloat16, torch.uint32, torch.int32, torch.float32, torch.uint64, torch.int64,
          torch.float64, torch.float8_e5m2, torch.float8_e4m3fn]


def test_every_dtype_loads_exactly_as_views_of_one_registered_buffer():
    g = torch.Generator().manual_seed(0)
    want = {}
    for i, dt in enumerate(DTYPES):
        shape = [(3, 5), (7,), (2, 3, 4), (64, 33)][i % 4]
        want[f"t{i}"] = torch.randint(0, 100, shape, generator=g).to(torch.float32).to(dt)
    with Client(os.environ["RASA_ENDPOINT"]) as c:
        key = f"weights/{uuid.uuid4().hex}/model.safetensors"
        c.put(key, save(want))
        buf = c.register(1 << 20)
        got = rst.load(c, key, framework="torch", into=buf)
    assert set(got) == set(want)
    lo = torch.frombuffer(buf, dtype=torch.uint8).data_ptr()
    for name, t in want.items():
        g_ = got[name]
        assert g_.dtype == t.dtype and g_.shape == t.shape, name
        assert torch.equal(g_.view(torch.uint8), t.view(torch.uint8)), name
        assert lo <= g_.data_ptr() < lo + len(buf), f"{name} is not a view of the buffer"
    assert isinstance(buf, RegisteredBuffer)
