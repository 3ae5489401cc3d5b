"""Rasa as LMCache's L2 through its ``plugin`` route: the whole L1 arena registered once.

LMCache's ``native_plugin`` route hands a connector one memoryview per chunk and never the
arena behind them, so ``RasaConnector`` finds the arena in ``/proc/self/maps`` and
registers it the first time a chunk lands there. The ``plugin`` route hands its adapter
``l1_memory_desc``, the L1 arena itself (what LMCache's Mooncake Store adapter registers
for RDMA): ``RasaL2Adapter`` registers it with the client when the adapter is made (once
per batch that may be in flight, ``workers``), so no load ever registers memory or reads
``/proc/self/maps``, and every chunk lands in L1 with no copy::

    {"type": "plugin", "module_path": "rasa_client.lmcache_l2", "class_name": "RasaL2Adapter",
     "adapter_params": {"endpoint": "http://rasa:8080", "namespace": "tenant-a"}}

``adapter_params`` are ``RasaConnector``'s (see ``rasa_client.lmcache``), plus
``max_capacity_gb`` (LMCache's usage accounting; 0: none). The adapter is LMCache's own
``NativeConnectorL2Adapter`` over a ``RasaConnector``: stores, loads, lookups and
deletes behave exactly as on the ``native_plugin`` route.
"""

from __future__ import annotations

from typing import Any

from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import (
    NativeConnectorL2Adapter,
)

from .lmcache import RasaConnector


class RasaL2Adapter(NativeConnectorL2Adapter):  # type: ignore[misc]
    """LMCache's native-connector adapter over a ``RasaConnector`` whose client registered
    the L1 arena up front."""

    def __init__(self, adapter_params: dict[str, Any], l1_memory_desc: Any = None) -> None:
        params = dict(adapter_params or {})
        capacity = float(params.pop("max_capacity_gb", 0))
        l1 = None
        if l1_memory_desc is not None and l1_memory_desc.ptr and l1_memory_desc.size > 0:
            # A lazily allocated arena exposes the prefix that stays put.
            stable = getattr(l1_memory_desc, "stable_registration_size", None)
            l1 = (int(l1_memory_desc.ptr), int(stable or l1_memory_desc.size))
        self.connector = RasaConnector(**params, l1_memory=l1)
        super().__init__(self.connector, max_capacity_gb=capacity, type_name="rasa")
