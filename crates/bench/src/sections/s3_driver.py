"""The LightningStor S3 profile and small-object rates, driven by boto3 (embedded in `basalt bench storage`).

Usage: python3 s3_driver.py ENDPOINT ACCESS_KEY SECRET_KEY OUT.json [--quick | --smoke]
Measures one 256 MiB object PUT and GET, then 32 objects of 4 MiB PUT and GET one after the
other and with 8 concurrent clients, then 4 KiB objects PUT then GET for a fixed time by 1 and
by 16 client processes; then 4 KiB PUT by 16 processes into a versioned and an unversioned
bucket in alternating rounds; then a ListObjectsV2 walk of a bucket of 100,000 keys. --quick
and --smoke (the smoke test's: the figures mean little) shrink every size and duration: see
SIZES. Bodies are random bytes generated before the clock starts; every GET and the listing
are checked against what was PUT. Writes a JSON object of figures, with "error" set
when a step failed; every key, version and bucket is deleted at the end, failed or not.
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
# Longest wait for the clients to start (fork, make a boto3 client, connect) or to finish a phase.
SMALL_WAIT_S = 120
# Keys per DeleteObjects request (the S3 limit).
DELETE_BATCH = 1000
# Keys one set-up task PUTs: small enough that the 16 processes stay busy to the end.
FILL_CHUNK = 500
# Longest wait for an untimed bulk step (filling the LIST bucket, deleting a bucket's keys).
BULK_WAIT_S = 900
# Sizes and durations by mode: the large object (MiB), the count of 4 MiB objects, seconds
# of each 4 KiB phase, rounds per bucket of the versioning comparison and their seconds, keys
# of the LIST bucket (empty objects: the walk measures the index, not the data) and keys per
# ListObjectsV2 page (the S3 maximum; smoke: smaller, so its 500 keys still take five pages,
# every filled key costing an index update). The versioning buckets alternate U V V U U V V U:
# both indexes grow through the run, and this order gives each bucket the same mean position.
SIZES = {
    "full": {"big_mib": 256, "small_count": 32, "small_s": 5.0,
             "versioning_rounds": 4, "versioning_round_s": 3.0, "list_keys": 100000,
             "list_page": 1000},
    "quick": {"big_mib": 64, "small_count": 8, "small_s": 2.0,
              "versioning_rounds": 2, "versioning_round_s": 1.5, "list_keys": 10000,
              "list_page": 1000},
    "smoke": {"big_mib": 16, "small_count": 8, "small_s": 0.5,
              "versioning_rounds": 2, "versioning_round_s": 0.5, "list_keys": 500,
              "list_page": 100},
}
# Distinct random bodies each versioning client cycles through (4 KiB each).
VERSIONING_BODIES = 256


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


def mp_context():
    """Client processes are forked from a fork server that has imported this driver and boto3
    once (about 0.4 s of CPU an import; a run starts some 50 processes), not spawned afresh;
    none inherits the parent's threads or connections."""
    mp = multiprocessing.get_context("forkserver")
    mp.set_forkserver_preload(["__main__", "boto3"])
    return mp


def unix_time(perf):
    """A time.perf_counter() reading as Unix time, for lining the phases up with CPU samples
    taken outside the driver."""
    return round(perf + time.time() - time.perf_counter(), 3)


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


def versioning_worker(conn, buckets, versioned, order, prefix, seconds, barrier, results):
    """One client process: in round r, PUT fresh random 4 KiB objects into buckets[order[r]]
    for `seconds`, checking that each reply carries a version id exactly when that bucket is
    versioned. Each round starts when every process (and the parent) reaches the barrier."""
    ops = [0] * len(order)
    try:
        s3 = client(*conn)
        bodies = [os.urandom(SMALL_BYTES) for _ in range(VERSIONING_BODIES)]
        for bucket in buckets:
            s3.head_bucket(Bucket=bucket)
        for r, which in enumerate(order):
            barrier.wait(SMALL_WAIT_S)
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                n = ops[r]
                key = f"{prefix}{r}/{n}"
                reply = s3.put_object(Bucket=buckets[which], Key=key,
                                      Body=bodies[n % VERSIONING_BODIES])
                got = reply.get("VersionId", "null") != "null"
                if got != versioned[which]:
                    raise RuntimeError(f"PUT {buckets[which]}/{key} answered version id "
                                       f"{reply.get('VersionId')!r}")
                ops[r] += 1
        barrier.wait(SMALL_WAIT_S)
        results.put({"ops": ops})
    except BaseException as e:
        barrier.abort()
        results.put({"error": f"client {prefix}: {type(e).__name__}: {e}"})


