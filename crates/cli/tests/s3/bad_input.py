"""Bad input against a running Basalt S3 gateway: every refusal is a 4xx S3 error (never a
5xx), and the gateway keeps serving well-behaved clients afterwards.

Run by crates/cli/tests/s3_clients.rs against a fresh `basalt up`; reads the endpoint from
S3_ENDPOINT, the key pair from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, and how to count
the objects the OSDs store from BASALT_BIN and BASALT_CONTROL (`basalt status`). Requests are
signed with botocore's SigV4 signer and sent with http.client or a raw socket, so the
gateway sees exactly the bytes written here. The first failed check ends the run with a
traceback and a non-zero exit.
"""

import base64
import hashlib
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.parse
import xml.etree.ElementTree as ET

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ENDPOINT = os.environ["S3_ENDPOINT"]
HOSTPORT = urllib.parse.urlsplit(ENDPOINT).netloc
HOST, PORT = HOSTPORT.rsplit(":", 1)
PORT = int(PORT)
ACCESS = os.environ["AWS_ACCESS_KEY_ID"]
SECRET = os.environ["AWS_SECRET_ACCESS_KEY"]
BUCKET = "bad-input"
MiB = 1 << 20
# Bound on every socket operation, so a gateway that hangs fails the run instead of stalling.
SOCKET_TIMEOUT_S = 30


def osd_objects():
    """How many objects each OSD stores (`basalt status --json`, asked of the OSDs live)."""
    out = subprocess.run(
        [os.environ["BASALT_BIN"], "status", "--json", "--interval", "0",
         "--control", os.environ["BASALT_CONTROL"]],
        capture_output=True,
        check=True,
        timeout=60,
    )
    return [o["stats"]["objects"] for o in json.loads(out.stdout)["osds"]]


def settled_objects():
    """The OSDs' object counts once background reclaims are done (unchanged for 2 s)."""
    deadline = time.monotonic() + 60
    last = osd_objects()
    while True:
        time.sleep(2)
        now = osd_objects()
        if now == last:
            return now
        assert time.monotonic() < deadline, ("object counts never settle", last, now)
        last = now


def step(name):
    print(f"== {name}", flush=True)


def signed(method, path, body=b"", headers=None, access=ACCESS, secret=SECRET, sign_body=True):
    """Headers of a SigV4-signed request for `path` (which may carry a query string)."""
    req = AWSRequest(method=method, url=ENDPOINT + path, data=body, headers=dict(headers or {}))
    if not sign_body:
        # x-amz-content-sha256: UNSIGNED-PAYLOAD, as SDKs send over TLS.
        req.context["client_config"] = types.SimpleNamespace(
            s3={"payload_signing_enabled": False}
        )
    S3SigV4Auth(Credentials(access, secret), "s3", "us-east-1").add_auth(req)
    return dict(req.headers.items())


class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        # By lower-case name (HTTP names are case-insensitive; hyper sends lower case).
        self.headers = {k.lower(): v for k, v in headers}
        self.body = body

    def code(self):
        """The S3 error code of an error document (None if the body is not one)."""
        if not self.body:
            return None
        root = ET.fromstring(self.body)
        assert root.tag == "Error", self.body
        return root.findtext("Code")

    def __repr__(self):
        return f"Reply({self.status}, {self.body[:300]!r})"


def send(method, path, body=b"", headers=None, **sign):
    """Send a signed request on a fresh connection and read the whole reply."""
    h = signed(method, path, body, headers, **sign)
    conn = http.client.HTTPConnection(HOST, PORT, timeout=SOCKET_TIMEOUT_S)
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return Reply(r.status, r.getheaders(), r.read())
    finally:
        conn.close()


def expect_error(reply, status, codes, what):
    """`reply` is the S3 error `status` with a code in `codes`."""
    assert reply.status == status, (what, reply)
    code = reply.code()
    assert code in codes, (what, code, reply)
    print(f"   {what}: {status} {code}", flush=True)


