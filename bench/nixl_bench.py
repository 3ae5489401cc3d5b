"""NIXL's agent moving blocks between its registered DRAM and Rasa (issue 64), by one route
a process (``NIXL_PLUGIN_DIR`` is read once per process): Rasa's own plugin (``RASA``,
one-sided where the fast path is on, or ``fast_path=off``: HTTP) or NIXL's ``OBJ`` plugin
through Rasa's S3 listener. Batches of 16 × 16 MiB and 256 × 64 KiB, each written then
read back in one transfer, every read checked byte-exact; GB/s medians. Prints one
Markdown row.

    python bench/nixl_bench.py rasa URL FAST_PATH ROUNDS LABEL
    python bench/nixl_bench.py obj S3_HOST:PORT KEY_ID:SECRET ROUNDS LABEL
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid

import torch

SHAPES = [(16, 16 << 20), (256, 64 << 10)]


def agent(route: str, where: str, arg: str):
    import logging

    logging.getLogger("nixl").setLevel(logging.WARNING)  # its INFO lines go to stdout
    from nixl_cu12._api import nixl_agent, nixl_agent_config

    a = nixl_agent(f"bench-{uuid.uuid4().hex[:8]}", nixl_agent_config(backends=[]))
    if route == "rasa":
        a.create_backend("RASA", {"endpoint": where, "fast_path": arg, "timeout_ms": "60000"})
        return a
    key_id, secret = arg.split(":", 1)
    a.create_backend("OBJ", {"endpoint_override": where, "scheme": "http", "bucket": "data",
                             "access_key": key_id, "secret_key": secret, "region": "us-east-1",
                             "use_virtual_addressing": "false"})
    return a


def run(a, op: str, local, remote) -> float:
    h = a.initialize_xfer(op, local, remote, a.name)
    t0 = time.perf_counter()
    state = a.transfer(h)
    while state == "PROC":
        state = a.check_xfer_state(h)
    t = time.perf_counter() - t0
    a.release_xfer_handle(h)
    assert state == "DONE", state
    return t


def shape(a, n: int, size: int, rounds: int) -> tuple[float, float]:
    src = torch.randint(0, 256, (n * size,), dtype=torch.uint8)
    dst = torch.zeros(n * size, dtype=torch.uint8)
    a.register_memory([src, dst])
    local = lambda t: a.get_xfer_descs(  # noqa: E731
        [(t.data_ptr() + i * size, size, 0) for i in range(n)], "DRAM")
    writes, reads = [], []
    for r in range(rounds + 1):  # the first round warms arenas and registrations
        # The same keys every round, as a cache's blocks are overwritten: the gateway's
        # memory turns over rather than growing into pages never touched before.
        names = [f"bench/{os.getpid()}/{size}/{i}" for i in range(n)]
        ids = list(range(r * n + 1, (r + 1) * n + 1))
        a.register_memory([(0, size, d, k) for d, k in zip(ids, names)], "OBJ")
        remote = a.get_xfer_descs([(0, size, d) for d in ids], "OBJ")
        tw = run(a, "WRITE", local(src), remote)
        dst.zero_()
        tr = run(a, "READ", local(dst), remote)
        assert torch.equal(src, dst), "a block came back other"
        if r:
            writes.append(n * size / tw / 1e9)
            reads.append(n * size / tr / 1e9)
    return statistics.median(writes), statistics.median(reads)


def main() -> None:
    route, where, arg, rounds, label = sys.argv[1:6]
    a = agent(route, where, arg)
    cells = []
    for n, size in SHAPES:
        w, r = shape(a, n, size, int(rounds))
        cells += [f"{w:.2f}", f"{r:.2f}"]
    print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
