"""The LightningStor S3 profile, driven by boto3 (embedded in `basalt bench storage`).

Usage: python3 s3_driver.py ENDPOINT ACCESS_KEY SECRET_KEY OUT.json [--quick]
Measures one 256 MiB object PUT and GET, then 32 objects of 4 MiB PUT and GET one after the
other and with 8 concurrent clients. Bodies are random bytes generated before the clock
starts; every GET is checked against what was PUT. Writes a JSON object of figures.
"""

import concurrent.futures
import hashlib
import json
import os
import sys
import time

import boto3
from botocore.config import Config

MiB = 1 << 20


def client(endpoint, access, secret):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=16,
                      retries={"max_attempts": 1}),
    )


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    endpoint, access, secret, out = sys.argv[1:5]
    quick = "--quick" in sys.argv[5:]
    big_mib = 64 if quick else 256
    small_count = 8 if quick else 32
    clients = 8
    s3 = client(endpoint, access, secret)
    bucket = f"bench-{os.getpid()}"
    s3.create_bucket(Bucket=bucket)
    figures = {}
    try:
        big = os.urandom(big_mib * MiB)
        t = timed(lambda: s3.put_object(Bucket=bucket, Key="big", Body=big))
        figures["put_big_mib_s"] = big_mib / t
        got = {}
        t = timed(lambda: got.setdefault("b", s3.get_object(Bucket=bucket, Key="big")["Body"].read()))
        if hashlib.md5(got["b"]).digest() != hashlib.md5(big).digest():
            raise SystemExit("GET of the big object returned different bytes")
        figures["get_big_mib_s"] = big_mib / t
        figures["big_mib"] = big_mib
        del big, got

        smalls = [os.urandom(4 * MiB) for _ in range(small_count)]
        t = timed(lambda: [s3.put_object(Bucket=bucket, Key=f"s{i}", Body=b) for i, b in enumerate(smalls)])
        figures["put_seq_mib_s"] = small_count * 4 / t
        figures["put_seq_obj_s"] = small_count / t

        def get_check(c, i):
            if c.get_object(Bucket=bucket, Key=f"s{i}")["Body"].read() != smalls[i]:
                raise SystemExit(f"GET s{i} returned different bytes")

        t = timed(lambda: [get_check(s3, i) for i in range(small_count)])
        figures["get_seq_mib_s"] = small_count * 4 / t
        figures["get_seq_obj_s"] = small_count / t

        pool_clients = [client(endpoint, access, secret) for _ in range(clients)]
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            def put_par():
                list(pool.map(lambda i: pool_clients[i % clients].put_object(
                    Bucket=bucket, Key=f"p{i}", Body=smalls[i]), range(small_count)))

            t = timed(put_par)
            figures["put_par_mib_s"] = small_count * 4 / t
            figures["put_par_obj_s"] = small_count / t

            def get_par():
                def one(i):
                    if pool_clients[i % clients].get_object(Bucket=bucket, Key=f"p{i}")["Body"].read() != smalls[i]:
                        raise SystemExit(f"GET p{i} returned different bytes")
                list(pool.map(one, range(small_count)))

            t = timed(get_par)
            figures["get_par_mib_s"] = small_count * 4 / t
            figures["get_par_obj_s"] = small_count / t
        figures["small_count"] = small_count
        figures["clients"] = clients
    finally:
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
        s3.delete_bucket(Bucket=bucket)
    with open(out, "w") as f:
        json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