def serving():
    """A normal PUT, GET and DELETE still work (the gateway kept serving); nothing stays."""
    body = os.urandom(1000)
    key = f"alive-{time.monotonic_ns()}-{threading.get_ident()}"
    r = send("PUT", f"/{BUCKET}/{key}", body)
    assert r.status == 200, ("PUT after bad input", r)
    r = send("GET", f"/{BUCKET}/{key}")
    assert (r.status, r.body) == (200, body), ("GET after bad input", r)
    assert send("DELETE", f"/{BUCKET}/{key}").status == 204, key


def object_absent(key):
    r = send("HEAD", f"/{BUCKET}/{urllib.parse.quote(key)}")
    assert r.status == 404, (key, "must not exist", r)
    r = send("GET", f"/{BUCKET}?list-type=2&prefix={urllib.parse.quote(key)}")
    assert r.status == 200, r
    assert b"<Key>" not in r.body, (key, "listed", r.body)


def raw_exchange(data, read_for_s=SOCKET_TIMEOUT_S):
    """Write `data` on a fresh TCP connection and read until the gateway closes it."""
    s = socket.create_connection((HOST, PORT), timeout=read_for_s)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the gateway may refuse before reading everything
        got = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
        return got
    finally:
        s.close()


def setup():
    step("setup")
    r = send("PUT", f"/{BUCKET}")
    assert r.status == 200, r
    serving()


def malformed_xml():
    step("malformed XML bodies")
    r = send("POST", f"/{BUCKET}/mp?uploads")
    assert r.status == 200, r
    upload = ET.fromstring(r.body).findtext("{http://s3.amazonaws.com/doc/2006-03-01/}UploadId")
    assert upload, r
    part = os.urandom(1000)
    r = send("PUT", f"/{BUCKET}/mp?partNumber=1&uploadId={upload}", part)
    assert r.status == 200, r
    etag = r.headers["etag"]
    complete = f"/{BUCKET}/mp?uploadId={upload}"
    bodies = {
        "truncated": b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>",
        "not XML": b"this is not xml at all \x00\xff",
        "wrong root": b"<Hello><Part><PartNumber>1</PartNumber></Part></Hello>",
        "mismatched tags": b"<CompleteMultipartUpload><Part></Prat></CompleteMultipartUpload>",
        "part number not a number": (
            b"<CompleteMultipartUpload><Part><PartNumber>one</PartNumber>"
            + f"<ETag>{etag}</ETag></Part></CompleteMultipartUpload>".encode()
        ),
        "no parts": b"<CompleteMultipartUpload></CompleteMultipartUpload>",
        "empty body": b"",
    }
    for what, body in bodies.items():
        expect_error(
            send("POST", complete, body),
            400,
            ("MalformedXML", "InvalidPart"),
            f"CompleteMultipartUpload, {what}",
        )
    # The upload survived the bad attempts and completes with a well-formed body.
    good = (
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber>"
        f"<ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
    ).encode()
    r = send("POST", complete, good)
    assert r.status == 200 and b"<ETag>" in r.body, r
    r = send("GET", f"/{BUCKET}/mp")
    assert (r.status, r.body) == (200, part), r

    def delete_objects(body):
        md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
        return send("POST", f"/{BUCKET}?delete", body, {"Content-MD5": md5})

    for what, body in {
        "truncated": b"<Delete><Object><Key>mp</Key>",
        "not XML": b"\x00\x01\x02 garbage",
        "object without key": b"<Delete><Object></Object></Delete>",
        "mismatched tags": b"<Delete><Object><Key>mp</Kye></Object></Delete>",
    }.items():
        expect_error(delete_objects(body), 400, ("MalformedXML",), f"DeleteObjects, {what}")
    # S3 itself answers an empty DeleteObjects body with MissingRequestBodyError.
    expect_error(
        delete_objects(b""),
        400,
        ("MissingRequestBodyError", "MalformedXML"),
        "DeleteObjects, empty body",
    )
    # Nothing was deleted by the refused requests.
    assert send("HEAD", f"/{BUCKET}/mp").status == 200
    serving()


