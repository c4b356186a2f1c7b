"""A bucket that outgrows its index tables: keys are PUT by 16 concurrent clients while
others list, so shard tables split under load; then every listing (whole, by prefix and
delimiter, paged) must give exactly the keys that exist, in order, once each.

Run by crates/cli/tests/s3_clients.rs against `basalt up --object-size 8K` (tables of 8 KiB
split every few dozen entries); LARGE_BUCKET_KEYS sets the number of keys (1,000,000 for
the large-bucket run behind BASALT_LARGE_BUCKET=1).
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


def list_all(s3, **kw):
    keys, prefixes, token = [], [], None
    for _ in range(KEYS // kw.get("MaxKeys", 1000) + 100):
        args = dict(Bucket=BUCKET, **kw)
        if token:
            args["ContinuationToken"] = token
        page = s3.list_objects_v2(**args)
        keys += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            return keys, prefixes
        token = page["NextContinuationToken"]
    raise AssertionError("the listing never ended")


def main():
    started = time.time()
    s3 = client()
    s3.create_bucket(Bucket=BUCKET)
    clients = [client() for _ in range(CLIENTS)]
    stop = threading.Event()
    listings = []

    def lister():
        # Listings while tables split: sorted, no duplicates, every key a real one.
        c = client()
        while not stop.is_set():
            keys, _ = list_all(c)
            assert keys == sorted(set(keys)), "a listing under splits is out of order"
            listings.append(len(keys))

    def put(i):
        clients[i % CLIENTS].put_object(Bucket=BUCKET, Key=key(i), Body=body(i))

    with concurrent.futures.ThreadPoolExecutor(CLIENTS + 1) as pool:
        watcher = pool.submit(lister)
        try:
            list(pool.map(put, range(KEYS)))
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

    def delete(i):
        clients[i % CLIENTS].delete_object(Bucket=BUCKET, Key=key(i))

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(delete, sorted(gone)))
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
    for i in range(200):
        try:
            ids.append(s3.put_object(Bucket="versions", Key="k", Body=str(i).encode())["VersionId"])
        except ClientError as e:
            refused = e.response["Error"]
            break
    assert refused is not None, "200 versions of one key fit in 8 KiB tables?"
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
