"""The S3 API of a running Basalt gateway, driven by boto3 (the AWS SDK for Python).

Run by crates/cli/tests/s3_clients.rs against a fresh `basalt up`; reads the endpoint from
S3_ENDPOINT and the credentials from the usual AWS_* variables. Every check asserts a real
outcome. Each group of steps is its own result: a failing group prints its traceback and
the run goes on with the next, so one failure does not hide the others; the run ends with
one line per group and a non-zero exit if any failed.
"""

import concurrent.futures
import hashlib
import os
import sys
import time
import traceback
import urllib.request

import boto3
import botocore
from botocore.config import Config
from botocore.exceptions import ClientError

ENDPOINT = os.environ["S3_ENDPOINT"]
MiB = 1 << 20


def client(secret=None, addressing="path"):
    return boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=secret or os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(
            s3={"addressing_style": addressing},
            retries={"max_attempts": 1},
            max_pool_connections=32,
        ),
    )


s3 = client()


def error_code(fn, *args, **kwargs):
    """The S3 error code `fn` fails with (it must fail)."""
    try:
        fn(*args, **kwargs)
    except ClientError as e:
        return e.response["Error"]["Code"]
    raise AssertionError(f"{fn.__name__} succeeded, expected an error")


def data(seed, size):
    """Deterministic bytes, different per seed."""
    block = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


def step(name):
    print(f"== {name}", flush=True)


def buckets():
    step("buckets")
    s3.create_bucket(Bucket="life")
    s3.head_bucket(Bucket="life")
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert "life" in names, names
    # Re-creating one's own bucket succeeds (us-east-1 semantics).
    s3.create_bucket(Bucket="life")
    assert error_code(s3.head_bucket, Bucket="nope-missing") in ("404", "NoSuchBucket")
    assert error_code(s3.list_objects_v2, Bucket="nope-missing") == "NoSuchBucket"
    loc = s3.get_bucket_location(Bucket="life")
    assert loc.get("LocationConstraint") in (None, ""), loc
    assert error_code(s3.create_bucket, Bucket="Bad_Name") in ("InvalidBucketName",), "name"


def objects():
    step("objects: put, head, get, metadata, etag")
    body = data(1, 3 * MiB + 123)
    put = s3.put_object(
        Bucket="life",
        Key="dir/a.bin",
        Body=body,
        ContentType="application/x-test",
        CacheControl="max-age=60",
        ContentDisposition="attachment; filename=a.bin",
        Metadata={"color": "blue", "Mixed-Case": "v"},
    )
    md5 = hashlib.md5(body).hexdigest()
    assert put["ETag"] == f'"{md5}"', put["ETag"]
    head = s3.head_object(Bucket="life", Key="dir/a.bin")
    assert head["ContentLength"] == len(body)
    assert head["ContentType"] == "application/x-test"
    assert head["CacheControl"] == "max-age=60"
    assert head["ContentDisposition"] == "attachment; filename=a.bin"
    assert head["Metadata"] == {"color": "blue", "mixed-case": "v"}, head["Metadata"]
    assert head["ETag"] == f'"{md5}"'
    got = s3.get_object(Bucket="life", Key="dir/a.bin")
    assert got["Body"].read() == body
    assert got["ETag"] == f'"{md5}"'
    assert error_code(s3.get_object, Bucket="life", Key="missing") == "NoSuchKey"
    # Overwrite: the new bytes win.
    body2 = data(2, 1000)
    s3.put_object(Bucket="life", Key="dir/a.bin", Body=body2)
    assert s3.get_object(Bucket="life", Key="dir/a.bin")["Body"].read() == body2
    # Empty object.
    s3.put_object(Bucket="life", Key="empty", Body=b"")
    e = s3.get_object(Bucket="life", Key="empty")
    assert e["ContentLength"] == 0 and e["Body"].read() == b""
    assert e["ETag"] == '"d41d8cd98f00b204e9800998ecf8427e"'
    # Content-MD5 mismatch is refused and leaves the old object.
    import base64

    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    assert error_code(
        s3.put_object, Bucket="life", Key="dir/a.bin", Body=b"xyz", ContentMD5=wrong
    ) == "BadDigest"
    assert s3.get_object(Bucket="life", Key="dir/a.bin")["Body"].read() == body2
    # x-amz-checksum-*: a wrong value is refused and leaves the old object; a right one
    # (boto3 sends CRC32 in an aws-chunked trailer by default) is echoed.
    import zlib

    assert error_code(
        s3.put_object, Bucket="life", Key="dir/a.bin", Body=b"xyz", ChecksumCRC32="AAAAAA=="
    ) == "BadDigest"
    assert error_code(
        s3.put_object, Bucket="life", Key="dir/a.bin", Body=b"xyz", ChecksumSHA256=base64.b64encode(b"0" * 32).decode()
    ) == "BadDigest"
    assert s3.get_object(Bucket="life", Key="dir/a.bin")["Body"].read() == body2
    crc = base64.b64encode(zlib.crc32(b"checked").to_bytes(4, "big")).decode()
    r = s3.put_object(Bucket="life", Key="checked", Body=b"checked", ChecksumAlgorithm="CRC32")
    assert r.get("ChecksumCRC32") == crc, r
    r = s3.put_object(Bucket="life", Key="checked", Body=b"checked", ChecksumCRC32=crc)
    assert r.get("ChecksumCRC32") == crc, r


def ranges():
    step("ranges")
    body = data(3, 1 * MiB + 7)
    s3.put_object(Bucket="life", Key="r", Body=body)
    for spec, want in [
        ("bytes=0-9", body[0:10]),
        ("bytes=100-", body[100:]),
        ("bytes=-5", body[-5:]),
        ("bytes=131000-131100", body[131000:131101]),
        (f"bytes=0-{len(body) + 100}", body),
    ]:
        got = s3.get_object(Bucket="life", Key="r", Range=spec)
        assert got["Body"].read() == want, spec
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206, spec
        assert got["ContentRange"].endswith(f"/{len(body)}"), got["ContentRange"]
    assert error_code(
        s3.get_object, Bucket="life", Key="r", Range=f"bytes={len(body)}-"
    ) == "InvalidRange"


def conditionals():
    step("conditional requests and response overrides")
    s3.put_object(Bucket="life", Key="c", Body=b"hello")
    tag = s3.head_object(Bucket="life", Key="c")["ETag"]
    assert error_code(s3.get_object, Bucket="life", Key="c", IfNoneMatch=tag) == "304"
    # A 304 carries the ETag (and Last-Modified) a cache revalidates with.
    try:
        s3.get_object(Bucket="life", Key="c", IfNoneMatch=tag)
    except ClientError as e:
        headers = e.response["ResponseMetadata"]["HTTPHeaders"]
        assert headers.get("etag") == tag, headers
        assert "last-modified" in headers, headers
    else:
        raise AssertionError("If-None-Match with the current ETag must answer 304")
    assert error_code(s3.get_object, Bucket="life", Key="c", IfMatch='"0000"') in (
        "PreconditionFailed",
        "412",
    )
    assert s3.get_object(Bucket="life", Key="c", IfMatch=tag)["Body"].read() == b"hello"
    future = time.time() + 3600
    import datetime

    later = datetime.datetime.fromtimestamp(future, datetime.timezone.utc)
    assert error_code(s3.get_object, Bucket="life", Key="c", IfModifiedSince=later) == "304"
    got = s3.get_object(
        Bucket="life",
        Key="c",
        ResponseContentType="text/x-override",
        ResponseContentDisposition="inline",
    )
    assert got["ContentType"] == "text/x-override", got["ContentType"]
    assert got["ContentDisposition"] == "inline"


def listing():
    step("listing 2,500 keys with delimiters and pagination")
    s3.create_bucket(Bucket="many")
    keys = [f"d{i % 5}/k{i:04d}" for i in range(2400)] + [f"top{i:03d}" for i in range(100)]

    def put(k):
        s3.put_object(Bucket="many", Key=k, Body=k.encode())

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(put, keys))
    seen = []
    pages = 0
    kwargs = {"Bucket": "many", "MaxKeys": 1000}
    while True:
        page = s3.list_objects_v2(**kwargs)
        pages += 1
        seen += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        kwargs["ContinuationToken"] = page["NextContinuationToken"]
    assert pages == 3, pages
    assert seen == sorted(keys), (len(seen), seen[:3])
    # v1 with markers, through the paginator.
    v1 = []
    for page in s3.get_paginator("list_objects").paginate(Bucket="many", PaginationConfig={"PageSize": 700}):
        v1 += [o["Key"] for o in page.get("Contents", [])]
    assert v1 == sorted(keys)
    # Delimiter: five common prefixes and the top-level keys.
    page = s3.list_objects_v2(Bucket="many", Delimiter="/")
    prefixes = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    assert prefixes == [f"d{i}/" for i in range(5)], prefixes
    assert [o["Key"] for o in page["Contents"]] == [f"top{i:03d}" for i in range(100)]
    assert page["KeyCount"] == 105
    # Delimiter with pagination: prefixes count towards MaxKeys and are not repeated.
    items = []
    kwargs = {"Bucket": "many", "Delimiter": "/", "MaxKeys": 3}
    while True:
        page = s3.list_objects_v2(**kwargs)
        items += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        items += [o["Key"] for o in page.get("Contents", [])]
        if not page["IsTruncated"]:
            break
        kwargs["ContinuationToken"] = page["NextContinuationToken"]
    assert items == [f"d{i}/" for i in range(5)] + [f"top{i:03d}" for i in range(100)], items[:8]
    # Prefix + delimiter + start-after.
    page = s3.list_objects_v2(Bucket="many", Prefix="d3/", StartAfter="d3/k2393", MaxKeys=10)
    assert [o["Key"] for o in page["Contents"]] == ["d3/k2398"], page.get("Contents")
    # Versions of an unversioned bucket: every object once, as "null".
    versions = []
    for page in s3.get_paginator("list_object_versions").paginate(Bucket="many"):
        versions += page.get("Versions", [])
    assert len(versions) == 2500
    assert all(v["VersionId"] == "null" and v["IsLatest"] for v in versions)
    # URL encoding of awkward keys (boto3 asks for encoding-type=url and decodes).
    odd = ["sp ace/x", "plus+sign", "ünï/cödé", "amp&er", "per%cent"]
    for k in odd:
        s3.put_object(Bucket="life", Key=k, Body=b"o")
    listed = [o["Key"] for o in s3.list_objects(Bucket="life", Prefix="")["Contents"]]
    for k in odd:
        assert k in listed, (k, listed)
    page = s3.list_objects_v2(Bucket="life", Delimiter="/", Prefix="")
    assert "sp ace/" in [p["Prefix"] for p in page["CommonPrefixes"]]
    # Bulk delete.
    resp = s3.delete_objects(
        Bucket="many", Delete={"Objects": [{"Key": k} for k in keys[:1000]]}
    )
    assert len(resp["Deleted"]) == 1000
    assert s3.list_objects_v2(Bucket="many")["KeyCount"] == 1000


