"""Half an upload, then hold the connection open (the test kills the gateway meanwhile).

Usage: interrupted_upload.py start|check ENDPOINT
  start: create bucket "crash", PUT "crash/big" declaring 48 MiB, send 24 MiB, print SENT,
         then wait (the gateway dies under it).
  check: the object is not visible and the bucket lists empty.
"""

import http.client
import os
import sys
import time
import urllib.parse

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

MiB = 1 << 20
mode, endpoint = sys.argv[1], sys.argv[2]
s3 = boto3.client(
    "s3",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
    aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
    config=Config(s3={"addressing_style": "path"}, signature_version="s3v4",
                  retries={"max_attempts": 1}),
)

if mode == "start":
    s3.create_bucket(Bucket="crash")
    url = s3.generate_presigned_url("put_object", Params={"Bucket": "crash", "Key": "big"}, ExpiresIn=600)
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.netloc, timeout=600)
    conn.putrequest("PUT", f"{u.path}?{u.query}")
    conn.putheader("Content-Length", str(48 * MiB))
    conn.endheaders()
    block = os.urandom(MiB)
    for _ in range(24):
        conn.send(block)
    print("SENT", flush=True)
    time.sleep(600)
else:
    try:
        s3.head_object(Bucket="crash", Key="big")
        raise SystemExit("the interrupted upload is visible")
    except ClientError as e:
        assert e.response["Error"]["Code"] in ("404", "NoSuchKey"), e.response
    assert s3.list_objects_v2(Bucket="crash")["KeyCount"] == 0
    print("NOT VISIBLE", flush=True)
