"""Model weights from Rasa next to the local disk and S3, one run (issue 48): a 218 MB
safetensors file of 73 tensors and a 2 GB checkpoint of 8 shards, written into an S3
server's directory (s3s-fs), then loaded whole:

- by ``safetensors.numpy.load_file`` from the local page cache, and with the page cache
  dropped for the files (``posix_fadvise(DONTNEED)``);
- from S3 through s3fs (``cat_file`` then ``safetensors.numpy.load``), and a plain S3 GET
  of the bytes alone (s3fs ``cat_file``);
- by ``rasa_client.safetensors`` (``load`` / ``load_index``) through a gateway that reads
  through from that S3 server: cold (the first load fetches from S3; once) and warm, over
  shm, tcp;ofi_rxm and HTTP;
- one 4 MiB tensor by ``safe_open(...).get_tensor``.

    python bench/weights_bench.py GATEWAY_URL S3_ENDPOINT BUCKET_DIR

Prints a Markdown section.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import s3fs
from ceiling import ceiling  # bench/ceiling.py
from safetensors.numpy import load, load_file, save_file

from rasa_client import Client
from rasa_client import safetensors as rst

ROUNDS = int(os.environ.get("WEIGHT_ROUNDS", "5"))


def best(f, rounds: int = ROUNDS) -> float:
    """Fastest of ``rounds`` runs of ``f``, in ms."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        f()
        times.append((time.perf_counter() - t) * 1e3)
    return min(times)


def dropped(paths: list[str]):
    """``load_file`` of each path with its pages dropped from the page cache first."""

    def run() -> None:
        for p in paths:
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        for p in paths:
            load_file(p)

    return run


def checkpoint(path: str, n: int, size: int, seed: int, first: int = 0) -> None:
    """A safetensors file of ``n`` float16 tensors (``layers.{first}.weight`` on) adding up
    to about ``size`` bytes."""
    rng = np.random.default_rng(seed)
    per = size // n // 2 // 256 * 256
    save_file({f"layers.{first + i}.weight": rng.standard_normal(per, dtype=np.float32).astype(np.float16).reshape(-1, 256) for i in range(n)}, path)


def timed(f) -> float:
    """One run of ``f``, in ms."""
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1e3