def multipart():
    step("multipart upload: 3 x 5 MiB + tail")
    parts_data = [data(10 + i, 5 * MiB) for i in range(3)] + [data(20, 1 * MiB + 5)]
    up = s3.create_multipart_upload(Bucket="life", Key="big", ContentType="video/x-test")
    uid = up["UploadId"]
    listed = s3.list_multipart_uploads(Bucket="life")["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in listed] == [("big", uid)]
    etags = []
    for n, d in enumerate(parts_data, start=1):
        r = s3.upload_part(Bucket="life", Key="big", UploadId=uid, PartNumber=n, Body=d)
        assert r["ETag"] == f'"{hashlib.md5(d).hexdigest()}"'
        etags.append(r["ETag"])
    parts = s3.list_parts(Bucket="life", Key="big", UploadId=uid)["Parts"]
    assert [(p["PartNumber"], p["Size"]) for p in parts] == [
        (i + 1, len(d)) for i, d in enumerate(parts_data)
    ]
    # A too-small part in the middle is refused.
    small = s3.create_multipart_upload(Bucket="life", Key="small")
    e1 = s3.upload_part(Bucket="life", Key="small", UploadId=small["UploadId"], PartNumber=1, Body=b"a" * 100)
    e2 = s3.upload_part(Bucket="life", Key="small", UploadId=small["UploadId"], PartNumber=2, Body=b"b")
    assert error_code(
        s3.complete_multipart_upload,
        Bucket="life",
        Key="small",
        UploadId=small["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1["ETag"]}, {"PartNumber": 2, "ETag": e2["ETag"]}]},
    ) == "EntityTooSmall"
    # A failed complete releases its claim on the upload: it can be aborted at once (an
    # upload being completed cannot: the abort would delete the new object's parts).
    s3.abort_multipart_upload(Bucket="life", Key="small", UploadId=small["UploadId"])
    assert error_code(
        s3.list_parts, Bucket="life", Key="small", UploadId=small["UploadId"]
    ) == "NoSuchUpload"
    done = s3.complete_multipart_upload(
        Bucket="life",
        Key="big",
        UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": i + 1, "ETag": t} for i, t in enumerate(etags)]},
    )
    digest = hashlib.md5(b"".join(hashlib.md5(d).digest() for d in parts_data)).hexdigest()
    assert done["ETag"] == f'"{digest}-4"', done["ETag"]
    assert error_code(s3.abort_multipart_upload, Bucket="life", Key="big", UploadId=uid) == "NoSuchUpload"
    whole = b"".join(parts_data)
    got = s3.get_object(Bucket="life", Key="big")
    assert got["ContentType"] == "video/x-test"
    assert got["ContentLength"] == len(whole)
    assert got["Body"].read() == whole
    mid = s3.get_object(Bucket="life", Key="big", Range=f"bytes={5 * MiB - 10}-{5 * MiB + 9}")
    assert mid["Body"].read() == whole[5 * MiB - 10 : 5 * MiB + 10]
    assert s3.list_multipart_uploads(Bucket="life").get("Uploads", []) == []
    # The high-level transfer manager (multipart with concurrent parts) round-trips too.
    import io

    payload = data(30, 17 * MiB + 3)
    cfg = boto3.s3.transfer.TransferConfig(multipart_threshold=8 * MiB, multipart_chunksize=5 * MiB)
    s3.upload_fileobj(io.BytesIO(payload), "life", "managed", Config=cfg)
    out = io.BytesIO()
    s3.download_fileobj("life", "managed", out, Config=cfg)
    assert out.getvalue() == payload


def copies():
    step("copy object with metadata directives")
    s3.put_object(Bucket="life", Key="src", Body=b"copy me", Metadata={"k": "v"}, ContentType="text/plain")
    s3.copy_object(Bucket="life", Key="dst", CopySource={"Bucket": "life", "Key": "src"})
    h = s3.head_object(Bucket="life", Key="dst")
    assert h["Metadata"] == {"k": "v"} and h["ContentType"] == "text/plain"
    assert s3.get_object(Bucket="life", Key="dst")["Body"].read() == b"copy me"
    s3.copy_object(
        Bucket="life",
        Key="dst2",
        CopySource={"Bucket": "life", "Key": "src"},
        MetadataDirective="REPLACE",
        Metadata={"new": "1"},
        ContentType="application/json",
    )
    h = s3.head_object(Bucket="life", Key="dst2")
    assert h["Metadata"] == {"new": "1"} and h["ContentType"] == "application/json"
    assert error_code(
        s3.copy_object, Bucket="life", Key="src", CopySource={"Bucket": "life", "Key": "src"}
    ) == "InvalidRequest"
    s3.copy_object(
        Bucket="life",
        Key="src",
        CopySource={"Bucket": "life", "Key": "src"},
        MetadataDirective="REPLACE",
        Metadata={"k": "changed"},
    )
    assert s3.head_object(Bucket="life", Key="src")["Metadata"] == {"k": "changed"}
    assert s3.get_object(Bucket="life", Key="src")["Body"].read() == b"copy me"
    assert error_code(
        s3.copy_object, Bucket="life", Key="x", CopySource={"Bucket": "life", "Key": "nope"}
    ) == "NoSuchKey"


def presigned_and_auth():
    step("presigned URLs (SigV2 and SigV4), virtual-host style, wrong secret")
    import http.client
    import urllib.parse

    def raw(method, url, body=None):
        # http.client sends no Content-Type of its own (a SigV2 signature covers it).
        u = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(u.netloc, timeout=30)
        conn.request(method, u.path + ("?" + u.query if u.query else ""), body=body)
        r = conn.getresponse()
        return r.status, r.read()

    for version in ("s3", "s3v4"):
        signer = boto3.client(
            "s3",
            endpoint_url=ENDPOINT,
            region_name="us-east-1",
            aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "path"}, signature_version=version),
        )
        key = f"pre-{version}"
        put_url = signer.generate_presigned_url(
            "put_object", Params={"Bucket": "life", "Key": key}, ExpiresIn=300
        )
        status, body = raw("PUT", put_url, b"presigned body")
        assert status == 200, (version, status, body)
        get_url = signer.generate_presigned_url(
            "get_object", Params={"Bucket": "life", "Key": key}, ExpiresIn=300
        )
        status, body = raw("GET", get_url)
        assert (status, body) == (200, b"presigned body"), (version, status, body)
        # A URL for one key does not open another.
        status, _ = raw("GET", get_url.replace(f"/{key}?", "/pre-other?"))
        assert status == 403, (version, status)
        # An expired URL is refused.
        old = signer.generate_presigned_url(
            "get_object", Params={"Bucket": "life", "Key": key}, ExpiresIn=1
        )
        time.sleep(2)
        status, _ = raw("GET", old)
        assert status == 403, (version, "expired", status)
    bad = client(secret="x" * 40)
    assert error_code(bad.list_buckets) == "SignatureDoesNotMatch"
    # Anonymous requests are refused.
    try:
        urllib.request.urlopen(f"{ENDPOINT}/life/pre-s3v4", timeout=30)
        raise AssertionError("anonymous GET accepted")
    except urllib.error.HTTPError as e:
        assert e.code == 403, e.code
    # Virtual-host style: BUCKET.localhost. Not every resolver maps *.localhost to the
    # loopback address, so this process does.
    import socket

    real_getaddrinfo = socket.getaddrinfo

    def loopback_localhost(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "127.0.0.1"
        return real_getaddrinfo(host, *args, **kwargs)

    socket.getaddrinfo = loopback_localhost
    try:
        port = ENDPOINT.rsplit(":", 1)[1]
        vh = boto3.client(
            "s3",
            endpoint_url=f"http://localhost:{port}",
            region_name="us-east-1",
            aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "virtual"}),
        )
        seen = []
        vh.meta.events.register("before-send", lambda request, **kw: seen.append(request.url))
        vh.put_object(Bucket="life", Key="vhost", Body=b"virtual")
        assert vh.get_object(Bucket="life", Key="vhost")["Body"].read() == b"virtual"
        assert seen[0].startswith(f"http://life.localhost:{port}/vhost"), seen
        assert "vhost" in [o["Key"] for o in vh.list_objects_v2(Bucket="life")["Contents"]]
    finally:
        socket.getaddrinfo = real_getaddrinfo


def deletes():
    step("deletes and bucket removal")
    assert error_code(s3.delete_bucket, Bucket="life") == "BucketNotEmpty"
    s3.delete_object(Bucket="life", Key="never-existed")
    while True:
        page = s3.list_objects_v2(Bucket="life")
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if not keys:
            break
        s3.delete_objects(Bucket="life", Delete={"Objects": keys, "Quiet": True})
    s3.delete_bucket(Bucket="life")
    assert error_code(s3.head_bucket, Bucket="life") in ("404", "NoSuchBucket")