def signatures():
    step("signatures and access keys")
    # A correct request, then the same bytes with one signature digit changed.
    h = signed("GET", f"/{BUCKET}?list-type=2")
    auth = h["Authorization"]
    last = auth[-1]
    h["Authorization"] = auth[:-1] + ("0" if last != "0" else "1")
    conn = http.client.HTTPConnection(HOST, PORT, timeout=SOCKET_TIMEOUT_S)
    conn.request("GET", f"/{BUCKET}?list-type=2", headers=h)
    r = conn.getresponse()
    reply = Reply(r.status, r.getheaders(), r.read())
    conn.close()
    expect_error(reply, 403, ("SignatureDoesNotMatch",), "one signature digit changed")
    # A signed request whose query was changed after signing.
    h = signed("GET", f"/{BUCKET}?list-type=2&prefix=a")
    conn = http.client.HTTPConnection(HOST, PORT, timeout=SOCKET_TIMEOUT_S)
    conn.request("GET", f"/{BUCKET}?list-type=2&prefix=b", headers=h)
    r = conn.getresponse()
    reply = Reply(r.status, r.getheaders(), r.read())
    conn.close()
    expect_error(reply, 403, ("SignatureDoesNotMatch",), "query changed after signing")
    expect_error(
        send("GET", "/", secret="x" * 40), 403, ("SignatureDoesNotMatch",), "wrong secret"
    )
    expect_error(
        send("GET", "/", access="AKIAUNKNOWNKEY000000"),
        403,
        ("InvalidAccessKeyId",),
        "unknown access key",
    )
    expect_error(
        send("PUT", f"/{BUCKET}/unknown-key", b"x", access="AKIAUNKNOWNKEY000000"),
        403,
        ("InvalidAccessKeyId",),
        "unknown access key, PUT",
    )
    object_absent("unknown-key")
    # A body that does not match the signed x-amz-content-sha256 is refused and not stored.
    h = signed("PUT", f"/{BUCKET}/sha-mismatch", b"the signed body")
    conn = http.client.HTTPConnection(HOST, PORT, timeout=SOCKET_TIMEOUT_S)
    conn.request("PUT", f"/{BUCKET}/sha-mismatch", body=b"another  body!!", headers=h)
    r = conn.getresponse()
    reply = Reply(r.status, r.getheaders(), r.read())
    conn.close()
    assert 400 <= reply.status < 500, ("body not matching x-amz-content-sha256", reply)
    print(f"   body not matching x-amz-content-sha256: {reply.status} {reply.code()}")
    object_absent("sha-mismatch")
    serving()


def huge_headers():
    step("request heads of 100+ KiB")
    # Under the 64 KiB cap a large header is fine.
    r = send("GET", f"/{BUCKET}?list-type=2", headers={"X-Padding": "p" * (32 << 10)})
    assert r.status == 200, ("32 KiB header", r)
    for size in (100 << 10, 1 << 20):
        pad = "a" * size
        head = (
            f"GET /{BUCKET}?list-type=2 HTTP/1.1\r\nHost: {HOSTPORT}\r\n"
            f"X-Padding: {pad}\r\n\r\n"
        ).encode()
        got = raw_exchange(head)
        status_line = got.split(b"\r\n", 1)[0]
        assert status_line.startswith((b"HTTP/1.1 431", b"HTTP/1.1 400")), (size, got[:300])
        print(f"   {size >> 10} KiB header: {status_line.decode()}", flush=True)
    # Many headers that add up to 100+ KiB.
    many = "".join(f"X-H{i}: {'b' * 100}\r\n" for i in range(1200))
    got = raw_exchange(f"GET / HTTP/1.1\r\nHost: {HOSTPORT}\r\n{many}\r\n".encode())
    status_line = got.split(b"\r\n", 1)[0]
    assert status_line.startswith((b"HTTP/1.1 431", b"HTTP/1.1 400")), got[:300]
    print(f"   1200 headers: {status_line.decode()}", flush=True)
    serving()


