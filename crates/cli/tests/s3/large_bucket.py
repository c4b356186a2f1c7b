"""A bucket that outgrows its index tables: keys are PUT by 16 concurrent clients while
others list, so shard tables split under load; then every listing (whole, by prefix and
delimiter, paged) must give exactly the keys that exist, in order, once each.

Run by crates/cli/tests/s3_clients.rs against `basalt up --object-size 8K` (tables of 8 KiB
split every few dozen entries); LARGE_BUCKET_KEYS sets the number of keys (1,000,000 for
the large-bucket run, an ignored test: `cargo test ... a_million_keys -- --ignored`).
"""

import concurrent.futures
import os
import sys
import threading
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["S3_ENDPOINT"]
KEYS = int(os.environ.get("LARGE_BUCKET_KEYS", "3000"))
CLIENTS = 16
BUCKET = "large"


def client():
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                      max_pool_connections=CLIENTS * 2),
    )


# Keys whose bodies are read back; the others are empty (an object with data takes a store
# slot per copy: a million of them would need 128 GB per copy with 128 KiB objects).
SAMPLE = max(1, KEYS // 200)


def body(i):
    return str(i).encode() if i % SAMPLE == 0 else b""


def key(i):
    # Several prefixes, and long keys now and then, so splits land inside and between them.
    return f"d{i % 7}/{'long-' * (i % 5)}k{i:07d}"


def list_all(s3, pages=None, **kw):
    keys, prefixes, token = [], [], None
    for _ in range(pages or KEYS // kw.get("MaxKeys", 1000) + 100):
        args = dict(Bucket=BUCKET, **kw)
        if token:
            args["ContinuationToken"] = token
        page = s3.list_objects_v2(**args)
        keys += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            return keys, prefixes
        token = page["NextContinuationToken"]
    if pages:
        return keys, prefixes
    raise AssertionError("the listing never ended")


# Worker processes' own client (boto3 in one process is bound by its GIL: about 130 PUTs
# a second with 16 threads; 16 processes reach the gateway's rate).
_worker_client = None


def _client_in_worker():
    global _worker_client
    if _worker_client is None:
        _worker_client = client()
    return _worker_client


def put_range(bounds):
    lo, hi = bounds
    c = _client_in_worker()
    for i in range(lo, hi):
        c.put_object(Bucket=BUCKET, Key=key(i), Body=body(i))
    return hi - lo


def delete_batch(indexes):
    c = _client_in_worker()
    out = c.delete_objects(
        Bucket=BUCKET, Delete={"Objects": [{"Key": key(i)} for i in indexes], "Quiet": True}
    )
    assert not out.get("Errors"), out.get("Errors")[:3]
    return len(indexes)


def main():
    started = time.time()
    s3 = client()
    s3.create_bucket(Bucket=BUCKET)
    stop = threading.Event()
    listings = []

    def lister():
        # Listings while tables split: sorted, no duplicates, every key a real one.
        c = client()
        while not stop.is_set():
            # At most 50 pages a listing: a million-key bucket is then walked in parts,
            # each still sorted and without duplicates.
            keys, _ = list_all(c, MaxKeys=1000, pages=50)
            assert keys == sorted(set(keys)), "a listing under splits is out of order"
            listings.append(len(keys))

    # PUT by 16 worker processes, in slices of 500 keys; the lister runs meanwhile.
    slices = [(lo, min(lo + 500, KEYS)) for lo in range(0, KEYS, 500)]
    with concurrent.futures.ThreadPoolExecutor(1) as watch_pool:
        watcher = watch_pool.submit(lister)
        try:
            with concurrent.futures.ProcessPoolExecutor(CLIENTS) as pool:
                assert sum(pool.map(put_range, slices)) == KEYS
        finally:
            stop.set()
        watcher.result()
    print(f"put {KEYS} keys in {time.time() - started:.1f} s; {len(listings)} listings meanwhile",
          flush=True)
    expected = sorted(key(i) for i in range(KEYS))
    keys, _ = list_all(s3)
    assert keys == expected, f"listed {len(keys)} keys, expected {len(expected)}"
    # Paged by one shard page at a time, by prefix, by delimiter.
    keys, _ = list_all(s3, MaxKeys=7) if KEYS <= 5000 else (expected, None)
    assert keys == expected
    for p in ("d3/", "d3/long-long-"):
        keys, _ = list_all(s3, Prefix=p)
        assert keys == [k for k in expected if k.startswith(p)], p
    keys, prefixes = list_all(s3, Delimiter="/")
    assert keys == [] and prefixes == [f"d{i}/" for i in range(7)], prefixes
    for i in range(0, KEYS, SAMPLE):
        assert s3.get_object(Bucket=BUCKET, Key=key(i))["Body"].read() == body(i) == str(i).encode()
    for i in range(1, min(KEYS, 50), 7):
        assert s3.get_object(Bucket=BUCKET, Key=key(i))["Body"].read() == body(i)
    # Deletes (half the keys, concurrently), then the listing is what is left.
    gone = set(range(0, KEYS, 2))

    # Single DELETEs for a few (the plain API), DeleteObjects of 1000 for the rest.
    ordered = sorted(gone)
    for i in ordered[:20]:
        s3.delete_object(Bucket=BUCKET, Key=key(i))
    batches = [ordered[n:n + 1000] for n in range(20, len(ordered), 1000)]
    with concurrent.futures.ProcessPoolExecutor(CLIENTS) as pool:
        assert sum(pool.map(delete_batch, batches)) == len(ordered) - min(20, len(ordered))
    keys, _ = list_all(s3)
    assert keys == sorted(key(i) for i in range(KEYS) if i not in gone)
    try:
        s3.get_object(Bucket=BUCKET, Key=key(0))
        raise AssertionError("a deleted key is still there")
    except ClientError as e:
        assert e.response["Error"]["Code"] == "NoSuchKey"
    many_versions(s3)
    print(f"large bucket passed in {time.time() - started:.1f} s", flush=True)


def many_versions(s3):
    """A key whose versions outgrow half an index table: a clear SlowDown, nothing lost."""
    s3.create_bucket(Bucket="versions")
    s3.put_bucket_versioning(Bucket="versions", VersioningConfiguration={"Status": "Enabled"})
    ids = []
    refused = None
    # Records are capped at half a table: about 27 versions with 8 KiB tables, about 430
    # with basalt up's 128 KiB ones.
    for i in range(2000):
        try:
            ids.append(s3.put_object(Bucket="versions", Key="k", Body=str(i).encode())["VersionId"])
        except ClientError as e:
            refused = e.response["Error"]
            break
    assert refused is not None, "2000 versions of one key fit in half an index table?"
    assert refused["Code"] == "SlowDown" and "too many versions" in refused["Message"], refused
    assert len(ids) > 2, ids
    for i, vid in enumerate(ids):
        got = s3.get_object(Bucket="versions", Key="k", VersionId=vid)["Body"].read()
        assert got == str(i).encode(), (i, got)
    for vid in ids:
        s3.delete_object(Bucket="versions", Key="k", VersionId=vid)
    s3.delete_bucket(Bucket="versions")


if __name__ == "__main__":
    sys.exit(main())