def never_silently_wrong():
    step("requests not honoured are refused, never half done (issue 13)")
    # GET/HEAD ?partNumber on a two-part object: that part, not the whole object.
    p1, p2 = data(40, 5 * MiB), data(41, 1 * MiB + 7)
    up = s3.create_multipart_upload(Bucket="life", Key="two")
    uid = up["UploadId"]
    e = [
        s3.upload_part(Bucket="life", Key="two", UploadId=uid, PartNumber=n, Body=d)["ETag"]
        for n, d in ((1, p1), (2, p2))
    ]
    parts = {"Parts": [{"PartNumber": 1, "ETag": e[0]}, {"PartNumber": 2, "ETag": e[1]}]}
    # A conditional complete that fails leaves the upload to be completed again.
    s3.put_object(Bucket="life", Key="two", Body=b"already here")
    assert error_code(
        s3.complete_multipart_upload, Bucket="life", Key="two", UploadId=uid,
        MultipartUpload=parts, IfNoneMatch="*",
    ) in ("PreconditionFailed", "412")
    s3.complete_multipart_upload(Bucket="life", Key="two", UploadId=uid, MultipartUpload=parts)
    for n, want in ((1, p1), (2, p2)):
        got = s3.get_object(Bucket="life", Key="two", PartNumber=n)
        assert got["Body"].read() == want, f"part {n}"
        assert got["ContentLength"] == len(want) and got["PartsCount"] == 2
        head = s3.head_object(Bucket="life", Key="two", PartNumber=n)
        assert head["ContentLength"] == len(want)
    assert error_code(s3.get_object, Bucket="life", Key="two", PartNumber=3) in (
        "InvalidPartNumber", "416",
    )
    s3.put_object(Bucket="life", Key="single", Body=b"hello")
    assert s3.get_object(Bucket="life", Key="single", PartNumber=1)["Body"].read() == b"hello"
    assert error_code(s3.get_object, Bucket="life", Key="single", PartNumber=2) in (
        "InvalidPartNumber", "416",
    )
    # Conditional writes: If-None-Match: * and If-Match are honoured, atomically.
    s3.put_object(Bucket="life", Key="cond", Body=b"v1")
    assert error_code(s3.put_object, Bucket="life", Key="cond", Body=b"v2", IfNoneMatch="*") in (
        "PreconditionFailed", "412",
    )
    assert error_code(
        s3.put_object, Bucket="life", Key="cond", Body=b"v2", IfMatch='"0123456789abcdef0123456789abcdef"'
    ) in ("PreconditionFailed", "412")
    assert s3.get_object(Bucket="life", Key="cond")["Body"].read() == b"v1", "nothing overwritten"
    etag = s3.head_object(Bucket="life", Key="cond")["ETag"]
    s3.put_object(Bucket="life", Key="cond", Body=b"v3", IfMatch=etag)
    assert s3.get_object(Bucket="life", Key="cond")["Body"].read() == b"v3"
    s3.put_object(Bucket="life", Key="fresh", Body=b"new", IfNoneMatch="*")
    assert error_code(
        s3.put_object, Bucket="life", Key="missing", Body=b"x", IfMatch=etag
    ) in ("NoSuchKey", "404")
    # SSE-KMS and object lock are not implemented: refused, never ignored.
    assert error_code(
        s3.put_object, Bucket="life", Key="enc", Body=b"x", ServerSideEncryption="aws:kms"
    ) in ("NotImplemented", "501")
    key = b"k" * 32
    assert error_code(
        s3.get_object, Bucket="life", Key="cond", SSECustomerAlgorithm="AES256", SSECustomerKey=key
    ) in ("InvalidRequest", "400")
    # Object lock headers on a bucket without object lock are refused, never ignored.
    assert error_code(
        s3.put_object, Bucket="life", Key="locked", Body=b"x", ObjectLockLegalHoldStatus="ON"
    ) in ("InvalidRequest", "400")
    for k in ("enc", "locked"):
        assert error_code(s3.head_object, Bucket="life", Key=k) in ("404", "NoSuchKey")
    # MaxKeys=0: an empty page that is not truncated.
    page = s3.list_objects_v2(Bucket="life", MaxKeys=0)
    assert page["IsTruncated"] is False and page.get("KeyCount", 0) == 0, page
    # More than 1000 keys in one multi-delete is malformed; nothing is deleted.
    keys = [{"Key": f"none-{i}"} for i in range(1001)] + [{"Key": "cond"}]
    assert error_code(s3.delete_objects, Bucket="life", Delete={"Objects": keys}) == "MalformedXML"
    assert s3.head_object(Bucket="life", Key="cond")["ContentLength"] == 2
    never_silently_wrong_more()


def signed_raw(method, path, body=b"", headers=None):
    """A request signed with SigV4 by botocore but sent as given (headers and body
    untouched): for what boto3 itself never sends. Returns (status, headers, body)."""
    import http.client
    import urllib.parse

    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    req = AWSRequest(method=method, url=f"{ENDPOINT}{path}", data=body, headers=headers or {})
    creds = Credentials(os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    u = urllib.parse.urlsplit(req.url)
    conn = http.client.HTTPConnection(u.netloc, timeout=30)
    conn.request(method, u.path + ("?" + u.query if u.query else ""), body=body, headers=dict(req.headers))
    r = conn.getresponse()
    return r.status, r.headers, r.read()


def raw_url(method, url, body=None, headers=None):
    """Send a (presigned) URL as is; returns (status, headers, body)."""
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.netloc, timeout=30)
    conn.request(method, u.path + ("?" + u.query if u.query else ""), body=body, headers=headers or {})
    r = conn.getresponse()
    return r.status, r.headers, r.read()


def never_silently_wrong_more():
    step("ACLs, tags, storage classes, versions, expected owners, request ids (issue 13)")
    import base64
    import zlib

    # ACLs in a BucketOwnerEnforced bucket (the default), as S3 answers: "private" and the
    # owner's equivalents are accepted; wider ACLs are refused by name and nothing is made.
    assert error_code(s3.create_bucket, Bucket="acl-public", ACL="public-read") == (
        "InvalidBucketAclWithObjectOwnership"
    )
    assert error_code(s3.head_bucket, Bucket="acl-public") in ("404", "NoSuchBucket")
    s3.create_bucket(Bucket="acl-private", ACL="private", ObjectOwnership="BucketOwnerEnforced")
    assert error_code(
        s3.create_bucket, Bucket="acl-logs", ObjectOwnership="ObjectWriter", ACL="log-delivery-write"
    ) in ("NotImplemented", "501")
    acl = s3.get_bucket_acl(Bucket="acl-private")
    owner = acl["Owner"]["ID"]
    assert [(g["Grantee"]["ID"], g["Permission"]) for g in acl["Grants"]] == [
        (owner, "FULL_CONTROL")
    ], acl
    s3.put_bucket_acl(Bucket="acl-private", ACL="private")
    assert error_code(s3.put_bucket_acl, Bucket="acl-private", ACL="public-read") == (
        "AccessControlListNotSupported"
    )
    s3.put_object(Bucket="acl-private", Key="p", Body=b"private", ACL="private")
    s3.put_object(Bucket="acl-private", Key="p", Body=b"private", ACL="bucket-owner-full-control")
    assert s3.get_object_acl(Bucket="acl-private", Key="p")["Grants"][0]["Permission"] == "FULL_CONTROL"
    assert error_code(s3.get_object_acl, Bucket="acl-private", Key="none") in ("NoSuchKey", "404")
    for extra, code in (
        ({"ACL": "public-read"}, "AccessControlListNotSupported"),
        ({"GrantRead": 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'},
         "AccessControlListNotSupported"),
        ({"GrantRead": 'emailAddress="bob@example.com"'}, "NotImplemented"),
        ({"ACL": "private", "GrantRead": f'id="{owner}"'}, "InvalidRequest"),
        ({"StorageClass": "GLACIER"}, "NotImplemented"),
        ({"WebsiteRedirectLocation": "/elsewhere"}, "NotImplemented"),
    ):
        got = error_code(s3.put_object, Bucket="acl-private", Key="q", Body=b"x", **extra)
        assert got == code, (extra, got)
    assert error_code(s3.head_object, Bucket="acl-private", Key="q") in ("404", "NoSuchKey")
    s3.put_object(Bucket="acl-private", Key="q", Body=b"x", StorageClass="STANDARD")
    # Version ids: the buckets are unversioned, so every object is version "null".
    assert s3.get_object(Bucket="acl-private", Key="p", VersionId="null")["Body"].read() == b"private"
    bogus = "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"
    assert error_code(s3.get_object, Bucket="acl-private", Key="p", VersionId=bogus) in (
        "InvalidArgument", "400",
    )
    assert error_code(s3.delete_object, Bucket="acl-private", Key="p", VersionId=bogus) in (
        "InvalidArgument", "400",
    )
    assert s3.head_object(Bucket="acl-private", Key="p")["ContentLength"] == 7
    # response-* parameters override the stored headers in the answer.
    got = s3.get_object(
        Bucket="acl-private", Key="p",
        ResponseContentDisposition='attachment; filename="p.txt"',
        ResponseContentType="text/plain",
        ResponseCacheControl="no-cache",
    )
    assert got["ContentDisposition"] == 'attachment; filename="p.txt"', got
    assert got["ContentType"] == "text/plain" and got["CacheControl"] == "no-cache", got
    # Conditional deletes remove only the object they describe, atomically.
    etag = s3.head_object(Bucket="acl-private", Key="p")["ETag"]
    for wrong in ({"IfMatch": '"00000000000000000000000000000000"'}, {"IfMatchSize": 8}):
        assert error_code(s3.delete_object, Bucket="acl-private", Key="p", **wrong) in (
            "PreconditionFailed", "412",
        ), wrong
    assert s3.head_object(Bucket="acl-private", Key="p")["ContentLength"] == 7
    s3.delete_object(Bucket="acl-private", Key="p", IfMatch=etag, IfMatchSize=7)
    assert error_code(s3.head_object, Bucket="acl-private", Key="p") in ("404", "NoSuchKey")
    assert error_code(s3.delete_object, Bucket="acl-private", Key="p", IfMatch=etag) in (
        "NoSuchKey", "404",
    )
    # x-amz-expected-bucket-owner: a bucket of another owner is refused.
    assert error_code(
        s3.put_object, Bucket="acl-private", Key="r", Body=b"x", ExpectedBucketOwner="someone-else"
    ) in ("AccessDenied", "403")
    s3.put_object(Bucket="acl-private", Key="r", Body=b"x", ExpectedBucketOwner=owner)
    # Presigned SigV4 URLs are valid for at most 7 days.
    v4 = boto3.client(
        "s3", endpoint_url=ENDPOINT, region_name="us-east-1",
        aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}, signature_version="s3v4"),
    )
    week = 7 * 24 * 3600
    url = v4.generate_presigned_url("get_object", Params={"Bucket": "acl-private", "Key": "r"}, ExpiresIn=week)
    assert raw_url("GET", url)[0] == 200
    url = v4.generate_presigned_url(
        "get_object", Params={"Bucket": "acl-private", "Key": "r"}, ExpiresIn=week + 1
    )
    status, _, body = raw_url("GET", url)
    assert status == 400 and b"AuthorizationQueryParametersError" in body, (status, body)
    # An empty Content-MD5 is no digest; the error names its request id (header and body).
    url = v4.generate_presigned_url("put_object", Params={"Bucket": "acl-private", "Key": "m"}, ExpiresIn=300)
    status, headers, body = raw_url("PUT", url, b"x", {"Content-MD5": ""})
    assert status == 400 and b"<Code>InvalidDigest</Code>" in body, (status, body)
    rid = headers["x-amz-request-id"]
    assert rid and f"<RequestId>{rid}</RequestId>".encode() in body, (rid, body)
    assert error_code(s3.head_object, Bucket="acl-private", Key="m") in ("404", "NoSuchKey")
    try:
        s3.get_object(Bucket="acl-private", Key="none")
    except ClientError as e:
        assert len(e.response["ResponseMetadata"]["RequestId"]) == 16, e.response
    # aws-chunked is how a body was sent, not what the object is: never stored.
    payload = b"sent in aws-chunked encoding"
    crc = base64.b64encode(zlib.crc32(payload).to_bytes(4, "big")).decode()
    body = (
        f"{len(payload):x}\r\n".encode() + payload
        + f"\r\n0\r\nx-amz-checksum-crc32:{crc}\r\n\r\n".encode()
    )
    for key, sent, stored in (("c1", "aws-chunked", None), ("c2", "aws-chunked,gzip", "gzip")):
        status, _, reply = signed_raw("PUT", f"/acl-private/{key}", body, {
            "Content-Encoding": sent,
            "X-Amz-Content-SHA256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            "X-Amz-Trailer": "x-amz-checksum-crc32",
            "X-Amz-Decoded-Content-Length": str(len(payload)),
        })
        assert status == 200, (status, reply)
        head = s3.head_object(Bucket="acl-private", Key=key)
        assert head.get("ContentEncoding") == stored, (key, head.get("ContentEncoding"))
        assert s3.get_object(Bucket="acl-private", Key=key)["Body"].read() == payload
    for key in ("q", "r", "c1", "c2"):
        s3.delete_object(Bucket="acl-private", Key=key)
    s3.delete_bucket(Bucket="acl-private")


