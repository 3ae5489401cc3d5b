"""The ceiling of a one-sided read on one host: GB/s of ``process_vm_readv`` (what
libfabric's shm reader does) from a child process reading its parent's buffer.

    python3 bench/ceiling.py SIZE ROUNDS     # prints GB/s
"""

from __future__ import annotations

import ctypes
import os
import sys
import time


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def ceiling(size: int, rounds: int) -> float:
    """GB/s of ``process_vm_readv`` of ``size`` bytes, ``rounds`` times, by one reader."""
    libc = ctypes.CDLL(None, use_errno=True)
    src = ctypes.create_string_buffer(os.urandom(1024) * (size // 1024))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        dst = ctypes.create_string_buffer(size)
        local, remote = _Iovec(ctypes.addressof(dst), size), _Iovec(ctypes.addressof(src), size)
        ppid = os.getppid()
        for _ in range(3):
            libc.process_vm_readv(ppid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        t = time.perf_counter()
        for _ in range(rounds):
            n = libc.process_vm_readv(ppid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            assert n == size, ctypes.get_errno()
        os.write(w, f"{size * rounds / (time.perf_counter() - t) / 1e9:.2f}".encode())
        os._exit(0)
    os.waitpid(pid, 0)
    return float(os.read(r, 64).decode())


if __name__ == "__main__":
    print(f"{ceiling(int(sys.argv[1]), int(sys.argv[2])):.1f}")