def run_clients(what, clients, target, args_of, phases):
    """Run `target(*args_of(w), barrier, results)` in `clients` processes that meet the parent
    at a barrier before each of `phases` timed phases and after the last; returns the phases'
    (start, end) times and each client's report. Raises if a client failed or hung."""
    mp = mp_context()
    barrier = mp.Barrier(clients + 1)
    results = mp.Queue()
    procs = [mp.Process(target=target, daemon=True, args=(*args_of(w), barrier, results))
             for w in range(clients)]
    for p in procs:
        p.start()
    try:
        try:
            marks = []
            for _ in range(phases + 1):
                barrier.wait(SMALL_WAIT_S)
                marks.append(time.perf_counter())
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
            raise RuntimeError(f"{what}: " + "; ".join(reasons))
    finally:
        # Release clients still waiting (the parent was interrupted) rather than wait them out.
        barrier.abort()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
    return list(zip(marks, marks[1:])), outcomes


def small_phase(conn, bucket, clients, seconds):
    """PUT then GET 4 KiB objects with `clients` processes; returns (PUT ops/s, GET ops/s, keys)."""
    per_client = SMALL_MAX_KEYS // clients
    (put, get), outcomes = run_clients(
        f"{clients}-client 4 KiB phase", clients, small_worker,
        lambda w: (conn, bucket, f"small{clients}/{w}/", per_client, seconds), phases=2)
    put_ops = sum(o["put_ops"] for o in outcomes)
    get_ops = sum(o["get_ops"] for o in outcomes)
    return put_ops / (put[1] - put[0]), get_ops / (get[1] - get[0]), put_ops


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


# The boto3 client of a Bulk pool process.
_bulk_s3 = None


def _bulk_init(conn, ready):
    global _bulk_s3
    _bulk_s3 = client(*conn)
    ready.put(os.getpid())


def _bulk_fill(task):
    bucket, keys = task
    try:
        for key in keys:
            _bulk_s3.put_object(Bucket=bucket, Key=key, Body=b"")
    except Exception as e:
        # botocore's errors do not survive the trip back to the parent: send their text.
        raise RuntimeError(f"PUT {bucket}/{key}: {type(e).__name__}: {e}") from None
    return len(keys)


