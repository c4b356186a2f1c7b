"""Objects for the objvol tests, written with boto3 to a Basalt S3 gateway.

Usage: fixture.py put BUCKET OUT.json WIDE   (the bucket, its objects, their sha256 in OUT)
       fixture.py overwrite BUCKET KEY [SIZE] (new bytes under KEY; SIZE of them if given)
       fixture.py large BUCKET OUT.json N GIB  (N small keys in one prefix and one object of
                                                GIB GiB; sha256 of a sample and of the large)
Environment: S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY.
"""

import hashlib
import json
import os
import sys

import boto3
from botocore.config import Config

s3 = boto3.client(
    "s3",
    endpoint_url=os.environ["S3_ENDPOINT"],
    region_name="us-east-1",
    config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 2}),
)


def body(seed, size):
    block = hashlib.sha256(f"seed {seed}".encode()).digest()
    return (block * (size // 32 + 1))[:size]


mode, bucket = sys.argv[1], sys.argv[2]
if mode == "put":
    out, wide = sys.argv[3], int(sys.argv[4])
    s3.create_bucket(Bucket=bucket)
    objects = {}

    def put(key, data):
        s3.put_object(Bucket=bucket, Key=key, Body=data)
        objects[key] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    # Nested prefixes, empty objects, exact and odd 4 KiB multiples, a large object.
    for i, size in enumerate([0, 1, 4095, 4096, 4097, 8192, 100_000, 9 << 20]):
        put(f"nested/deeper/f{i}.bin", body(i, size))
    put("nested/top.txt", b"top of nested\n")
    # Names sorting before '.', with spaces, UTF-8, a 255-byte component.
    for name in ["!bang", "-dash", "#hash", "with space.txt", "ünïcødé/файл.txt", "a-b", "a.c", "a/x"]:
        put(name, body(len(name), 300))
    put("long/" + "n" * 255, b"long name")
    # A directory marker and a prefix of many keys (several directory blocks).
    s3.put_object(Bucket=bucket, Key="markers/", Body=b"")  # a directory, not a file
    for i in range(wide):
        put(f"wide/img-{i:06d}.jpg", body(1000 + i, 500 + (i * 37) % 20_000))
    # Keys that cannot be paths: skipped and reported.
    skipped = ["bad//empty", "dot/./x", "dir-with-data/", "long/" + "l" * 256]
    for key in skipped:
        s3.put_object(Bucket=bucket, Key=key, Body=b"cannot be a path")
    json.dump({"objects": objects, "skipped": skipped}, open(out, "w"))
    print(f"PUT {len(objects) + len(skipped)} objects")
elif mode == "overwrite":
    key = sys.argv[3]
    data = b"overwritten after the build\n"
    if len(sys.argv) > 4:
        data = body("overwritten", int(sys.argv[4]))
    s3.put_object(Bucket=bucket, Key=key, Body=data)
    print("OVERWRITTEN")
elif mode == "large":
    import concurrent.futures
    import io

    out, n, gib = sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    s3.create_bucket(Bucket=bucket)

    def put_flat(i):
        s3.put_object(Bucket=bucket, Key=f"flat/k-{i:07d}", Body=body(i, 64))

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        for done, _ in enumerate(pool.map(put_flat, range(n))):
            if done % 20000 == 0:
                print(f"{done} of {n} small objects", flush=True)
    sample = {f"flat/k-{i:07d}": hashlib.sha256(body(i, 64)).hexdigest() for i in range(0, n, max(1, n // 100))}

    class Pattern(io.RawIOBase):
        """`size` bytes of a repeating 1 MiB pattern, hashed as they are read."""

        def __init__(self, size):
            self.left, self.pos, self.sha = size, 0, hashlib.sha256()
            self.block = body("large", 1 << 20)

        def readable(self):
            return True

        def readinto(self, b):
            k = min(len(b), self.left, len(self.block) - self.pos % len(self.block))
            chunk = self.block[self.pos % len(self.block):][:k]
            b[:k] = chunk
            self.sha.update(chunk)
            self.left -= k
            self.pos += k
            return k

    size = int(gib * (1 << 30))
    src = Pattern(size)
    from boto3.s3.transfer import TransferConfig

    s3.upload_fileobj(
        io.BufferedReader(src, 8 << 20),
        bucket,
        "big/blob.bin",
        Config=TransferConfig(multipart_chunksize=64 << 20, max_concurrency=4),
    )
    json.dump({"sample": sample, "large": {"key": "big/blob.bin", "size": size, "sha256": src.sha.hexdigest()}}, open(out, "w"))
    print(f"PUT {n} small objects and {size} bytes")
else:
    sys.exit(f"unknown mode {mode}")