def bucket_names():
    step("invalid bucket names")
    for name in (
        "ab",
        "a" * 64,
        "Bad_Name",
        "UPPER",
        "-leading-dash",
        "trailing-dash-",
        "two..dots",
        "192.168.1.1",
        "under_score",
        "sp%20ace",
    ):
        expect_error(send("PUT", f"/{name}"), 400, ("InvalidBucketName",), f"create {name!r}")
    r = send("GET", "/")
    assert r.status == 200, r
    for name in ("ab", "Bad_Name", "UPPER", "two..dots"):
        assert f"<Name>{name}</Name>".encode() not in r.body, (name, r.body)
    serving()


def ranges():
    step("ranges past the end")
    body = bytes(range(100))
    assert send("PUT", f"/{BUCKET}/hundred", body).status == 200
    for rng in ("bytes=100-", "bytes=200-300", "bytes=100-100"):
        expect_error(
            send("GET", f"/{BUCKET}/hundred", headers={"Range": rng}),
            416,
            ("InvalidRange",),
            f"Range {rng}",
        )
    # A range that starts inside and ends past the end is cut at the end (RFC 9110).
    r = send("GET", f"/{BUCKET}/hundred", headers={"Range": "bytes=90-1000"})
    assert (r.status, r.body) == (206, body[90:]), r
    assert r.headers.get("content-range") == "bytes 90-99/100", r.headers
    # An empty object has no satisfiable range.
    assert send("PUT", f"/{BUCKET}/empty", b"").status == 200
    expect_error(
        send("GET", f"/{BUCKET}/empty", headers={"Range": "bytes=0-0"}),
        416,
        ("InvalidRange",),
        "Range bytes=0-0 of an empty object",
    )


def warm_tables():
    """Create every index and intent table shard of the bucket (300 keys, each PUT and then
    DELETEd), so that from here on the OSDs' object counts change by data chunks only."""
    step("create every table shard (300 PUT + DELETE)")
    errors = []

    def worker(first):
        try:
            for i in range(first, 300, 4):
                assert send("PUT", f"/{BUCKET}/warm-{i}", b"w").status == 200, i
                assert send("DELETE", f"/{BUCKET}/warm-{i}").status == 204, i
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SOCKET_TIMEOUT_S * 10)
    assert not any(t.is_alive() for t in threads), "a table-warming worker is still running"
    assert not errors, errors
    return settled_objects()


def half_put(sign_body):
    """A PUT announcing 20 MiB that sends 10 MiB and disconnects leaves no object."""
    step(f"half a PUT body, then disconnect ({'signed' if sign_body else 'unsigned'} payload)")
    key = f"half-{'signed' if sign_body else 'unsigned'}"
    full = os.urandom(20 * MiB)
    h = signed("PUT", f"/{BUCKET}/{key}", full, sign_body=sign_body)
    h["Content-Length"] = str(len(full))
    head = f"PUT /{BUCKET}/{key} HTTP/1.1\r\nHost: {HOSTPORT}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in h.items() if k.lower() != "host")
    s = socket.create_connection((HOST, PORT), timeout=SOCKET_TIMEOUT_S)
    s.sendall(head.encode() + b"\r\n")
    s.sendall(full[: 10 * MiB])
    # While that transfer hangs half-way, other clients are served.
    serving()
    s.shutdown(socket.SHUT_RDWR)
    s.close()
    # The gateway notices the disconnect; the key must not appear, now or a little later.
    object_absent(key)
    time.sleep(1)
    object_absent(key)
    serving()


