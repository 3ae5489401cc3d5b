"""Dynamo block manager's object tier (G4) on Rasa's S3 listener: the requests its S3 client and
lock manager make (Dynamo 1.6.1, its ``object/s3`` store: aws-sdk-s3), replayed with
boto3 — the block manager itself needs Dynamo's runtime and a GPU to drive them.

Blocks are objects ``{rank}/{sequence hash}`` (``put_blocks``/``get_blocks``, ``has_blocks``
by HEAD for the size); an offload is coordinated by a lock object ``{hash}.lock`` created
with ``If-None-Match: *``, taken over when expired with ``If-Match`` on the ETag read with
it (of leaders that race for an expired lock exactly one wins), released by
DELETE, and a ``{hash}.meta`` empty object marking the block offloaded."""

from __future__ import annotations

import datetime
import json
import os
import threading

import pytest
from botocore.exceptions import ClientError


def lock_body(instance: str, seconds: float) -> bytes:
    now = datetime.datetime.now(datetime.timezone.utc)
    deadline = now + datetime.timedelta(seconds=seconds)
    return json.dumps({"instance_id": instance, "acquired_at": now.isoformat(),
                       "deadline": deadline.isoformat()}).encode()


def try_acquire(c, key: str, instance: str, seconds: float) -> bool:
    """KVBM's ``S3LockManager::try_acquire_lock``, request for request."""
    body = lock_body(instance, seconds)
    try:
        c.put_object(Bucket="data", Key=key, Body=body, IfNoneMatch="*")
        return True
    except ClientError as e:
        if e.response["Error"]["Code"] != "PreconditionFailed":
            raise
    got = c.get_object(Bucket="data", Key=key)
    held, etag = json.loads(got["Body"].read()), got["ETag"]
    if held["instance_id"] == instance:
        return True
    if datetime.datetime.fromisoformat(held["deadline"]) > datetime.datetime.now(datetime.timezone.utc):
        return False
    try:  # expired: an atomic takeover
        c.put_object(Bucket="data", Key=key, Body=body, IfMatch=etag)
        return True
    except ClientError as e:
        if e.response["Error"]["Code"] != "PreconditionFailed":
            raise
        return False


def test_blocks_put_get_and_has_by_head(s3, prefix):
    c = s3.boto3()
    blocks = {f"{prefix}0/{h:016x}": os.urandom(64 << 10) for h in range(8)}
    for k, v in blocks.items():
        c.put_object(Bucket="data", Key=k, Body=v)
    for k, v in blocks.items():
        assert c.head_object(Bucket="data", Key=k)["ContentLength"] == len(v)
        assert c.get_object(Bucket="data", Key=k)["Body"].read() == v
    with pytest.raises(ClientError) as e:
        c.head_object(Bucket="data", Key=f"{prefix}0/{'f' * 16}")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_offload_locks_are_atomic(s3, prefix):
    c = s3.boto3()
    lock, meta = f"{prefix}beef.lock", f"{prefix}beef.meta"
    assert try_acquire(c, lock, "a", 300)
    assert try_acquire(c, lock, "a", 300), "the owner holds it"
    assert not try_acquire(c, lock, "b", 300), "held by a, not expired"
    c.put_object(Bucket="data", Key=meta, Body=b"")
    assert c.head_object(Bucket="data", Key=meta)["ContentLength"] == 0
    c.delete_object(Bucket="data", Key=lock)
    assert try_acquire(c, lock, "b", 300), "released"
    c.delete_object(Bucket="data", Key=lock)

    # An expired lock, and eight leaders racing to take it over: at most one wins.
    for round_ in range(5):
        key = f"{prefix}race{round_}.lock"
        assert try_acquire(c, key, "old", -1)
        start = threading.Barrier(8)
        won: list[str] = []
        failed: list[Exception] = []

        def leader(name: str) -> None:
            client = s3.boto3()
            start.wait()
            try:
                if try_acquire(client, key, name, 300):
                    won.append(name)
            except Exception as e:  # noqa: BLE001 - every leader must get an answer
                failed.append(e)

        threads = [threading.Thread(target=leader, args=(f"l{i}",)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not failed, f"round {round_}: a refused lock PUT must be a 412: {failed}"
        assert len(won) == 1, f"round {round_}: {won} took the lock"
        holder = json.loads(c.get_object(Bucket="data", Key=key)["Body"].read())["instance_id"]
        assert won == [holder]