def main() -> None:
    url, s3_url, work = sys.argv[1], sys.argv[2], sys.argv[3]
    one = os.path.join(work, "model.safetensors")
    checkpoint(one, 73, 218_000_000, 1)
    shards = [os.path.join(work, f"model-{i + 1:05d}-of-00008.safetensors") for i in range(8)]
    for i, p in enumerate(shards):
        checkpoint(p, 32, 256_000_000, 10 + i, first=32 * i)
    weight_map = {}
    for p in shards:
        with open(p, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        weight_map.update({t: os.path.basename(p) for t in header if t != "__metadata__"})
    assert len(set(weight_map.values())) == len(shards), "every shard in the index"
    with open(os.path.join(work, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": weight_map}, f)
    rows = []
    load_file(one)  # into the page cache
    for p in shards:
        load_file(p)
    rows.append(("local disk, `safetensors.numpy.load_file`, page cache warm", best(lambda: load_file(one)), best(lambda: [load_file(p) for p in shards], 3)))
    rows.append(("local disk, page cache dropped for the files", best(dropped([one]), 3), best(dropped(shards), 2)))
    s3 = s3fs.S3FileSystem(anon=True, client_kwargs={"endpoint_url": s3_url}, skip_instance_cache=True)
    names = [f"weights/{os.path.basename(p)}" for p in shards]
    rows.append(("S3 (s3fs `cat_file`), the bytes alone", best(lambda: s3.cat_file("weights/model.safetensors"), 3), best(lambda: s3.cat(names), 2)))
    rows.append(("S3 via s3fs, then `safetensors.numpy.load`", best(lambda: load(s3.cat_file("weights/model.safetensors")), 3), best(lambda: [load(b) for b in s3.cat(names).values()], 2)))
    tensor_ms = {}
    with Client(url, fast_path="required", fabric_provider="shm", timeout=300) as c:
        buf = c.register(300_000_000)
        big = c.register(2_200_000_000)
        cold = (timed(lambda: rst.load(c, "model.safetensors", into=buf)),
                timed(lambda: rst.load_index(c, "model.safetensors.index.json", into=big)))
        rows.append(("Rasa cold: read through from S3 (first load), shm", *cold))
        got = rst.load_index(c, "model.safetensors.index.json", into=big)
        assert len(got) == len(weight_map) and np.array_equal(got["layers.200.weight"], load_file(shards[6])["layers.200.weight"])
    for name, kw in (("shm", {"fast_path": "required", "fabric_provider": "shm"}),
                     ("tcp;ofi_rxm", {"fast_path": "required", "fabric_provider": "tcp;ofi_rxm"}),
                     ("HTTP", {"fast_path": "off"})):
        with Client(url, timeout=300, **kw) as c:
            buf = c.register(300_000_000)
            rst.load(c, "model.safetensors", into=buf)
            whole = best(lambda: rst.load(c, "model.safetensors", into=buf))
            big = c.register(2_200_000_000)
            sharded = best(lambda: rst.load_index(c, "model.safetensors.index.json", into=big), 3)
            f = rst.safe_open(c, "model.safetensors")
            tensor_ms[name] = best(lambda: f.get_tensor("layers.5.weight"))
        rows.append((f"Rasa warm, `safetensors.load` / `load_index`, {name}", whole, sharded))
    one_size = os.path.getsize(one)
    all_size = sum(os.path.getsize(p) for p in shards)
    cap = ceiling(32 << 20, 100)
    print("## Model weights (`bench/weights.sh`)")
    print()
    print(f"One run, best of {ROUNDS} (the 2 GB checkpoint and S3: best of 2–3; cold: the one first "
          f"load); release builds, loopback, S3 = s3s-fs on this machine. The ceiling, "
          f"`process_vm_readv` of 32 MiB from another process: {cap:.2f} GB/s.")
    print()
    print(f"| how | {one_size / 1e6:.0f} MB, 73 tensors | GB/s | {all_size / 1e9:.2f} GB, 8 shards | GB/s |")
    print("| --- | --- | --- | --- | --- |")
    for how, a, b in rows:
        print(f"| {how} | {a:.0f} ms | {one_size / a / 1e6:.2f} | {b:.0f} ms | {all_size / b / 1e6:.2f} |")
    print()
    size4 = os.path.getsize(one) // 73
    print(f"One tensor ({size4 / 1e6:.1f} MB) by `safe_open(...).get_tensor`: "
          + ", ".join(f"{n} {ms:.1f} ms" for n, ms in tensor_ms.items()) + ".")
    by = {how: (a, b) for how, a, b in rows}
    page = by["local disk, `safetensors.numpy.load_file`, page cache warm"]
    shm = by["Rasa warm, `safetensors.load` / `load_index`, shm"]
    cold = by["Rasa cold: read through from S3 (first load), shm"]
    plain = by["S3 (s3fs `cat_file`), the bytes alone"]
    print()
    print("Goals, in this run:")
    print()
    print(f"- warm over shm ÷ the local page cache: {shm[0] / page[0]:.2f} (218 MB), {shm[1] / page[1]:.2f} "
          f"(2 GB) — goal ≤ 0.5; GB/s ÷ the ceiling: {one_size / shm[0] / 1e6 / cap:.2f}, "
          f"{all_size / shm[1] / 1e6 / cap:.2f} — goal ≥ 0.7")
    print(f"- one tensor over shm ÷ the whole 218 MB file over shm: {tensor_ms['shm'] / shm[0]:.3f} "
          f"(its bytes are {size4 / one_size:.3f} of the file's)")
    print(f"- cold read-through ÷ a plain S3 GET of the bytes: {cold[0] / plain[0]:.2f} (218 MB), "
          f"{cold[1] / plain[1]:.2f} (2 GB) — goal ≤ 1.2")


if __name__ == "__main__":
    main()