def concurrent_half_puts():
    step("eight half PUTs at once while normal clients work")
    socks = []
    for i in range(8):
        key = f"half-many-{i}"
        body = b"z" * (4 * MiB)
        h = signed("PUT", f"/{BUCKET}/{key}", body, sign_body=False)
        h["Content-Length"] = str(len(body))
        head = f"PUT /{BUCKET}/{key} HTTP/1.1\r\nHost: {HOSTPORT}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in h.items() if k.lower() != "host")
        s = socket.create_connection((HOST, PORT), timeout=SOCKET_TIMEOUT_S)
        s.sendall(head.encode() + b"\r\n" + body[: MiB + i * 1000])
        socks.append(s)
    errors = []

    def worker():
        try:
            serving()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SOCKET_TIMEOUT_S * 2)
    assert not any(t.is_alive() for t in threads), "a serving check is still running"
    assert not errors, errors
    for s in socks:
        s.close()
    for i in range(8):
        object_absent(f"half-many-{i}")
    serving()


def garbage():
    step("bytes that are not HTTP")
    samples = {
        "binary": bytes(range(256)) * 4 + b"\r\n\r\n",
        "TLS client hello": bytes.fromhex("16030100a5010000a10303") + os.urandom(160),
        "bad request line": b"HELLO WORLD FOO BAR\r\n\r\n",
        "bad header line": f"GET / HTTP/1.1\r\nHost: {HOSTPORT}\r\nno colon here\r\n\r\n".encode(),
        "bad content-length": (
            f"PUT /{BUCKET}/cl HTTP/1.1\r\nHost: {HOSTPORT}\r\nContent-Length: -5\r\n\r\n"
        ).encode(),
        "endless line": b"GET /" + b"x" * (2 * MiB),
    }
    for what, data in samples.items():
        got = raw_exchange(data)
        # Either closed outright, or one 4xx reply and then closed (raw_exchange read to EOF).
        assert got == b"" or got.startswith((b"HTTP/1.1 400", b"HTTP/1.1 431", b"HTTP/1.1 414")), (
            what,
            got[:300],
        )
        print(f"   {what}: {got.split(chr(13).encode(), 1)[0].decode() or 'closed'}", flush=True)
    # A connection that sends nothing and closes, many times.
    for _ in range(50):
        socket.create_connection((HOST, PORT), timeout=SOCKET_TIMEOUT_S).close()
    serving()
    object_absent("cl")


# The gateway closes a connection whose request head does not arrive within 30 s.
HEAD_READ_TIMEOUT_S = 30


class StalledHead:
    """A connection that sends half a request head and then nothing, watched in a thread."""

    def __init__(self):
        self.sock = socket.create_connection((HOST, PORT), timeout=HEAD_READ_TIMEOUT_S * 3)
        self.sock.sendall(f"GET /{BUCKET} HTTP/1.1\r\nHost: {HOSTPORT}\r\nX-Slow: ".encode())
        self.started = time.monotonic()
        self.outcome = None
        self.thread = threading.Thread(target=self._watch)
        self.thread.start()

    def _watch(self):
        got = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                got += chunk
            self.outcome = ("closed", got, time.monotonic() - self.started)
        except ConnectionResetError:
            self.outcome = ("reset", got, time.monotonic() - self.started)
        except socket.timeout:
            self.outcome = ("still open", got, time.monotonic() - self.started)

    def check(self):
        step("a request head that stalls half-way")
        self.thread.join(HEAD_READ_TIMEOUT_S * 4)
        alive = self.thread.is_alive()
        self.sock.close()
        assert not alive, f"the stalled connection is still open after {HEAD_READ_TIMEOUT_S * 4} s"
        what, got, after_s = self.outcome
        assert what in ("closed", "reset"), ("stalled head", what, after_s)
        assert got == b"" or got.startswith(b"HTTP/1.1 408"), got[:300]
        assert after_s >= HEAD_READ_TIMEOUT_S - 5, ("closed too early", after_s)
        print(f"   closed by the gateway after {after_s:.1f} s", flush=True)
        serving()


