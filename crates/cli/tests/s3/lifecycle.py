"""Lifecycle rules applied by the gateway's worker, against `basalt up --s3-lifecycle-day 2
--s3-lifecycle-every 1` (a lifecycle day of 2 s, a pass every second). Run by
crates/cli/tests/s3_clients.rs; prints "lifecycle passed" at the end.
"""

import os
import sys
import time

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["S3_ENDPOINT"],
    region_name="us-east-1",
    aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
    aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
)


def code(fn, **kw):
    try:
        fn(**kw)
    except ClientError as e:
        return e.response["Error"]["Code"]
    raise AssertionError(f"{fn.__name__} succeeded")


def exists(bucket, key):
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except ClientError as e:
        assert e.response["Error"]["Code"] == "404", e.response
        return False


def eventually(what, cond, timeout=40):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.5)


def rule(rid, days=None, **kw):
    r = {"ID": rid, "Status": kw.pop("Status", "Enabled"), "Filter": kw.pop("Filter", {"Prefix": ""})}
    if days:
        r["Expiration"] = {"Days": days}
    r.update(kw)
    return r


def main():
    started = time.time()
    b = "life-plain"
    s3.create_bucket(Bucket=b)
    for k in ("tmp/a", "tmp/b", "keep/c", "tagged/d", "tagged/e"):
        s3.put_object(Bucket=b, Key=k, Body=k.encode(), Tagging="temp=yes" if k == "tagged/d" else "")
    up = s3.create_multipart_upload(Bucket=b, Key="up/u")["UploadId"]
    s3.upload_part(Bucket=b, Key="up/u", UploadId=up, PartNumber=1, Body=b"part")
    # What is refused, by name.
    bad = {"Rules": [rule("t", 1, Transitions=[{"Days": 1, "StorageClass": "GLACIER"}])]}
    assert code(s3.put_bucket_lifecycle_configuration, Bucket=b, LifecycleConfiguration=bad) in (
        "NotImplemented", "501")
    bad = {"Rules": [rule("none")]}
    assert code(s3.put_bucket_lifecycle_configuration, Bucket=b, LifecycleConfiguration=bad) == "InvalidRequest"
    bad = {"Rules": [rule("same", 1), rule("same", 2)]}
    assert code(s3.put_bucket_lifecycle_configuration, Bucket=b, LifecycleConfiguration=bad) == "InvalidArgument"
    assert code(s3.get_bucket_lifecycle_configuration, Bucket=b) == "NoSuchLifecycleConfiguration"
    config = {"Rules": [
        rule("tmp", 1, Filter={"Prefix": "tmp/"}),
        rule("tagged", 1, Filter={"Tag": {"Key": "temp", "Value": "yes"}}),
        rule("off", 1, Filter={"Prefix": "keep/"}, Status="Disabled"),
        rule("uploads", Filter={"Prefix": "up/"}, AbortIncompleteMultipartUpload={"DaysAfterInitiation": 1}),
    ]}
    s3.put_bucket_lifecycle_configuration(Bucket=b, LifecycleConfiguration=config)
    got = s3.get_bucket_lifecycle_configuration(Bucket=b)["Rules"]
    assert [r["ID"] for r in got] == ["tmp", "tagged", "off", "uploads"], got
    assert got[1]["Filter"] == {"Tag": {"Key": "temp", "Value": "yes"}}, got[1]
    assert got[2]["Status"] == "Disabled" and got[0]["Expiration"] == {"Days": 1}, got
    eventually("tmp/ and tagged objects expire",
               lambda: not any(exists(b, k) for k in ("tmp/a", "tmp/b", "tagged/d")))
    eventually("the upload is aborted",
               lambda: not s3.list_multipart_uploads(Bucket=b).get("Uploads"))
    assert code(s3.upload_part, Bucket=b, Key="up/u", UploadId=up, PartNumber=2, Body=b"x") == "NoSuchUpload"
    time.sleep(3)  # more passes: what no rule covers stays
    assert exists(b, "keep/c") and exists(b, "tagged/e")

    v = "life-versions"
    s3.create_bucket(Bucket=v)
    s3.put_bucket_versioning(Bucket=v, VersioningConfiguration={"Status": "Enabled"})
    config = {"Rules": [
        rule("old", Filter={"Prefix": "k"},
             NoncurrentVersionExpiration={"NoncurrentDays": 1, "NewerNoncurrentVersions": 1}),
        rule("exp", 1, Filter={"Prefix": "exp/"}),
        rule("markers", Filter={"Prefix": "m/"}, Expiration={"ExpiredObjectDeleteMarker": True}),
    ]}
    s3.put_bucket_lifecycle_configuration(Bucket=v, LifecycleConfiguration=config)
    ids = [s3.put_object(Bucket=v, Key="k", Body=f"v{i}".encode())["VersionId"] for i in range(3)]
    s3.put_object(Bucket=v, Key="exp/e", Body=b"expires")
    mid = s3.put_object(Bucket=v, Key="m/x", Body=b"x")["VersionId"]
    s3.delete_object(Bucket=v, Key="m/x")
    s3.delete_object(Bucket=v, Key="m/x", VersionId=mid)  # a lone delete marker is left

    def versions_of(key):
        page = s3.list_object_versions(Bucket=v, Prefix=key)
        return ([x["VersionId"] for x in page.get("Versions", []) if x["Key"] == key],
                [x["VersionId"] for x in page.get("DeleteMarkers", []) if x["Key"] == key])

    eventually("the oldest noncurrent version goes, the newest noncurrent one stays",
               lambda: versions_of("k")[0] == [ids[2], ids[1]])
    eventually("an expired versioned object gets a delete marker",
               lambda: not exists(v, "exp/e") and len(versions_of("exp/e")[1]) == 1)
    assert versions_of("exp/e")[0], "its data stays as a noncurrent version"
    eventually("a lone delete marker goes", lambda: versions_of("m/x") == ([], []))
    assert s3.get_object(Bucket=v, Key="k")["Body"].read() == b"v2"

    s3.delete_bucket_lifecycle(Bucket=b)
    assert code(s3.get_bucket_lifecycle_configuration, Bucket=b) == "NoSuchLifecycleConfiguration"
    for k in ("keep/c", "tagged/e"):
        s3.delete_object(Bucket=b, Key=k)
    s3.delete_bucket(Bucket=b)
    s3.delete_bucket_lifecycle(Bucket=v)
    page = s3.list_object_versions(Bucket=v)
    for x in page.get("Versions", []) + page.get("DeleteMarkers", []):
        s3.delete_object(Bucket=v, Key=x["Key"], VersionId=x["VersionId"])
    s3.delete_bucket(Bucket=v)
    print(f"lifecycle passed in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
