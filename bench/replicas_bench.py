"""A fleet loading one checkpoint from three members with replicas (bench/replicas.sh).

Runs in the root network namespace; the members are in namespaces of their own, each
link shaped to the same rate. Subcommands:

  keys SEED_URL N PREFIX         N keys under PREFIX the first member owns (one a line)
  load SEED_URL FABRIC_ADDR KEYS_FILE SIZE READERS
                                 READERS processes, each its own SDK client, read every
                                 key one-sided in one batch (get_many_into) into a
                                 registered buffer; prints the aggregate throughput (JSON)
  hot SEED_URL FABRIC_ADDR KEYS_FILE SIZE READERS PASSES
                                 READERS processes that keep their clients load the keys
                                 in rounds; after the first, rounds until the keys' owner
                                 lists every key as hot (`--cluster-hot-reads`), then
                                 PASSES - 1 more; the figures of each (JSON)
  probes SEED_URL FABRIC_ADDR KEYS_FILE SIZE READERS N MEMBER_URL...
                                 while READERS load, N read-after-write probes: a write of
                                 a replicated key through one member, then a read through
                                 every member, which must answer that write (JSON counts)
"""

import json
import multiprocessing as mp
import sys
import time
import urllib.error
import urllib.request

import rasa_client


def http(method, url, data=None):
    req = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def owned_keys(seed, n, prefix):
    """Keys the seed member owns: a read through it (of a key not written yet) that no
    other member answered."""
    out, i = [], 0
    while len(out) < n:
        key = f"{prefix}{i}"
        status, headers, _ = http("GET", f"{seed}/v1/objects/{key}")
        assert status == 404, (key, status)
        served = {k.lower(): v for k, v in headers.items()}.get("rasa-served-by")
        if served is None:
            out.append(key)
        i += 1
    return out


def reader(seed, fabric_addr, keys, size, ready, go, results):
    c = rasa_client.Client(seed, fast_path="required", fabric_addr=fabric_addr, timeout=300.0,
                           read_timeout=60.0)
    buf = c.register(size * len(keys))
    offsets = [i * size for i in range(len(keys))]
    c.exists("ckpt/none")  # the member list learnt before the clock starts
    ready.wait()
    go.wait()
    started = time.monotonic()
    # One batch, as a loader does: its keys spread over their holders, read concurrently.
    got = c.get_many_into(keys, buf, offsets)
    ended = time.monotonic()
    for key, n in zip(keys, got):
        assert n == size, (key, n)
    st = c.stats()
    results.put((started, ended, st["fabric_reads"], st["http_reads"]))


def load(seed, fabric_addr, keys, size, readers, during=None):
    ctx = mp.get_context("spawn")
    ready, go = ctx.Barrier(readers + 1, timeout=120), ctx.Barrier(readers + 1, timeout=120)
    results = ctx.Queue()
    procs = [ctx.Process(target=reader, args=(seed, fabric_addr, keys, size, ready, go, results))
             for _ in range(readers)]
    for p in procs:
        p.start()
    ready.wait()
    go.wait()
    extra = during() if during else None
    got = []
    while len(got) < readers:
        try:
            got.append(results.get(timeout=1))
        except Exception:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                sys.exit(f"a reader failed (exit {dead[0]})")
    for p in procs:
        p.join()
        assert p.exitcode == 0, p.exitcode
    start = min(g[0] for g in got)
    end = max(g[1] for g in got)
    total = readers * len(keys) * size
    return {
        "readers": readers,
        "bytes": total,
        "seconds": end - start,
        "gb_per_s": total / (end - start) / 1e9,
        "fabric_reads": sum(g[2] for g in got),
        "http_reads": sum(g[3] for g in got),
    }, extra