def expect_continue():
    """`Expect: 100-continue` with an empty body is answered and the connection closed, so
    botocore never parses a later response against this one's status (boto/botocore#3755)."""
    step("Expect: 100-continue with and without a body")
    h = signed("PUT", f"/{BUCKET}/expect-empty", b"")
    h["Expect"] = "100-continue"
    h["Content-Length"] = "0"
    head = f"PUT /{BUCKET}/expect-empty HTTP/1.1\r\nHost: {HOSTPORT}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in h.items() if k.lower() != "host")
    got = raw_exchange(head.encode() + b"\r\n")  # reads until the gateway closes
    assert got.startswith(b"HTTP/1.1 200 "), got[:300]
    assert b"\r\nconnection: close\r\n" in got.lower(), got[:300]
    assert got.count(b"HTTP/1.1") == 1, got[:300]
    # With a body: 100 Continue, the final answer, and the connection stays open.
    conn = http.client.HTTPConnection(HOST, PORT, timeout=SOCKET_TIMEOUT_S)
    for i in range(2):
        body = os.urandom(1000)
        h = signed("PUT", f"/{BUCKET}/expect-body", body)
        h["Expect"] = "100-continue"
        conn.request("PUT", f"/{BUCKET}/expect-body", body=body, headers=h)
        r = conn.getresponse()
        r.read()
        assert r.status == 200, (i, r.status)
        assert r.getheader("etag") == f'"{hashlib.md5(body).hexdigest()}"', r.getheaders()
        assert r.getheader("connection") is None, r.getheaders()
    conn.close()
    # The botocore sequence that failed: on one pooled connection, an empty PUT, then an
    # UploadPart whose ETag must come through.
    import boto3
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url=ENDPOINT,
        region_name="us-east-1",
        aws_access_key_id=ACCESS,
        aws_secret_access_key=SECRET,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            max_pool_connections=1,
        ),
    )
    for i in range(3):
        s3.put_object(Bucket=BUCKET, Key=f"expect-empty-{i}", Body=b"")
        up = s3.create_multipart_upload(Bucket=BUCKET, Key=f"expect-mp-{i}")["UploadId"]
        s3.put_object(Bucket=BUCKET, Key=f"expect-empty-{i}", Body=b"")
        part = s3.upload_part(
            Bucket=BUCKET, Key=f"expect-mp-{i}", UploadId=up, PartNumber=1, Body=b"p" * 1000
        )
        assert part.get("ETag") == f'"{hashlib.md5(b"p" * 1000).hexdigest()}"', part
        s3.complete_multipart_upload(
            Bucket=BUCKET,
            Key=f"expect-mp-{i}",
            UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        )
    serving()


def cleanup():
    step("cleanup")
    r = send("GET", f"/{BUCKET}?list-type=2")
    keys = [
        k.text
        for k in ET.fromstring(r.body).iter("{http://s3.amazonaws.com/doc/2006-03-01/}Key")
    ]
    for k in keys:
        assert send("DELETE", f"/{BUCKET}/{urllib.parse.quote(k)}").status == 204, k
    r = send("DELETE", f"/{BUCKET}")
    assert r.status == 204, r
    # Removing the bucket purged everything it had.
    assert settled_objects() == [0, 0, 0], osd_objects()


def main():
    started = time.time()
    setup()
    stalled = StalledHead()
    malformed_xml()
    signatures()
    huge_headers()
    bucket_names()
    ranges()
    before = warm_tables()
    half_put(sign_body=True)
    half_put(sign_body=False)
    concurrent_half_puts()
    # Every chunk the cut-off bodies wrote was deleted: no object more than before them.
    after = settled_objects()
    assert after == before, ("objects left by cut-off uploads", before, after)
    print(f"   objects per OSD before and after the cut-off uploads: {after}", flush=True)
    garbage()
    expect_continue()
    stalled.check()
    cleanup()
    print(f"bad input suite passed in {time.time() - started:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
