"""boto3 GETs of 1 KiB and 1 MiB objects through Rasa's S3 listener vs straight from
s3s-fs, same run (bench/s3-front.sh starts both).

    python bench/s3_front.py RASA_S3_URL RASA_KEY RASA_SECRET S3S_URL S3S_KEY S3S_SECRET
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import boto3
from botocore.config import Config


def client(url: str, key: str, secret: str):
    return boto3.client(
        "s3", endpoint_url=url, aws_access_key_id=key, aws_secret_access_key=secret,
        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}),
    )


def median_get(c, bucket: str, key: str, rounds: int) -> float:
    for _ in range(5):
        c.get_object(Bucket=bucket, Key=key)["Body"].read()
    lat = []
    for _ in range(rounds):
        t = time.perf_counter()
        c.get_object(Bucket=bucket, Key=key)["Body"].read()
        lat.append(time.perf_counter() - t)
    return statistics.median(lat) * 1e6


def main() -> None:
    rasa = client(*sys.argv[1:4])
    s3s = client(*sys.argv[4:7])
    print("| boto3 get_object | Rasa S3 listener | s3s-fs | Rasa / s3s-fs |")
    print("| --- | --- | --- | --- |")
    for size, name, rounds in ((1 << 10, "1 KiB", 300), (1 << 20, "1 MiB", 100)):
        data = os.urandom(size)
        rasa.put_object(Bucket="bench", Key=f"g/{size}", Body=data)
        s3s.put_object(Bucket="bench", Key=f"g/{size}", Body=data)
        r, s = median_get(rasa, "bench", f"g/{size}", rounds), median_get(s3s, "bench", f"g/{size}", rounds)
        print(f"| {name} (median of {rounds}) | {r:.0f} µs | {s:.0f} µs | {r / s:.2f}x |")


if __name__ == "__main__":
    main()