def tags_and_attributes():
    step("tags (objects, versions, copies, multipart, buckets), object attributes, checksums")
    import base64

    b = "tagged"
    s3.create_bucket(Bucket=b)
    body = data(90, 100_000)
    s3.put_object(Bucket=b, Key="t", Body=body, Tagging="team=storage&note=a%20b", ChecksumAlgorithm="SHA256")
    tags = {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=b, Key="t")["TagSet"]}
    assert tags == {"team": "storage", "note": "a b"}, tags
    assert s3.get_object(Bucket=b, Key="t")["TagCount"] == 2
    s3.put_object_tagging(Bucket=b, Key="t", Tagging={"TagSet": [{"Key": "only", "Value": "one"}]})
    assert s3.get_object_tagging(Bucket=b, Key="t")["TagSet"] == [{"Key": "only", "Value": "one"}]
    assert s3.get_object(Bucket=b, Key="t")["Body"].read() == body, "retagging keeps the data"
    # Copies keep the source's tags, or take new ones with REPLACE.
    s3.copy_object(Bucket=b, Key="c1", CopySource={"Bucket": b, "Key": "t"})
    assert s3.get_object_tagging(Bucket=b, Key="c1")["TagSet"] == [{"Key": "only", "Value": "one"}]
    s3.copy_object(Bucket=b, Key="c2", CopySource={"Bucket": b, "Key": "t"},
                   TaggingDirective="REPLACE", Tagging="x=y")
    assert s3.get_object_tagging(Bucket=b, Key="c2")["TagSet"] == [{"Key": "x", "Value": "y"}]
    assert error_code(s3.copy_object, Bucket=b, Key="c3", CopySource={"Bucket": b, "Key": "t"},
                      Tagging="x=y") == "InvalidArgument"
    s3.delete_object_tagging(Bucket=b, Key="t")
    assert s3.get_object_tagging(Bucket=b, Key="t")["TagSet"] == []
    assert "TagCount" not in s3.get_object(Bucket=b, Key="t")
    # Limits.
    many = "&".join(f"k{i}=v" for i in range(11))
    assert error_code(s3.put_object, Bucket=b, Key="bad", Body=b"x", Tagging=many) == "BadRequest"
    assert error_code(s3.put_object, Bucket=b, Key="bad", Body=b"x", Tagging="aws:x=1") == "InvalidTag"
    assert error_code(s3.head_object, Bucket=b, Key="bad") == "404"
    # Tags of one version, not the others.
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    v1 = s3.put_object(Bucket=b, Key="v", Body=b"1", Tagging="gen=1")["VersionId"]
    v2 = s3.put_object(Bucket=b, Key="v", Body=b"2", Tagging="gen=2")["VersionId"]
    s3.put_object_tagging(Bucket=b, Key="v", VersionId=v1, Tagging={"TagSet": [{"Key": "gen", "Value": "old"}]})
    assert s3.get_object_tagging(Bucket=b, Key="v", VersionId=v1)["TagSet"] == [{"Key": "gen", "Value": "old"}]
    got = s3.get_object_tagging(Bucket=b, Key="v")
    assert got["TagSet"] == [{"Key": "gen", "Value": "2"}] and got["VersionId"] == v2, got
    # Multipart uploads carry their tags to the object.
    up = s3.create_multipart_upload(Bucket=b, Key="mp", Tagging="kind=multipart")
    parts = [data(91, 5 * MiB), data(92, 1000)]
    etags = [s3.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=n + 1, Body=d)["ETag"]
             for n, d in enumerate(parts)]
    s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"], MultipartUpload={
        "Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]})
    assert s3.get_object_tagging(Bucket=b, Key="mp")["TagSet"] == [{"Key": "kind", "Value": "multipart"}]
    # Object attributes and stored checksums.
    want = base64.b64encode(hashlib.sha256(body).digest()).decode()
    attrs = s3.get_object_attributes(Bucket=b, Key="t", ObjectAttributes=[
        "ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"])
    assert attrs["ObjectSize"] == len(body) and attrs["StorageClass"] == "STANDARD", attrs
    # (S3 sends this ETag without quotes; the protocol layer, s3s 0.14, always quotes.)
    assert attrs["ETag"].strip('"') == hashlib.md5(body).hexdigest(), attrs
    assert attrs["Checksum"]["ChecksumSHA256"] == want, attrs
    head = s3.head_object(Bucket=b, Key="t", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == want, head
    got = s3.get_object(Bucket=b, Key="t", ChecksumMode="ENABLED")
    assert got["ChecksumSHA256"] == want and got["Body"].read() == body
    attrs = s3.get_object_attributes(Bucket=b, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=1)
    parts_info = attrs["ObjectParts"]
    assert parts_info["TotalPartsCount"] == 2 and parts_info["IsTruncated"] is True, parts_info
    assert parts_info["Parts"][0]["Size"] == 5 * MiB, parts_info
    # A multipart upload with a checksum algorithm: each part's is computed (and checked
    # when sent), the object gets S3's COMPOSITE checksum (of the parts' checksums, "-N").
    up = s3.create_multipart_upload(Bucket=b, Key="mpc", ChecksumAlgorithm="SHA256")
    assert up["ChecksumAlgorithm"] == "SHA256", up
    sums = []
    for n, d in enumerate(parts):
        r = s3.upload_part(Bucket=b, Key="mpc", UploadId=up["UploadId"], PartNumber=n + 1, Body=d,
                           ChecksumAlgorithm="SHA256")
        assert r["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(d).digest()).decode(), r
        sums.append(r)
    listed = s3.list_parts(Bucket=b, Key="mpc", UploadId=up["UploadId"])
    assert [p["ChecksumSHA256"] for p in listed["Parts"]] == [r["ChecksumSHA256"] for r in sums], listed
    composite = base64.b64encode(hashlib.sha256(b"".join(
        hashlib.sha256(d).digest() for d in parts)).digest()).decode() + f"-{len(parts)}"
    bad = [{"PartNumber": 1, "ETag": sums[0]["ETag"], "ChecksumSHA256": sums[1]["ChecksumSHA256"]},
           {"PartNumber": 2, "ETag": sums[1]["ETag"], "ChecksumSHA256": sums[1]["ChecksumSHA256"]}]
    assert error_code(s3.complete_multipart_upload, Bucket=b, Key="mpc", UploadId=up["UploadId"],
                      MultipartUpload={"Parts": bad}) == "InvalidPart"
    done = s3.complete_multipart_upload(Bucket=b, Key="mpc", UploadId=up["UploadId"], MultipartUpload={
        "Parts": [{"PartNumber": n + 1, "ETag": r["ETag"], "ChecksumSHA256": r["ChecksumSHA256"]}
                  for n, r in enumerate(sums)]})
    assert done["ChecksumSHA256"] == composite, (done, composite)
    head = s3.head_object(Bucket=b, Key="mpc", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == composite and head["ChecksumType"] == "COMPOSITE", head
    attrs = s3.get_object_attributes(Bucket=b, Key="mpc", ObjectAttributes=["Checksum"])
    assert attrs["Checksum"]["ChecksumSHA256"] == composite, attrs
    assert error_code(s3.create_multipart_upload, Bucket=b, Key="x", ChecksumAlgorithm="CRC32",
                      ChecksumType="FULL_OBJECT") in ("NotImplemented", "501")
    # Copies keep a whole-object checksum, compute one asked for, and drop a composite one.
    s3.copy_object(Bucket=b, Key="t-copy", CopySource=f"{b}/t")
    head = s3.head_object(Bucket=b, Key="t-copy", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == want and head["ChecksumType"] == "FULL_OBJECT", head
    out = s3.copy_object(Bucket=b, Key="t-crc", CopySource=f"{b}/t", ChecksumAlgorithm="CRC32C")
    assert out["CopyObjectResult"]["ChecksumSHA256"] == want, out
    assert out["CopyObjectResult"]["ChecksumCRC32C"], out
    s3.copy_object(Bucket=b, Key="mpc-copy", CopySource=f"{b}/mpc")
    head = s3.head_object(Bucket=b, Key="mpc-copy", ChecksumMode="ENABLED")
    assert "ChecksumSHA256" not in head, head
    # Bucket tags.
    assert error_code(s3.get_bucket_tagging, Bucket=b) == "NoSuchTagSet"
    s3.put_bucket_tagging(Bucket=b, Tagging={"TagSet": [{"Key": "cost-center", "Value": "42"}]})
    assert s3.get_bucket_tagging(Bucket=b)["TagSet"] == [{"Key": "cost-center", "Value": "42"}]
    s3.delete_bucket_tagging(Bucket=b)
    assert error_code(s3.get_bucket_tagging, Bucket=b) == "NoSuchTagSet"
    versions, markers = all_versions(b)
    for key, vid, _ in versions + markers:
        s3.delete_object(Bucket=b, Key=key, VersionId=vid)
    s3.delete_bucket(Bucket=b)


def cors():
    step("CORS: rules, preflights and the headers of cross-origin requests")
    import http.client
    import urllib.parse

    b = "browser"
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key="page.js", Body=b"js")
    u = urllib.parse.urlsplit(ENDPOINT)

    def raw(method, path, headers):
        conn = http.client.HTTPConnection(u.netloc, timeout=30)
        conn.request(method, path, headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()

    ask = {"Origin": "https://app.example.com", "Access-Control-Request-Method": "PUT",
           "Access-Control-Request-Headers": "Content-Type, X-Amz-Date"}
    status, _, body = raw("OPTIONS", f"/{b}/page.js", ask)
    assert status == 403 and b"CORSResponse" in body, (status, body)
    assert error_code(s3.get_bucket_cors, Bucket=b) == "NoSuchCORSConfiguration"
    rules = [
        {"ID": "app", "AllowedOrigins": ["https://*.example.com"], "AllowedMethods": ["GET", "PUT"],
         "AllowedHeaders": ["content-type", "x-amz-*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600},
        {"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]},
    ]
    s3.put_bucket_cors(Bucket=b, CORSConfiguration={"CORSRules": rules})
    got = s3.get_bucket_cors(Bucket=b)["CORSRules"]
    assert got[0]["AllowedOrigins"] == ["https://*.example.com"] and got[0]["MaxAgeSeconds"] == 600, got
    status, h, _ = raw("OPTIONS", f"/{b}/page.js", ask)
    assert status == 200, status
    assert h["access-control-allow-origin"] == "https://app.example.com", h
    assert h["access-control-allow-methods"] == "GET, PUT" and h["access-control-max-age"] == "600", h
    assert h["access-control-allow-headers"] == "content-type, x-amz-date", h
    status, _, _ = raw("OPTIONS", f"/{b}/page.js", dict(ask, **{"Access-Control-Request-Method": "DELETE"}))
    assert status == 403
    status, _, _ = raw("OPTIONS", f"/{b}/page.js", dict(ask, Origin="https://evil.test"))
    assert status == 403, "only GET without extra headers from other origins"
    status, h, _ = raw("OPTIONS", f"/{b}/page.js", {"Origin": "https://evil.test",
                                                   "Access-Control-Request-Method": "GET"})
    assert status == 200 and h["access-control-allow-origin"] == "*", (status, h)
    status, _, _ = raw("OPTIONS", f"/{b}/page.js", {"Access-Control-Request-Method": "GET"})
    assert status == 400, "a preflight needs an Origin"
    # An actual cross-origin request gets the headers of the rule that allows it.
    seen = {}
    s3.meta.events.register("before-send", lambda request, **kw: request.headers.__setitem__(
        "Origin", "https://app.example.com"), unique_id="cors-origin")
    s3.meta.events.register("after-call", lambda http_response, **kw: seen.update(
        http_response.headers), unique_id="cors-seen")
    try:
        assert s3.get_object(Bucket=b, Key="page.js")["Body"].read() == b"js"
    finally:
        s3.meta.events.unregister("before-send", unique_id="cors-origin")
        s3.meta.events.unregister("after-call", unique_id="cors-seen")
    assert seen.get("access-control-allow-origin") == "https://app.example.com", seen
    assert seen.get("access-control-expose-headers") == "ETag", seen
    bad = [{"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}]
    assert error_code(s3.put_bucket_cors, Bucket=b, CORSConfiguration={"CORSRules": bad}) == "InvalidRequest"
    s3.delete_bucket_cors(Bucket=b)
    assert raw("OPTIONS", f"/{b}/page.js", ask)[0] == 403
    s3.delete_object(Bucket=b, Key="page.js")
    s3.delete_bucket(Bucket=b)


def on_disk(phrase):
    """Whether `phrase` is anywhere in the OSDs' store files (their data regions)."""
    data_dir = os.environ["BASALT_DATA_DIR"]
    for root, _, files in os.walk(data_dir):
        for name in files:
            if name != "store.dat":
                continue
            with open(os.path.join(root, name), "rb") as f:
                fd, pos, carry = f.fileno(), 0, b""
                size = os.fstat(fd).st_size
                while pos < size:
                    try:
                        pos = os.lseek(fd, pos, os.SEEK_DATA)
                    except OSError:
                        break  # no data after pos
                    end = os.lseek(fd, pos, os.SEEK_HOLE)
                    while pos < end:
                        block = os.pread(fd, min(end - pos, 8 << 20), pos)
                        if phrase in carry + block:
                            return True
                        carry = block[-len(phrase):]
                        pos += len(block)
    return False


def encryption():
    step("server-side encryption: SSE-S3 and SSE-C, ranges, copies, multipart, data at rest")
    import base64

    b = "sealed"
    s3.create_bucket(Bucket=b)
    plain_phrase = b"basalt plain phrase 7f3a " * 2000
    s3_phrase = b"basalt sse-s3 phrase 9c1e " * 2000
    c_phrase = b"basalt sse-c phrase 4b8d " * 2000
    key = bytes(range(32))
    other = bytes(range(1, 33))
    ck = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key}
    s3.put_object(Bucket=b, Key="plain", Body=plain_phrase)
    out = s3.put_object(Bucket=b, Key="s3", Body=s3_phrase, ServerSideEncryption="AES256")
    assert out["ServerSideEncryption"] == "AES256", out
    assert out["ETag"].strip('"') == hashlib.md5(s3_phrase).hexdigest(), "SSE-S3 ETags are MD5s"
    out = s3.put_object(Bucket=b, Key="c", Body=c_phrase, **ck)
    assert out["SSECustomerAlgorithm"] == "AES256", out
    assert out["SSECustomerKeyMD5"] == base64.b64encode(hashlib.md5(key).digest()).decode()
    assert out["ETag"].strip('"') != hashlib.md5(c_phrase).hexdigest(), "SSE-C ETags reveal no digest"
    # At rest: the encrypted objects' bytes are nowhere on the OSDs' disks; the plain one's is
    # (checked before any copy below writes them decrypted, as asked, elsewhere).
    assert on_disk(plain_phrase[:200]), "the scan finds a plain object's bytes"
    assert not on_disk(s3_phrase[:200]), "SSE-S3 data is stored encrypted"
    assert not on_disk(c_phrase[:200]), "SSE-C data is stored encrypted"
    got = s3.get_object(Bucket=b, Key="s3")
    assert got["Body"].read() == s3_phrase and got["ServerSideEncryption"] == "AES256"
    assert s3.get_object(Bucket=b, Key="c", **ck)["Body"].read() == c_phrase
    assert s3.get_object(Bucket=b, Key="c", Range="bytes=1000-30000", **ck)["Body"].read() == c_phrase[1000:30001]
    assert s3.get_object(Bucket=b, Key="s3", Range="bytes=777-")["Body"].read() == s3_phrase[777:]
    assert s3.head_object(Bucket=b, Key="c", **ck)["ContentLength"] == len(c_phrase)
    # SSE-C: without the key, or with another one, nothing is read.
    assert error_code(s3.get_object, Bucket=b, Key="c") in ("InvalidRequest", "400")
    assert error_code(s3.head_object, Bucket=b, Key="c") in ("InvalidRequest", "400")
    wrong = {"SSECustomerAlgorithm": "AES256", "SSECustomerKey": other}
    assert error_code(s3.get_object, Bucket=b, Key="c", **wrong) in ("AccessDenied", "403")
    status, _, reply = signed_raw("PUT", f"/{b}/c2", b"x", {
        "x-amz-server-side-encryption-customer-algorithm": "AES256",
        "x-amz-server-side-encryption-customer-key": base64.b64encode(key).decode(),
        "x-amz-server-side-encryption-customer-key-MD5": base64.b64encode(b"x" * 16).decode(),
        "X-Amz-Content-SHA256": hashlib.sha256(b"x").hexdigest(),
    })
    assert status == 400 and b"InvalidArgument" in reply, (status, reply)
    # Copies decrypt with the source's key and encrypt as the request says.
    s3.copy_object(Bucket=b, Key="c-to-plain", CopySource={"Bucket": b, "Key": "c"},
                   CopySourceSSECustomerAlgorithm="AES256", CopySourceSSECustomerKey=key)
    assert s3.get_object(Bucket=b, Key="c-to-plain")["Body"].read() == c_phrase
    assert error_code(s3.copy_object, Bucket=b, Key="x", CopySource={"Bucket": b, "Key": "c"}) in (
        "InvalidRequest", "400")
    s3.copy_object(Bucket=b, Key="plain-to-c", CopySource={"Bucket": b, "Key": "s3"}, **wrong)
    assert s3.get_object(Bucket=b, Key="plain-to-c", **wrong)["Body"].read() == s3_phrase
    # Multipart: every part with the upload's encryption.
    up = s3.create_multipart_upload(Bucket=b, Key="mp", **ck)
    parts = [data(93, 5 * MiB), data(94, 12345)]
    etags = []
    for n, d in enumerate(parts):
        etags.append(s3.upload_part(Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=n + 1,
                                    Body=d, **ck)["ETag"])
    assert error_code(s3.upload_part, Bucket=b, Key="mp", UploadId=up["UploadId"], PartNumber=3,
                      Body=b"x", **wrong) in ("AccessDenied", "403")
    s3.complete_multipart_upload(Bucket=b, Key="mp", UploadId=up["UploadId"], MultipartUpload={
        "Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]})
    assert s3.get_object(Bucket=b, Key="mp", **ck)["Body"].read() == b"".join(parts)
    assert s3.get_object(Bucket=b, Key="mp", PartNumber=2, **ck)["Body"].read() == parts[1]
    # Bucket default encryption: objects that name none get SSE-S3.
    assert error_code(s3.get_bucket_encryption, Bucket=b) == "ServerSideEncryptionConfigurationNotFoundError"
    aes = {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
    kms = {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]}
    assert error_code(s3.put_bucket_encryption, Bucket=b,
                      ServerSideEncryptionConfiguration=kms) in ("NotImplemented", "501")
    s3.put_bucket_encryption(Bucket=b, ServerSideEncryptionConfiguration=aes)
    got = s3.get_bucket_encryption(Bucket=b)["ServerSideEncryptionConfiguration"]["Rules"]
    assert got[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256", got
    default_phrase = b"basalt default-sse phrase 2d6f " * 2000
    out = s3.put_object(Bucket=b, Key="default", Body=default_phrase)
    assert out["ServerSideEncryption"] == "AES256", out
    assert not on_disk(default_phrase[:200]), "default encryption encrypts at rest"
    assert s3.get_object(Bucket=b, Key="default")["Body"].read() == default_phrase
    s3.delete_bucket_encryption(Bucket=b)
    assert "ServerSideEncryption" not in s3.put_object(Bucket=b, Key="after", Body=b"plain again")
    for k in ("plain", "s3", "c", "c-to-plain", "plain-to-c", "mp", "default", "after"):
        s3.delete_object(Bucket=b, Key=k)
    s3.delete_bucket(Bucket=b)


def object_lock():
    step("object lock: retention (GOVERNANCE, COMPLIANCE), legal hold, default retention")
    import datetime

    b = "worm"
    s3.create_bucket(Bucket=b, ObjectLockEnabledForBucket=True)
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    assert error_code(s3.put_bucket_versioning, Bucket=b,
                      VersioningConfiguration={"Status": "Suspended"}) == "InvalidBucketState"
    conf = s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]
    assert conf["ObjectLockEnabled"] == "Enabled" and "Rule" not in conf, conf
    s3.put_object_lock_configuration(Bucket=b, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}})
    rule = s3.get_object_lock_configuration(Bucket=b)["ObjectLockConfiguration"]["Rule"]
    assert rule["DefaultRetention"] == {"Mode": "GOVERNANCE", "Days": 1}, rule
    # The default retention: GOVERNANCE, removable only with the owner's bypass.
    g = s3.put_object(Bucket=b, Key="g", Body=b"governed")["VersionId"]
    head = s3.head_object(Bucket=b, Key="g")
    assert head["ObjectLockMode"] == "GOVERNANCE", head
    assert error_code(s3.delete_object, Bucket=b, Key="g", VersionId=g) in ("AccessDenied", "403")
    marker = s3.delete_object(Bucket=b, Key="g")
    assert marker["DeleteMarker"] is True, "a delete marker hides a locked object"
    assert s3.get_object(Bucket=b, Key="g", VersionId=g)["Body"].read() == b"governed"
    s3.delete_object(Bucket=b, Key="g", VersionId=g, BypassGovernanceRetention=True)
    s3.delete_object(Bucket=b, Key="g", VersionId=marker["VersionId"])
    # COMPLIANCE: nobody removes or shortens it until it ends; it can be extended.
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=4)
    c = s3.put_object(Bucket=b, Key="c", Body=b"complied", ObjectLockMode="COMPLIANCE",
                      ObjectLockRetainUntilDate=soon)["VersionId"]
    for bypass in (False, True):
        assert error_code(s3.delete_object, Bucket=b, Key="c", VersionId=c,
                          BypassGovernanceRetention=bypass) in ("AccessDenied", "403")
    shorter = soon - datetime.timedelta(seconds=2)
    assert error_code(s3.put_object_retention, Bucket=b, Key="c", VersionId=c, BypassGovernanceRetention=True,
                      Retention={"Mode": "COMPLIANCE", "RetainUntilDate": shorter}) in ("AccessDenied", "403")
    later = soon + datetime.timedelta(seconds=1)
    s3.put_object_retention(Bucket=b, Key="c", VersionId=c,
                            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": later})
    got = s3.get_object_retention(Bucket=b, Key="c", VersionId=c)["Retention"]
    assert got["Mode"] == "COMPLIANCE" and abs((got["RetainUntilDate"] - later).total_seconds()) < 1, got
    assert error_code(s3.put_object, Bucket=b, Key="past", Body=b"x", ObjectLockMode="COMPLIANCE",
                      ObjectLockRetainUntilDate=soon - datetime.timedelta(days=1)) == "InvalidArgument"
    # Legal hold: blocks removal whatever the retention, until it is lifted.
    h = s3.put_object(Bucket=b, Key="h", Body=b"held", ObjectLockLegalHoldStatus="ON")["VersionId"]
    assert s3.get_object_legal_hold(Bucket=b, Key="h")["LegalHold"]["Status"] == "ON"
    assert error_code(s3.delete_object, Bucket=b, Key="h", VersionId=h,
                      BypassGovernanceRetention=True) in ("AccessDenied", "403")
    s3.put_object_legal_hold(Bucket=b, Key="h", VersionId=h, LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=b, Key="h", VersionId=h, BypassGovernanceRetention=True)
    # Once the COMPLIANCE retention ended, the version goes like any other.
    time.sleep(max(0.0, (later - datetime.datetime.now(datetime.timezone.utc)).total_seconds()) + 1.5)
    s3.delete_object(Bucket=b, Key="c", VersionId=c)
    assert all_versions(b) == ([], [])
    s3.delete_bucket(Bucket=b)


def all_versions(bucket, **kw):
    """Every version and delete marker of a bucket, walking ListObjectVersions pages."""
    out, markers, args = [], [], dict(kw)
    for _ in range(10000):
        page = s3.list_object_versions(Bucket=bucket, **args)
        out += [(v["Key"], v["VersionId"], v["IsLatest"]) for v in page.get("Versions", [])]
        markers += [(m["Key"], m["VersionId"], m["IsLatest"]) for m in page.get("DeleteMarkers", [])]
        if not page["IsTruncated"]:
            return out, markers
        args["KeyMarker"] = page["NextKeyMarker"]
        if page.get("NextVersionIdMarker"):
            args["VersionIdMarker"] = page["NextVersionIdMarker"]
        else:
            args.pop("VersionIdMarker", None)
    raise AssertionError("ListObjectVersions never ended")


def versioning():
    step("versioning: versions, delete markers, listing, copies, multipart, suspension")
    b = "versioned"
    s3.create_bucket(Bucket=b)
    assert "Status" not in s3.get_bucket_versioning(Bucket=b)
    s3.put_object(Bucket=b, Key="k", Body=b"before")  # the null version
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    assert s3.get_bucket_versioning(Bucket=b)["Status"] == "Enabled"
    ids = [s3.put_object(Bucket=b, Key="k", Body=f"v{i}".encode())["VersionId"] for i in (1, 2, 3)]
    assert len(set(ids)) == 3 and "null" not in ids, ids
    got = s3.get_object(Bucket=b, Key="k")
    assert got["Body"].read() == b"v3" and got["VersionId"] == ids[2]
    for i, vid in enumerate(ids):
        assert s3.get_object(Bucket=b, Key="k", VersionId=vid)["Body"].read() == f"v{i + 1}".encode()
        assert s3.head_object(Bucket=b, Key="k", VersionId=vid)["ContentLength"] == 2
    assert s3.get_object(Bucket=b, Key="k", VersionId="null")["Body"].read() == b"before"
    versions, markers = all_versions(b)
    assert versions == [("k", ids[2], True), ("k", ids[1], False), ("k", ids[0], False),
                        ("k", "null", False)], versions
    assert markers == []
    # A delete without a version id makes a delete marker: the key is hidden, not gone.
    d = s3.delete_object(Bucket=b, Key="k")
    assert d["DeleteMarker"] is True and d["VersionId"] not in ids, d
    assert error_code(s3.get_object, Bucket=b, Key="k") == "NoSuchKey"
    assert error_code(s3.head_object, Bucket=b, Key="k") == "404"
    assert "k" not in [o["Key"] for o in s3.list_objects_v2(Bucket=b).get("Contents", [])]
    assert error_code(s3.get_object, Bucket=b, Key="k", VersionId=d["VersionId"]) in (
        "MethodNotAllowed", "405",
    )
    assert s3.get_object(Bucket=b, Key="k", VersionId=ids[2])["Body"].read() == b"v3"
    versions, markers = all_versions(b)
    assert markers == [("k", d["VersionId"], True)] and len(versions) == 4, (versions, markers)
    # If-None-Match: * writes over a delete marker (there is no object).
    n = s3.put_object(Bucket=b, Key="k", Body=b"v4", IfNoneMatch="*")["VersionId"]
    s3.delete_object(Bucket=b, Key="k", VersionId=n)
    # Removing the delete marker brings the key back; removing a version frees it.
    r = s3.delete_object(Bucket=b, Key="k", VersionId=d["VersionId"])
    assert r.get("DeleteMarker") is True and r["VersionId"] == d["VersionId"], r
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"v3"
    s3.delete_object(Bucket=b, Key="k", VersionId=ids[1])
    assert error_code(s3.get_object, Bucket=b, Key="k", VersionId=ids[1]) in ("NoSuchVersion", "404")
    s3.delete_object(Bucket=b, Key="k", VersionId="0" * 28)  # no such version: nothing to do
    # Copies from a version; restoring an old version onto its own key.
    c = s3.copy_object(Bucket=b, Key="k2", CopySource={"Bucket": b, "Key": "k", "VersionId": ids[0]})
    assert c["CopySourceVersionId"] == ids[0] and c["VersionId"], c
    assert s3.get_object(Bucket=b, Key="k2")["Body"].read() == b"v1"
    s3.copy_object(Bucket=b, Key="k", CopySource={"Bucket": b, "Key": "k", "VersionId": "null"})
    assert s3.get_object(Bucket=b, Key="k")["Body"].read() == b"before"
    assert s3.get_object(Bucket=b, Key="k", VersionId="null")["Body"].read() == b"before"
    # Multipart uploads make versions too.
    up = s3.create_multipart_upload(Bucket=b, Key="k")
    part = data(77, 5 * MiB)
    e = s3.upload_part(Bucket=b, Key="k", UploadId=up["UploadId"], PartNumber=1, Body=part)["ETag"]
    done = s3.complete_multipart_upload(
        Bucket=b, Key="k", UploadId=up["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e}]},
    )
    assert done["VersionId"] and s3.get_object(Bucket=b, Key="k")["Body"].read() == part
    # Paging through versions one at a time gives the same list, in order.
    for i in range(3):
        s3.put_object(Bucket=b, Key=f"p/{i}", Body=b"x")
    s3.delete_object(Bucket=b, Key="p/1")
    whole, whole_markers = all_versions(b)
    paged, paged_markers = all_versions(b, MaxKeys=1)
    assert (paged, paged_markers) == (whole, whole_markers), (paged, whole)
    # A prefix whose keys are all deleted is no common prefix of ListObjects.
    s3.put_object(Bucket=b, Key="gone/a", Body=b"x")
    s3.delete_object(Bucket=b, Key="gone/a")
    page = s3.list_objects_v2(Bucket=b, Delimiter="/")
    assert [p["Prefix"] for p in page.get("CommonPrefixes", [])] == ["p/"], page
    assert "gone/" in [p["Prefix"] for p in s3.list_object_versions(Bucket=b, Delimiter="/")
                       .get("CommonPrefixes", [])]
    # Suspended: writes make the null version, replacing the previous null version.
    s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Suspended"})
    before = len(all_versions(b, Prefix="k2")[0])
    for body in (b"s1", b"s2"):
        assert s3.put_object(Bucket=b, Key="k2", Body=body)["VersionId"] == "null"
    after = [v for v in all_versions(b, Prefix="k2")[0]]
    assert len(after) == before + 1 and after[0] == ("k2", "null", True), after
    assert s3.get_object(Bucket=b, Key="k2")["Body"].read() == b"s2"
    assert error_code(
        s3.put_bucket_versioning, Bucket=b, VersioningConfiguration={"Status": "Off"}
    ) == "MalformedXML"
    # A bucket with versions is not empty; removing every version empties it.
    assert error_code(s3.delete_bucket, Bucket=b) == "BucketNotEmpty"
    versions, markers = all_versions(b)
    for key, vid, _ in versions + markers:
        s3.delete_object(Bucket=b, Key=key, VersionId=vid)
    assert all_versions(b) == ([], [])
    s3.delete_bucket(Bucket=b)


def policies(bob):
    step("bucket policies: anonymous and cross-user access, conditions, public access block")
    import json

    anon = boto3.client(
        "s3", endpoint_url=ENDPOINT, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, signature_version=botocore.UNSIGNED,
                      retries={"max_attempts": 1}),
    )
    b = "shared"
    s3.create_bucket(Bucket=b)
    for k in ("public/a.txt", "private/b.txt", "keep/c.txt", "lan/d.txt"):
        s3.put_object(Bucket=b, Key=k, Body=k.encode())
    denied = ("AccessDenied", "403")
    assert error_code(anon.get_object, Bucket=b, Key="public/a.txt") in denied
    assert error_code(s3.get_bucket_policy, Bucket=b) == "NoSuchBucketPolicy"
    arn = f"arn:aws:s3:::{b}"
    policy = {"Version": "2012-10-17", "Statement": [
        {"Sid": "PublicRead", "Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
         "Resource": f"{arn}/public/*"},
        {"Effect": "Allow", "Principal": {"AWS": "bob"}, "Action": ["s3:PutObject", "s3:GetObject"],
         "Resource": f"{arn}/bob/*"},
        {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::000000000000:user/bob"},
         "Action": "s3:ListBucket", "Resource": arn,
         "Condition": {"StringLike": {"s3:prefix": "bob/*"}}},
        {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": f"{arn}/keep/*"},
        {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": f"{arn}/lan/*",
         "Condition": {"IpAddress": {"aws:SourceIp": ["127.0.0.0/8", "::1/128"]}}},
    ]}
    assert error_code(bob.put_bucket_policy, Bucket=b, Policy=json.dumps(policy)) in denied
    s3.put_bucket_policy(Bucket=b, Policy=json.dumps(policy))
    assert json.loads(s3.get_bucket_policy(Bucket=b)["Policy"]) == policy
    assert s3.get_bucket_policy_status(Bucket=b)["PolicyStatus"]["IsPublic"] is True
    # Anonymous: what the policy allows, nothing else.
    assert anon.get_object(Bucket=b, Key="public/a.txt")["Body"].read() == b"public/a.txt"
    assert anon.get_object(Bucket=b, Key="lan/d.txt")["Body"].read() == b"lan/d.txt"
    for fn, kw in (
        (anon.get_object, {"Key": "private/b.txt"}),
        (anon.put_object, {"Key": "public/new", "Body": b"x"}),
        (anon.list_objects_v2, {}),
        (anon.delete_object, {"Key": "public/a.txt"}),
    ):
        assert error_code(fn, Bucket=b, **kw) in denied, (fn.__name__, kw)
    assert error_code(anon.list_buckets) in denied
    assert error_code(anon.create_bucket, Bucket="anon-bucket") in denied
    # Another user: their prefix, listed only under it.
    bob.put_object(Bucket=b, Key="bob/notes", Body=b"bob's notes")
    assert s3.get_object(Bucket=b, Key="bob/notes")["Body"].read() == b"bob's notes"
    assert [o["Key"] for o in bob.list_objects_v2(Bucket=b, Prefix="bob/")["Contents"]] == ["bob/notes"]
    assert error_code(bob.list_objects_v2, Bucket=b) in denied
    assert error_code(bob.get_object, Bucket=b, Key="private/b.txt") in denied
    assert error_code(bob.put_object, Bucket=b, Key="private/x", Body=b"x") in denied
    assert error_code(bob.get_bucket_policy, Bucket=b) in denied
    # A Deny binds the owner too.
    assert error_code(s3.delete_object, Bucket=b, Key="keep/c.txt") in denied
    out = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": "keep/c.txt"}, {"Key": "lan/d.txt"}]})
    assert [e["Key"] for e in out.get("Errors", [])] == ["keep/c.txt"], out
    assert [d["Key"] for d in out["Deleted"]] == ["lan/d.txt"], out
    # Public access block: public statements stop counting, public policies are refused.
    s3.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"RestrictPublicBuckets": True})
    assert error_code(anon.get_object, Bucket=b, Key="public/a.txt") in denied
    assert bob.get_object(Bucket=b, Key="bob/notes")["Body"].read() == b"bob's notes"
    s3.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"BlockPublicPolicy": True})
    assert s3.get_public_access_block(Bucket=b)["PublicAccessBlockConfiguration"]["BlockPublicPolicy"]
    assert error_code(s3.put_bucket_policy, Bucket=b, Policy=json.dumps(policy)) in denied
    s3.delete_public_access_block(Bucket=b)
    assert anon.get_object(Bucket=b, Key="public/a.txt")["Body"].read() == b"public/a.txt"
    # Outside the supported subset: refused by name, never ignored.
    bad = {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                          "Resource": f"{arn}/*", "Condition": {"Bool": {"aws:SecureTransport": "true"}}}]}
    assert error_code(s3.put_bucket_policy, Bucket=b, Policy=json.dumps(bad)) in ("NotImplemented", "501")
    bad = {"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                          "Resource": "arn:aws:s3:::elsewhere/*"}]}
    assert error_code(s3.put_bucket_policy, Bucket=b, Policy=json.dumps(bad)) == "MalformedPolicy"
    assert error_code(s3.put_bucket_policy, Bucket=b, Policy="{not json") == "MalformedPolicy"
    rules = s3.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}], rules
    s3.delete_bucket_policy(Bucket=b)
    assert error_code(anon.get_object, Bucket=b, Key="public/a.txt") in denied
    s3.delete_object(Bucket=b, Key="keep/c.txt")  # no policy, no Deny
    for k in ("public/a.txt", "private/b.txt", "bob/notes"):
        s3.delete_object(Bucket=b, Key=k)
    s3.delete_bucket(Bucket=b)
    acl_grants(bob, anon)


def acl_grants(bob, anon):
    step("ACL grants: ObjectWriter and BucketOwnerPreferred buckets, canned ACLs, grants")
    denied = ("AccessDenied", "403")
    all_users = "http://acs.amazonaws.com/groups/global/AllUsers"
    b = "grants"
    admin = s3.get_bucket_acl(Bucket="admins")["Owner"]["ID"]

    def grants_of(acl):
        return sorted((g["Grantee"].get("ID") or g["Grantee"]["URI"], g["Permission"]) for g in acl["Grants"])

    s3.create_bucket(Bucket=b, ObjectOwnership="ObjectWriter", ACL="public-read")
    assert grants_of(s3.get_bucket_acl(Bucket=b)) == [(admin, "FULL_CONTROL"), (all_users, "READ")]
    rules = s3.get_bucket_ownership_controls(Bucket=b)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "ObjectWriter"}], rules
    s3.put_object(Bucket=b, Key="pub", Body=b"everyone", ACL="public-read")
    s3.put_object(Bucket=b, Key="priv", Body=b"admin only")
    s3.put_object(Bucket=b, Key="signed", Body=b"signed only", ACL="authenticated-read")
    # The bucket's READ lets anyone list; each object's ACL decides who reads it.
    assert [o["Key"] for o in anon.list_objects_v2(Bucket=b)["Contents"]] == ["priv", "pub", "signed"]
    assert anon.get_object(Bucket=b, Key="pub")["Body"].read() == b"everyone"
    assert error_code(anon.get_object, Bucket=b, Key="priv") in denied
    assert error_code(bob.get_object, Bucket=b, Key="priv") in denied
    assert error_code(anon.get_object, Bucket=b, Key="signed") in denied
    assert bob.get_object(Bucket=b, Key="signed")["Body"].read() == b"signed only"
    assert error_code(anon.put_object, Bucket=b, Key="x", Body=b"x") in denied
    assert error_code(bob.get_bucket_acl, Bucket=b) in denied
    # Grants by header and by document, per permission.
    s3.put_object_acl(Bucket=b, Key="priv", GrantRead='id="bob"')
    assert bob.get_object(Bucket=b, Key="priv")["Body"].read() == b"admin only"
    assert error_code(bob.get_object_acl, Bucket=b, Key="priv") in denied
    assert error_code(bob.put_object_acl, Bucket=b, Key="priv", ACL="public-read") in denied
    doc = {"Owner": {"ID": admin}, "Grants": [
        {"Grantee": {"Type": "CanonicalUser", "ID": "bob"}, "Permission": "READ"},
        {"Grantee": {"Type": "CanonicalUser", "ID": "bob"}, "Permission": "READ_ACP"},
    ]}
    s3.put_object_acl(Bucket=b, Key="priv", AccessControlPolicy=doc)
    assert grants_of(bob.get_object_acl(Bucket=b, Key="priv")) == [
        (admin, "FULL_CONTROL"), ("bob", "READ"), ("bob", "READ_ACP")]
    for bad, code in (
        ({"Owner": {"ID": "bob"}, "Grants": []}, "AccessDenied"),
        ({"Owner": {"ID": admin}, "Grants": [{"Grantee": {"Type": "AmazonCustomerByEmail",
          "EmailAddress": "bob@example.com"}, "Permission": "READ"}]}, "NotImplemented"),
        ({"Owner": {"ID": admin}, "Grants": [{"Grantee": {"Type": "Group",
          "URI": "http://acs.amazonaws.com/groups/s3/LogDelivery"}, "Permission": "WRITE"}]},
         "NotImplemented"),
    ):
        got = error_code(s3.put_object_acl, Bucket=b, Key="priv", AccessControlPolicy=bad)
        assert got == code, (bad, got)
    # Bob may write once the bucket grants him WRITE; under ObjectWriter he owns what he
    # writes, and the bucket's owner reads it only when Bob's ACL lets them.
    s3.put_bucket_acl(Bucket=b, GrantWrite='id="bob"', GrantRead=f'uri="{all_users}"')
    bob.put_object(Bucket=b, Key="bobs", Body=b"bob's own")
    assert error_code(s3.get_object, Bucket=b, Key="bobs") in denied
    assert error_code(s3.get_object_acl, Bucket=b, Key="bobs") in denied
    assert bob.get_object_acl(Bucket=b, Key="bobs")["Owner"]["ID"] == "bob"
    bob.put_object(Bucket=b, Key="shared", Body=b"for the owner", ACL="bucket-owner-read")
    assert s3.get_object(Bucket=b, Key="shared")["Body"].read() == b"for the owner"
    assert error_code(s3.get_object_acl, Bucket=b, Key="shared") in denied
    bob.put_object_acl(Bucket=b, Key="bobs", ACL="bucket-owner-full-control")
    assert s3.get_object(Bucket=b, Key="bobs")["Body"].read() == b"bob's own"
    assert grants_of(s3.get_object_acl(Bucket=b, Key="bobs")) == [
        (admin, "FULL_CONTROL"), ("bob", "FULL_CONTROL")]
    # A multipart upload and a copy take their ACL and owner from their own request.
    up = bob.create_multipart_upload(Bucket=b, Key="parts", ACL="public-read")["UploadId"]
    etag = bob.upload_part(Bucket=b, Key="parts", UploadId=up, PartNumber=1, Body=b"p" * 100)["ETag"]
    bob.complete_multipart_upload(Bucket=b, Key="parts", UploadId=up,
                                  MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert anon.get_object(Bucket=b, Key="parts")["Body"].read() == b"p" * 100
    assert error_code(s3.get_object_acl, Bucket=b, Key="parts") in denied
    s3.put_object(Bucket=b, Key="nobob", Body=b"not for bob")
    assert error_code(bob.copy_object, Bucket=b, Key="stolen", CopySource=f"{b}/nobob") in denied
    bob.copy_object(Bucket=b, Key="copied", CopySource=f"{b}/pub")
    assert bob.get_object(Bucket=b, Key="copied")["Body"].read() == b"everyone"
    assert error_code(anon.get_object, Bucket=b, Key="copied") in denied
    assert error_code(s3.get_object, Bucket=b, Key="copied") in denied
    # BucketOwnerPreferred: bucket-owner-full-control hands the object to the bucket's owner.
    s3.put_bucket_ownership_controls(
        Bucket=b, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerPreferred"}]})
    bob.put_object(Bucket=b, Key="handed", Body=b"handed over", ACL="bucket-owner-full-control")
    assert s3.get_object_acl(Bucket=b, Key="handed")["Owner"]["ID"] == admin
    bob.put_object(Bucket=b, Key="kept", Body=b"kept")
    assert bob.get_object_acl(Bucket=b, Key="kept")["Owner"]["ID"] == "bob"
    # The public access block acts on ACLs.
    s3.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"IgnorePublicAcls": True})
    assert error_code(anon.get_object, Bucket=b, Key="pub") in denied
    assert error_code(anon.list_objects_v2, Bucket=b) in denied
    assert bob.get_object(Bucket=b, Key="priv")["Body"].read() == b"admin only"
    s3.put_public_access_block(Bucket=b, PublicAccessBlockConfiguration={"BlockPublicAcls": True})
    assert anon.get_object(Bucket=b, Key="pub")["Body"].read() == b"everyone"
    assert error_code(s3.put_object, Bucket=b, Key="p2", Body=b"x", ACL="public-read") in denied
    assert error_code(s3.put_object_acl, Bucket=b, Key="priv", ACL="public-read") in denied
    assert error_code(s3.put_bucket_acl, Bucket=b, ACL="public-read-write") in denied
    s3.delete_public_access_block(Bucket=b)
    # Back to BucketOwnerEnforced: only with a private bucket ACL; then ACLs stop acting and
    # every object is the bucket owner's.
    enforced = {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert error_code(s3.put_bucket_ownership_controls, Bucket=b, OwnershipControls=enforced) == (
        "InvalidBucketAclWithObjectOwnership")
    s3.put_bucket_acl(Bucket=b, ACL="private")
    s3.put_bucket_ownership_controls(Bucket=b, OwnershipControls=enforced)
    assert error_code(anon.get_object, Bucket=b, Key="pub") in denied
    assert error_code(bob.get_object, Bucket=b, Key="priv") in denied
    assert s3.get_object(Bucket=b, Key="kept")["Body"].read() == b"kept"
    assert s3.get_object_acl(Bucket=b, Key="kept")["Owner"]["ID"] == admin
    s3.delete_bucket_ownership_controls(Bucket=b)
    assert error_code(s3.get_bucket_ownership_controls, Bucket=b) == "OwnershipControlsNotFoundError"
    for k in ("pub", "priv", "signed", "bobs", "shared", "handed", "kept", "parts", "nobob", "copied"):
        s3.delete_object(Bucket=b, Key=k)
    s3.delete_bucket(Bucket=b)


def users():
    step("several users: keys made through `basalt s3 key`, each sees only their buckets")
    import subprocess

    basalt = [os.environ["BASALT_BIN"], "s3", "key"]
    control = ["--control", os.environ["BASALT_CONTROL"]]
    out = subprocess.run(
        basalt + ["create", "--user", "bob"] + control, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out
    fields = dict(
        line.split(":", 1) for line in out.stdout.splitlines() if line.startswith(("access key", "secret key"))
    )
    bob_key, bob_secret = fields["access key"].strip(), fields["secret key"].strip()
    listed = subprocess.run(basalt + ["ls"] + control, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and bob_key in listed.stdout and " bob " in listed.stdout, listed
    bad = subprocess.run(
        basalt + ["create", "--user", "no spaces"] + control, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode != 0 and "invalid user name" in bad.stderr, bad
    bob = boto3.client(
        "s3", endpoint_url=ENDPOINT, region_name="us-east-1",
        aws_access_key_id=bob_key, aws_secret_access_key=bob_secret,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    s3.create_bucket(Bucket="admins")
    s3.put_object(Bucket="admins", Key="secret", Body=b"admin's")
    bob.create_bucket(Bucket="bobs")
    bob.put_object(Bucket="bobs", Key="mine", Body=b"bob's")
    assert [b["Name"] for b in bob.list_buckets()["Buckets"]] == ["bobs"]
    assert "bobs" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    for fn, kw in (
        (bob.get_object, {"Bucket": "admins", "Key": "secret"}),
        (bob.put_object, {"Bucket": "admins", "Key": "x", "Body": b"x"}),
        (bob.delete_object, {"Bucket": "admins", "Key": "secret"}),
        (bob.list_objects_v2, {"Bucket": "admins"}),
        (s3.get_object, {"Bucket": "bobs", "Key": "mine"}),
        (s3.delete_bucket, {"Bucket": "bobs"}),
    ):
        assert error_code(fn, **kw) in ("AccessDenied", "403"), (fn.__name__, kw)
    assert error_code(bob.create_bucket, Bucket="admins") == "BucketAlreadyExists"
    assert s3.get_object(Bucket="admins", Key="secret")["Body"].read() == b"admin's"
    policies(bob)
    bob.delete_object(Bucket="bobs", Key="mine")
    bob.delete_bucket(Bucket="bobs")
    s3.delete_object(Bucket="admins", Key="secret")
    s3.delete_bucket(Bucket="admins")
    # A removed key stops working (gateways cache keys for 5 s).
    out = subprocess.run(basalt + ["rm", bob_key] + control, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and f"removed access key {bob_key}" in out.stdout, out
    deadline = time.time() + 30
    while True:
        try:
            bob.list_buckets()
        except ClientError as e:
            assert e.response["Error"]["Code"] == "InvalidAccessKeyId", e.response
            break
        assert time.time() < deadline, "a removed key still works after 30 s"
        time.sleep(0.5)


GROUPS = [
    buckets,
    objects,
    ranges,
    conditionals,
    listing,
    multipart,
    copies,
    never_silently_wrong,
    versioning,
    tags_and_attributes,
    cors,
    encryption,
    object_lock,
    users,
    presigned_and_auth,
    deletes,
]


def main():
    """Runs every group, each as its own result; 0 if all passed, 1 otherwise."""
    started = time.time()
    results = []
    for group in GROUPS:
        t = time.time()
        try:
            group()
            results.append((group.__name__, None, time.time() - t))
        except Exception:  # reported here and in the summary; the next group runs
            tb = traceback.format_exc()
            print(f"FAILED group {group.__name__}:\n{tb}", flush=True)
            results.append((group.__name__, tb.strip().splitlines()[-1], time.time() - t))
    print("== results", flush=True)
    for name, failure, secs in results:
        print(f"group {name}: {'ok' if failure is None else 'FAILED: ' + failure} ({secs:.1f} s)")
    failed = [name for name, failure, _ in results if failure is not None]
    if failed:
        print(f"boto3 suite: {len(failed)} of {len(results)} groups failed: {', '.join(failed)}", flush=True)
        return 1
    print(f"boto3 suite passed in {time.time() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
