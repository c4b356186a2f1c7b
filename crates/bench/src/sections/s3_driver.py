"""The LightningStor S3 profile and small-object rates, driven by boto3 (embedded in `basalt bench storage`).

Usage: python3 s3_driver.py ENDPOINT ACCESS_KEY SECRET_KEY OUT.json [--quick]
Measures one 256 MiB object PUT and GET, then 32 objects of 4 MiB PUT and GET one after the
other and with 8 concurrent clients, then 4 KiB objects PUT then GET for a fixed time by 1 and
by 16 client processes. Bodies are random bytes generated before the clock starts; every GET
is checked against what was PUT. Writes a JSON object of figures, with "error" set when a
step failed; every key and the bucket are deleted at the end, failed or not.
"""

import concurrent.futures
import hashlib
import json
import multiprocessing
import os
import sys
import threading
import time
import traceback

import boto3
from botocore.config import Config

MiB = 1 << 20
SMALL_BYTES = 4096
# Client processes of the concurrent small-object phase. Processes, not threads: 16 boto3
# clients in one interpreter are throttled by its GIL, and the figure would measure Python.
SMALL_CLIENTS = 16
# Most keys one small-object phase writes. Each index shard is one table object of at most the
# pool's object size (128 KiB with `basalt up`), rewritten whole on each update, so the bucket
# must stay far from full; a phase's keys are deleted before the next one.
SMALL_MAX_KEYS = 6000
# Longest wait for the clients to start (spawn, import boto3, connect) or to finish a phase.
SMALL_WAIT_S = 120
# Keys per DeleteObjects request (the S3 limit).
DELETE_BATCH = 1000


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


def small_worker(conn, bucket, prefix, max_keys, seconds, barrier, results):
    """One client process: PUT random 4 KiB objects under `prefix` for `seconds`, then GET
    them in turn for `seconds`, checking each body. Each phase starts when every process (and
    the parent, which keeps the clock) reaches the barrier."""
    put_ops = get_ops = 0
    try:
        s3 = client(*conn)
        bodies = [os.urandom(SMALL_BYTES) for _ in range(max_keys)]
        # Connect and sign one request before the clock starts.
        s3.head_bucket(Bucket=bucket)
        barrier.wait(SMALL_WAIT_S)
        deadline = time.monotonic() + seconds
        while put_ops < max_keys and time.monotonic() < deadline:
            s3.put_object(Bucket=bucket, Key=f"{prefix}{put_ops}", Body=bodies[put_ops])
            put_ops += 1
        barrier.wait(SMALL_WAIT_S)
        deadline = time.monotonic() + seconds
        while put_ops and time.monotonic() < deadline:
            i = get_ops % put_ops
            got = s3.get_object(Bucket=bucket, Key=f"{prefix}{i}")["Body"].read()
            if got != bodies[i]:
                raise RuntimeError(f"GET {prefix}{i} returned {len(got)} bytes that differ "
                                   f"from the {SMALL_BYTES} PUT")
            get_ops += 1
        barrier.wait(SMALL_WAIT_S)
        results.put({"put_ops": put_ops, "get_ops": get_ops})
    except BaseException as e:
        # Release the others (and the parent) from the barrier instead of leaving them to time out.
        barrier.abort()
        results.put({"error": f"client {prefix}: {type(e).__name__}: {e}"})


def small_phase(conn, bucket, clients, seconds):
    """PUT then GET 4 KiB objects with `clients` processes; returns (PUT ops/s, GET ops/s, keys)."""
    mp = multiprocessing.get_context("spawn")
    barrier = mp.Barrier(clients + 1)
    results = mp.Queue()
    per_client = SMALL_MAX_KEYS // clients
    procs = [mp.Process(target=small_worker, daemon=True,
                        args=(conn, bucket, f"small{clients}/{w}/", per_client, seconds,
                              barrier, results))
             for w in range(clients)]
    for p in procs:
        p.start()
    try:
        try:
            barrier.wait(SMALL_WAIT_S)
            t0 = time.perf_counter()
            barrier.wait(SMALL_WAIT_S)
            t1 = time.perf_counter()
            barrier.wait(SMALL_WAIT_S)
            t2 = time.perf_counter()
            broken = None
        except threading.BrokenBarrierError:
            broken = "a client failed or did not start in time"
        outcomes = []
        for _ in procs:
            try:
                outcomes.append(results.get(timeout=SMALL_WAIT_S if broken is None else 10))
            except Exception:
                outcomes.append({"error": "a client reported nothing"})
        errors = [o["error"] for o in outcomes if "error" in o]
        if broken or errors:
            reasons = ([broken] if broken else []) + list(dict.fromkeys(errors))
            raise RuntimeError(f"{clients}-client 4 KiB phase: " + "; ".join(reasons))
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
    put_ops = sum(o["put_ops"] for o in outcomes)
    get_ops = sum(o["get_ops"] for o in outcomes)
    return put_ops / (t1 - t0), get_ops / (t2 - t1), put_ops


def delete_all(s3, bucket, prefix=""):
    """Delete every key under `prefix`, at most DELETE_BATCH per request; raise on any failure."""
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(o["Key"] for o in page.get("Contents", []))
    for start in range(0, len(keys), DELETE_BATCH):
        batch = keys[start:start + DELETE_BATCH]
        reply = s3.delete_objects(Bucket=bucket,
                                  Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
        if reply.get("Errors"):
            e = reply["Errors"][0]
            raise RuntimeError(f"DeleteObjects failed for {len(reply['Errors'])} keys, first "
                               f"{e.get('Key')}: {e.get('Code')} {e.get('Message')}")


def lightningstor(s3, bucket, quick, conn, figures):
    """One large object, then 4 MiB objects one after the other and with 8 threads."""
    big_mib = 64 if quick else 256
    small_count = 8 if quick else 32
    clients = 8
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

    pool_clients = [client(*conn) for _ in range(clients)]
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


def small_objects(s3, bucket, quick, conn, figures):
    """4 KiB PUT then GET rates with 1 and with SMALL_CLIENTS client processes."""
    seconds = 2.0 if quick else 5.0
    figures["small_seconds"] = seconds
    for clients in (1, SMALL_CLIENTS):
        put, get, keys = small_phase(conn, bucket, clients, seconds)
        figures[f"put_4k_{clients}c_ops_s"] = put
        figures[f"get_4k_{clients}c_ops_s"] = get
        figures[f"keys_4k_{clients}c"] = keys
        # Untimed: the next phase starts with the same small index.
        delete_all(s3, bucket, f"small{clients}/")


def main():
    endpoint, access, secret, out = sys.argv[1:5]
    quick = "--quick" in sys.argv[5:]
    conn = (endpoint, access, secret)
    s3 = client(*conn)
    bucket = f"bench-{os.getpid()}"
    figures = {}
    try:
        s3.create_bucket(Bucket=bucket)
        try:
            lightningstor(s3, bucket, quick, conn, figures)
            small_objects(s3, bucket, quick, conn, figures)
        finally:
            delete_all(s3, bucket)
            s3.delete_bucket(Bucket=bucket)
    except BaseException as e:
        # A failed cleanup is chained to the failure it followed, if any: report both.
        cause = e.__context__
        figures["error"] = f"{type(e).__name__}: {e}" + (
            f" (after {type(cause).__name__}: {cause})" if cause else "")
        traceback.print_exc()
        raise
    finally:
        with open(out, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