def hot_listed(seed, keys, within):
    """Whether the keys' owner lists every key in `keys` as hot in its record within
    `within` seconds."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        _, _, body = http("GET", f"{seed}/v1/cluster")
        listed = {h["key"] for m in json.loads(body)["members"] for h in m.get("hot", [])}
        if set(keys) <= listed:
            return True
        time.sleep(0.2)
    return False


def loop_reader(seed, fabric_addr, keys, size, barrier, more, results):
    """A reader that keeps its client: one load of `keys` each round, between two waits
    on `barrier`, while `more` is set."""
    c = rasa_client.Client(seed, fast_path="required", fabric_addr=fabric_addr, timeout=300.0,
                           read_timeout=60.0)
    buf = c.register(size * len(keys))
    offsets = [i * size for i in range(len(keys))]
    c.exists("ckpt/none")
    while True:
        barrier.wait()
        if not more.value:
            return
        started = time.monotonic()
        got = c.get_many_into(keys, buf, offsets)
        ended = time.monotonic()
        assert all(n == size for n in got), got
        st = c.stats()
        results.put((started, ended, st["fabric_reads"], st["http_reads"]))
        barrier.wait()


def passes(seed, fabric_addr, keys, size, readers, n):
    """Readers that keep their clients (as engines do) load the keys in rounds: the first
    (from the owner alone), then rounds until the owner lists the keys hot (at most five,
    each waited on for 7 s: a window and a record), then n - 1 rounds. The figures of
    the first and of the last n - 1, and how many rounds came between."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(readers + 1, timeout=120)
    more, results = ctx.Value("b", 1), ctx.Queue()
    procs = [ctx.Process(target=loop_reader,
                         args=(seed, fabric_addr, keys, size, barrier, more, results))
             for _ in range(readers)]
    for p in procs:
        p.start()
    seen = [(0, 0)] * readers

    def round_():
        barrier.wait()
        barrier.wait()
        got = sorted(results.get(timeout=60) for _ in range(readers))
        total = readers * len(keys) * size
        secs = max(g[1] for g in got) - min(g[0] for g in got)
        fabric, http_ = sum(g[2] for g in got), sum(g[3] for g in got)
        before = (sum(s[0] for s in seen), sum(s[1] for s in seen))
        seen[:] = [(g[2], g[3]) for g in got]
        return {"readers": readers, "bytes": total, "seconds": secs,
                "gb_per_s": total / secs / 1e9, "fabric_reads": fabric - before[0],
                "http_reads": http_ - before[1]}

    first, between = round_(), 0
    while not hot_listed(seed, keys, 7.0):
        between += 1
        if between > 5:
            sys.exit("the keys were not listed hot after six rounds")
        round_()
    first["loads_before_hot"] = between
    out = [first] + [round_() for _ in range(n - 1)]
    more.value = 0
    barrier.wait()
    for p in procs:
        p.join()
        assert p.exitcode == 0, p.exitcode
    return out


def probes(members, n, key):
    """N writes of `key`, each through the next member, each followed by a read through
    every member: how many reads answered an older value."""
    older = 0
    for i in range(n):
        body = f"probe {i}".encode()
        status, _, _ = http("PUT", f"{members[i % len(members)]}/v1/objects/{key}", body)
        assert status == 201, status
        for m in members:
            status, _, got = http("GET", f"{m}/v1/objects/{key}")
            if status != 200 or got != body:
                older += 1
    return {"probes": n, "reads": n * len(members), "older": older}


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "keys":
        seed, n, prefix = args[0], int(args[1]), args[2]
        print("\n".join(owned_keys(seed, n, prefix)))
    elif cmd == "load":
        seed, fabric_addr, keys_file, size, readers = args
        keys = open(keys_file).read().split()
        figures, _ = load(seed, fabric_addr, keys, int(size), int(readers))
        print(json.dumps(figures))
    elif cmd == "hot":
        seed, fabric_addr, keys_file, size, readers, n = args
        keys = open(keys_file).read().split()
        print(json.dumps(passes(seed, fabric_addr, keys, int(size), int(readers), int(n))))
    elif cmd == "hot-table":
        p = json.loads(args[0])
        for i, f in enumerate(p):
            ratio = f["gb_per_s"] / p[0]["gb_per_s"]
            print(f"| {i + 1} | {f['gb_per_s']:.3f} GB/s ({f['seconds']:.2f} s) | {ratio:.2f}x"
                  f" | {f['fabric_reads']} | {f['http_reads']} |")
    elif cmd == "probes":
        seed, fabric_addr, keys_file, size, readers, n = args[:6]
        members = args[6:]
        keys = open(keys_file).read().split()
        figures, counted = load(seed, fabric_addr, keys, int(size), int(readers),
                                during=lambda: probes(members, int(n), "ckpt-probe/k"))
        figures.update(counted)
        print(json.dumps(figures))
    else:
        sys.exit(f"unknown subcommand {cmd}")


if __name__ == "__main__":
    main()
