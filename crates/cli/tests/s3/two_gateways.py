"""Two S3 gateways of one multi-host cluster serve the same buckets.

Usage: two_gateways.py write|verify|versions ENDPOINT_A ENDPOINT_B
  write:    bucket "shared"; 40 objects of assorted sizes PUT through A; a multipart upload
            whose parts go through A and B and which B completes.
  verify:   every object reads back byte for byte through both gateways, listings agree,
            and new writes through B succeed (run after an OSD was killed).
  versions: bucket "history" with versioning; 8 writers PUT new versions of 4 keys through
            both gateways (and remove some versions) while gateway A is killed (-9) and
            restarted (the test does that after "WRITING"); then every acknowledged version
            reads back with its bytes through B, no removed one does, and each key's
            version list holds every acknowledged version once.
"""

import hashlib
import os
import sys

import boto3
from botocore.config import Config

MiB = 1 << 20
mode, a_url, b_url = sys.argv[1:4]


def client(url):
    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def body(i):
    size = [0, 1, 4096, 131072, 131073, 3 * MiB + 17][i % 6] + i
    seed = hashlib.sha256(f"obj{i}".encode()).digest()
    return (seed * (size // 32 + 1))[:size]


a, b = client(a_url), client(b_url)
parts = [hashlib.sha256(f"part{n}".encode()).digest() * (5 * MiB // 32) for n in range(2)]
parts.append(b"tail" * 1000)

if mode == "write":
    a.create_bucket(Bucket="shared")
    for i in range(40):
        a.put_object(Bucket="shared", Key=f"obj/{i:03d}", Body=body(i))
    up = a.create_multipart_upload(Bucket="shared", Key="mp")
    uid = up["UploadId"]
    e1 = a.upload_part(Bucket="shared", Key="mp", UploadId=uid, PartNumber=1, Body=parts[0])["ETag"]
    e2 = b.upload_part(Bucket="shared", Key="mp", UploadId=uid, PartNumber=2, Body=parts[1])["ETag"]
    e3 = a.upload_part(Bucket="shared", Key="mp", UploadId=uid, PartNumber=3, Body=parts[2])["ETag"]
    b.complete_multipart_upload(
        Bucket="shared", Key="mp", UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate([e1, e2, e3])]},
    )
    print("WRITTEN", flush=True)
elif mode == "versions":
    import concurrent.futures
    import threading
    import time

    from botocore.exceptions import ClientError

    a.create_bucket(Bucket="history")
    a.put_bucket_versioning(Bucket="history", VersioningConfiguration={"Status": "Enabled"})
    acked, removed, lock = {}, set(), threading.Lock()
    deadline = time.time() + 12

    def writer(w):
        n = 0
        # Bounded by time; a gateway that is down makes a request fail fast.
        while time.time() < deadline:
            n += 1
            key, data = f"k{(w + n) % 4}", f"w{w} n{n}".encode()
            c = a if (w + n) % 2 else b
            try:
                vid = c.put_object(Bucket="history", Key=key, Body=data)["VersionId"]
            except Exception:
                time.sleep(0.05)
                continue
            with lock:
                acked[(key, vid)] = data
            if n % 5 == 0:
                try:
                    b.delete_object(Bucket="history", Key=key, VersionId=vid)
                    with lock:
                        removed.add((key, vid))
                except Exception:
                    pass

    print("WRITING", flush=True)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(writer, range(8)))
    assert len(acked) > 50, f"only {len(acked)} writes were acknowledged"
    listed = {}
    page = {"IsTruncated": True}
    args = {}
    while page["IsTruncated"]:
        page = b.list_object_versions(Bucket="history", **args)
        for v in page.get("Versions", []):
            assert (v["Key"], v["VersionId"]) not in listed, f"{v} listed twice"
            listed[(v["Key"], v["VersionId"])] = v
        args = {"KeyMarker": page.get("NextKeyMarker", ""),
                "VersionIdMarker": page.get("NextVersionIdMarker", "")}
    for kv, data in acked.items():
        if kv in removed:
            assert kv not in listed, f"removed version {kv} is listed"
            continue
        assert kv in listed, f"acknowledged version {kv} is not listed"
        got = b.get_object(Bucket="history", Key=kv[0], VersionId=kv[1])["Body"].read()
        assert got == data, f"version {kv} reads {got!r}, not {data!r}"
    for key in (f"k{i}" for i in range(4)):
        latest = [kv for kv, v in listed.items() if kv[0] == key and v["IsLatest"]]
        assert len(latest) <= 1, (key, latest)
    print(f"VERSIONS {len(acked)} acknowledged, {len(removed)} removed", flush=True)
else:
    for c in (a, b):
        for i in range(40):
            got = c.get_object(Bucket="shared", Key=f"obj/{i:03d}")["Body"].read()
            assert got == body(i), f"obj/{i:03d} differs"
        assert c.get_object(Bucket="shared", Key="mp")["Body"].read() == b"".join(parts)
    la = [o["Key"] for o in a.list_objects_v2(Bucket="shared")["Contents"]]
    lb = [o["Key"] for o in b.list_objects_v2(Bucket="shared")["Contents"]]
    assert la == lb == sorted([f"obj/{i:03d}" for i in range(40)] + ["mp"]), (la, lb)
    b.put_object(Bucket="shared", Key="after", Body=b"after the failure")
    assert a.get_object(Bucket="shared", Key="after")["Body"].read() == b"after the failure"
    print("VERIFIED", flush=True)