def _bulk_delete(task):
    bucket, objects = task
    try:
        reply = _bulk_s3.delete_objects(Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
    except Exception as e:
        raise RuntimeError(f"DeleteObjects on {bucket}: {type(e).__name__}: {e}") from None
    if reply.get("Errors"):
        e = reply["Errors"][0]
        raise RuntimeError(f"DeleteObjects failed for {len(reply['Errors'])} keys, first "
                           f"{e.get('Key')} {e.get('VersionId', '')}: {e.get('Code')} "
                           f"{e.get('Message')}")
    return len(objects)


class Bulk:
    """SMALL_CLIENTS client processes for untimed set-up and clean-up: PUT many empty keys,
    delete many keys or versions."""

    def __init__(self, conn):
        mp = mp_context()
        ready = mp.Queue()
        self.pool = mp.Pool(SMALL_CLIENTS, _bulk_init, (conn, ready))
        # Each process makes its boto3 client (CPU, loading the service model): done before
        # any phase is timed, not during one.
        try:
            for _ in range(SMALL_CLIENTS):
                ready.get(timeout=SMALL_WAIT_S)
        except BaseException:
            self.pool.terminate()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.pool.terminate()
        self.pool.join()

    def _run(self, fn, tasks):
        return sum(self.pool.map_async(fn, tasks, chunksize=1).get(BULK_WAIT_S))

    def fill(self, bucket, keys):
        """PUT an empty object under each of `keys`."""
        tasks = [(bucket, keys[i:i + FILL_CHUNK]) for i in range(0, len(keys), FILL_CHUNK)]
        if self._run(_bulk_fill, tasks) != len(keys):
            raise RuntimeError(f"set-up of {bucket} PUT fewer than {len(keys)} keys")

    def delete(self, bucket, objects):
        """Delete `objects` ({"Key": ..., optionally "VersionId": ...}), DELETE_BATCH a request."""
        tasks = [(bucket, objects[i:i + DELETE_BATCH])
                 for i in range(0, len(objects), DELETE_BATCH)]
        self._run(_bulk_delete, tasks)

    def empty(self, s3, bucket):
        """Delete every key of an unversioned bucket, then the bucket."""
        keys = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            keys.extend({"Key": o["Key"]} for o in page.get("Contents", []))
        self.delete(bucket, keys)
        s3.delete_bucket(Bucket=bucket)

    def empty_versioned(self, s3, bucket):
        """Delete every version and delete marker of a bucket (deleting a key there would only
        add a marker), then the bucket."""
        versions = []
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            for v in page.get("Versions", []) + page.get("DeleteMarkers", []):
                versions.append({"Key": v["Key"], "VersionId": v["VersionId"]})
        self.delete(bucket, versions)
        s3.delete_bucket(Bucket=bucket)


def lightningstor(s3, bucket, size, conn, figures):
    """One large object, then 4 MiB objects one after the other and with 8 threads."""
    big_mib = size["big_mib"]
    small_count = size["small_count"]
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


def small_objects(s3, bucket, size, conn, figures):
    """4 KiB PUT then GET rates with 1 and with SMALL_CLIENTS client processes."""
    seconds = size["small_s"]
    figures["small_seconds"] = seconds
    for clients in (1, SMALL_CLIENTS):
        put, get, keys = small_phase(conn, bucket, clients, seconds)
        figures[f"put_4k_{clients}c_ops_s"] = put
        figures[f"get_4k_{clients}c_ops_s"] = get
        figures[f"keys_4k_{clients}c"] = keys
        # Untimed: the next phase starts with the same small index.
        delete_all(s3, bucket, f"small{clients}/")


def versioning_cost(s3, size, conn, bulk, figures):
    """4 KiB PUT ops/s by SMALL_CLIENTS processes into a bucket with versioning Enabled and
    into an unversioned one, in alternating rounds of the same run."""
    rounds = size["versioning_rounds"]
    seconds = size["versioning_round_s"]
    plain, versioned = f"bench-plain-{os.getpid()}", f"bench-versioned-{os.getpid()}"
    order = [0, 1, 1, 0] * (rounds // 2)
    made = []
    try:
        for bucket in (plain, versioned):
            s3.create_bucket(Bucket=bucket)
            made.append(bucket)
        s3.put_bucket_versioning(Bucket=versioned,
                                 VersioningConfiguration={"Status": "Enabled"})
        status = s3.get_bucket_versioning(Bucket=versioned).get("Status")
        if status != "Enabled":
            raise RuntimeError(f"versioning of {versioned} reads back as {status!r}")
        spans, outcomes = run_clients(
            "versioning comparison", SMALL_CLIENTS, versioning_worker,
            lambda w: (conn, (plain, versioned), (False, True), order, f"w{w}/", seconds),
            phases=len(order))
        ops = [sum(o["ops"][r] for o in outcomes) for r in range(len(order))]
        rates = [n / (end - start) for n, (start, end) in zip(ops, spans)]
        for which, name in ((0, "unversioned"), (1, "versioned")):
            rs = [r for r, w in enumerate(order) if w == which]
            figures[f"put_4k_{name}_ops_s"] = (sum(ops[r] for r in rs)
                                               / sum(spans[r][1] - spans[r][0] for r in rs))
            figures[f"put_4k_{name}_rounds_ops_s"] = [round(rates[r], 1) for r in rs]
            figures[f"keys_4k_{name}"] = sum(ops[r] for r in rs)
        figures["put_4k_versioned_pct"] = (100 * figures["put_4k_versioned_ops_s"]
                                           / figures["put_4k_unversioned_ops_s"])
        figures["versioning_round_s"] = seconds
        figures["versioning_rounds_unix_s"] = [
            ["unversioned" if w == 0 else "versioned", unix_time(a), unix_time(b)]
            for w, (a, b) in zip(order, spans)]
    finally:
        try:
            if plain in made:
                bulk.empty(s3, plain)
        finally:
            if versioned in made:
                bulk.empty_versioned(s3, versioned)


def check_listing(listed, expected):
    """Raise, naming what differs, unless `listed` is `expected` (sorted, distinct)."""
    if listed == expected:
        return
    seen, duplicates = set(), []
    for k in listed:
        if k in seen:
            duplicates.append(k)
        seen.add(k)
    missing = sorted(set(expected) - seen)
    extra = sorted(seen - set(expected))
    disorder = next(((a, b) for a, b in zip(listed, listed[1:]) if a >= b), None)
    raise RuntimeError(
        f"the listing returned {len(listed)} keys for {len(expected)} PUT: "
        f"{len(missing)} missing (first {missing[:1]}), {len(extra)} not PUT (first "
        f"{extra[:1]}), {len(duplicates)} repeated (first {duplicates[:1]}), first pair out "
        f"of order {disorder}")


def list_walk(s3, size, bulk, figures):
    """Time one client's ListObjectsV2 walk, size["list_page"] keys a page, over a bucket filled
    (untimed) with empty keys by SMALL_CLIENTS processes; the walk must return exactly them."""
    count, page_keys = size["list_keys"], size["list_page"]
    # Zero-padded, so the byte order S3 lists in is the numeric order.
    keys = [f"k{i:07d}" for i in range(count)]
    bucket = f"bench-list-{os.getpid()}"
    s3.create_bucket(Bucket=bucket)
    try:
        start = time.perf_counter()
        bulk.fill(bucket, keys)
        figures["list_fill_s"] = time.perf_counter() - start
        figures["list_fill_unix_s"] = [unix_time(start), unix_time(time.perf_counter())]
        listed, pages, token = [], 0, None
        cpu = time.process_time()
        start = time.perf_counter()
        while True:
            args = {"Bucket": bucket, "MaxKeys": page_keys}
            if token:
                args["ContinuationToken"] = token
            page = s3.list_objects_v2(**args)
            pages += 1
            listed.extend(o["Key"] for o in page.get("Contents", []))
            if not page["IsTruncated"]:
                break
            if pages > count // page_keys + 100:
                raise RuntimeError(f"the listing of {count} keys did not end after {pages} pages")
            token = page["NextContinuationToken"]
        seconds = time.perf_counter() - start
        figures["list_client_cpu_s"] = time.process_time() - cpu
        figures["list_walk_unix_s"] = [unix_time(start), unix_time(start + seconds)]
        check_listing(listed, keys)
        figures["list_keys_s"] = count / seconds
        figures["list_keys"] = count
        figures["list_pages"] = pages
        figures["list_page_keys"] = page_keys
        figures["list_s"] = seconds
    finally:
        # The keys PUT, whatever the listing said, then anything it still shows.
        bulk.delete(bucket, [{"Key": k} for k in keys])
        bulk.empty(s3, bucket)


def main():
    endpoint, access, secret, out = sys.argv[1:5]
    mode = next((m for m in ("smoke", "quick") if f"--{m}" in sys.argv[5:]), "full")
    size = SIZES[mode]
    conn = (endpoint, access, secret)
    s3 = client(*conn)
    bucket = f"bench-{os.getpid()}"
    figures = {}
    try:
        s3.create_bucket(Bucket=bucket)
        try:
            lightningstor(s3, bucket, size, conn, figures)
            small_objects(s3, bucket, size, conn, figures)
            with Bulk(conn) as bulk:
                versioning_cost(s3, size, conn, bulk, figures)
                list_walk(s3, size, bulk, figures)
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
