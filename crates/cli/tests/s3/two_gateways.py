"""Two S3 gateways of one multi-host cluster serve the same buckets.

Usage: two_gateways.py write|verify|versions|lifecycle ENDPOINT_A ENDPOINT_B
  write:    bucket "shared"; 40 objects of assorted sizes PUT through A; a multipart upload
            whose parts go through A and B and which B completes.
  verify:   every object reads back byte for byte through both gateways, listings agree,
            and new writes through B succeed (run after an OSD was killed).
  versions: bucket "history" with versioning; 8 writers PUT new versions of 4 keys through
            both gateways (and remove some versions) while gateway A is killed (-9) and
            restarted (the test does that after "WRITING"); then every acknowledged version
            reads back with its bytes through B, no removed one does, and each key's
            version list holds every acknowledged version once.
  lifecycle: both gateways run lifecycle workers with a day of 2 s, a pass every second
            (`--lifecycle-day 2 --lifecycle-every 1`). Bucket "life-plain" (unversioned)
            expires keys under "tmp/" after a day (150 of them waiting when the rule comes)
            and aborts uploads under "up/" a day after they started; bucket "life-versions"
            removes noncurrent versions a day after they were replaced — under "v/" keeping
            the 2 newest, under "n/" and "x/" all — and lone delete markers under "m/".
            After "WRITING", writers go on through both gateways until a line on stdin (the
            test kills gateway A -9 in the middle of a worker pass, restarts it, and writes
            that line after A's third whole pass since): new versions of "v/" keys, each
            key's by one writer in order; the same bytes to a "tmp/" key whenever its
            version is a day old (only the write time tells the expiring version from the
            new one), new "tmp/" keys; lone delete markers, some of which a PUT revives;
            "undo" of a version of an "x/" key (its removal by id, which makes the older one
            current again) timed by a sentinel under "n/" to land while a pass that judged
            the older one removable is on its way to it; new uploads under "up/"; listings
            that page through both buckets. What a write made current is read back through
            B at once: gone, or a "tmp/" key gone less than a day after its PUT started,
            fails the test. Then, within a deadline: every "tmp/" key and "up/" upload is
            gone, every other key and upload reads back byte for byte through both, each
            "v/" key holds its last write as the current version and exactly the 2 newest
            older ones, lone markers are gone, revived keys read their PUT, each undone "x/"
            key holds the older version as its only one (or nothing, when a pass removed it
            before the undo), and no listing names anything twice.
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


def lifecycle():
    import collections
    import concurrent.futures
    import random
    import threading
    import time

    from botocore.exceptions import ClientError

    DAY = 2.0  # seconds: --lifecycle-day of both gateways
    KEEP = 2  # NewerNoncurrentVersions
    plain, vers = "life-plain", "life-versions"
    started = time.time()

    def code_of(e):
        return e.response["Error"]["Code"] if isinstance(e, ClientError) else type(e).__name__

    def eventually(what, cond, timeout=60):
        deadline = time.time() + timeout
        # Bounded by the deadline.
        while not cond():
            assert time.time() < deadline, f"not within {timeout} s: {what}"
            time.sleep(0.3)

    def keys(c, bucket, prefix=""):
        """Every key listed, in pages of 7; none may be listed twice."""
        seen, kw = [], {}
        for _ in range(10000):
            page = c.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=7, **kw)
            for o in page.get("Contents", []):
                assert o["Key"] not in seen, f"{bucket}/{o['Key']} listed twice"
                seen.append(o["Key"])
            if not page["IsTruncated"]:
                return seen
            kw = {"ContinuationToken": page["NextContinuationToken"]}
        raise AssertionError(f"listing {bucket} does not end")

    def versions(c, bucket, prefix=""):
        """(key, version id) -> listed entry (with "Marker") of every version and delete
        marker, in pages of 7; none may be listed twice."""
        out, kw = {}, {}
        for _ in range(10000):
            page = c.list_object_versions(Bucket=bucket, Prefix=prefix, MaxKeys=7, **kw)
            for marker, entries in ((False, page.get("Versions", [])),
                                    (True, page.get("DeleteMarkers", []))):
                for v in entries:
                    kv = (v["Key"], v["VersionId"])
                    assert kv not in out, f"{bucket} {kv} listed twice"
                    out[kv] = dict(v, Marker=marker)
            if not page["IsTruncated"]:
                return out
            kw = {"KeyMarker": page["NextKeyMarker"],
                  "VersionIdMarker": page.get("NextVersionIdMarker", "")}
        raise AssertionError(f"listing the versions of {bucket} does not end")

    def exists(c, bucket, key):
        try:
            c.head_object(Bucket=bucket, Key=key)
            return True
        except ClientError as e:
            assert code_of(e) == "404", e.response
            return False

    def uploads(c, prefix):
        page = c.list_multipart_uploads(Bucket=plain, Prefix=prefix)
        assert not page.get("IsTruncated"), "a single page"
        return {u["UploadId"] for u in page.get("Uploads", [])}

    # Bucket "life-plain": 150 keys to expire, keys the rule must not touch (some of them
    # near misses of its prefix), uploads to abort and one to spare.
    a.create_bucket(Bucket=plain)
    hot_keys, hot_bytes = ["tmp/zz-hot-0", "tmp/zz-hot-1"], b"hot " * 100
    for k in hot_keys:
        a.put_object(Bucket=plain, Key=k, Body=hot_bytes)
    tmp = [f"tmp/{i:03d}" for i in range(150)]
    kept = {f"keep/{i:02d}": body(i) for i in range(12)}
    kept.update({k: k.encode() * 3 for k in ("tmp", "TMP/a", "keep/tmp/a", "tmpx/a", "tm/p")})
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: (a if i % 2 else b).put_object(
            Bucket=plain, Key=tmp[i], Body=f"tmp {i}".encode()), range(len(tmp))))
        list(pool.map(lambda kv: b.put_object(Bucket=plain, Key=kv[0], Body=kv[1]), kept.items()))
    old_uploads = []
    for i, c in enumerate((a, b, a)):
        uid = c.create_multipart_upload(Bucket=plain, Key=f"up/old-{i}")["UploadId"]
        c.upload_part(Bucket=plain, Key=f"up/old-{i}", UploadId=uid, PartNumber=1, Body=b"old")
        old_uploads.append((f"up/old-{i}", uid))
    spared = a.create_multipart_upload(Bucket=plain, Key="keep-up/x")["UploadId"]
    spared_parts = [
        a.upload_part(Bucket=plain, Key="keep-up/x", UploadId=spared, PartNumber=1,
                      Body=parts[0])["ETag"],
        b.upload_part(Bucket=plain, Key="keep-up/x", UploadId=spared, PartNumber=2,
                      Body=parts[2])["ETag"],
    ]

    # Bucket "life-versions": a key no rule covers, a delete marker over a version (not
    # alone: it stays), lone delete markers.
    a.create_bucket(Bucket=vers)
    a.put_bucket_versioning(Bucket=vers, VersioningConfiguration={"Status": "Enabled"})
    other = {b.put_object(Bucket=vers, Key="other/x", Body=f"other {i}".encode())["VersionId"]:
             f"other {i}".encode() for i in range(3)}
    live = a.put_object(Bucket=vers, Key="m/live", Body=b"under a marker")["VersionId"]
    live_marker = b.delete_object(Bucket=vers, Key="m/live")["VersionId"]
    lone = []
    for i, c in enumerate((a, b, a)):
        vid = c.put_object(Bucket=vers, Key=f"m/lone-{i}", Body=b"x")["VersionId"]
        c.delete_object(Bucket=vers, Key=f"m/lone-{i}")
        c.delete_object(Bucket=vers, Key=f"m/lone-{i}", VersionId=vid)
        lone.append(f"m/lone-{i}")

    b.put_bucket_lifecycle_configuration(Bucket=vers, LifecycleConfiguration={"Rules": [
        {"ID": "old", "Status": "Enabled", "Filter": {"Prefix": "v/"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1, "NewerNoncurrentVersions": KEEP}},
        {"ID": "markers", "Status": "Enabled", "Filter": {"Prefix": "m/"},
         "Expiration": {"ExpiredObjectDeleteMarker": True}},
        {"ID": "undo", "Status": "Enabled", "Filter": {"Prefix": "x/"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1}},
        {"ID": "sentinels", "Status": "Enabled", "Filter": {"Prefix": "n/"},
         "NoncurrentVersionExpiration": {"NoncurrentDays": 1}},
    ]})
    # Last, so the workers' first passes find the 150 "tmp/" keys expired.
    a.put_bucket_lifecycle_configuration(Bucket=plain, LifecycleConfiguration={"Rules": [
        {"ID": "tmp", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
         "Expiration": {"Days": 1}},
        {"ID": "uploads", "Status": "Enabled", "Filter": {"Prefix": "up/"},
         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
    ]})
    assert [r["ID"] for r in b.get_bucket_lifecycle_configuration(Bucket=plain)["Rules"]] == [
        "tmp", "uploads"]

    stop, lock = threading.Event(), threading.Lock()
    hard_stop = time.time() + 150  # in case the test never says stop
    problems, trouble = [], collections.Counter()
    tried = collections.defaultdict(dict)  # "v/" key -> n -> bytes of every PUT tried
    acked = collections.defaultdict(list)  # "v/" key -> [(n, version id)] acknowledged
    final = {}  # key of life-plain -> its last bytes
    revived, gone_markers, live_uploads, undone, sentinels = {}, [], [], {}, []

    def problem(text):
        with lock:
            problems.append(text)

    def running():
        return not stop.is_set() and time.time() < hard_stop

    def read_back(key, bucket, want, vid=None):
        """GET through B: what the write just made current must be there."""
        try:
            got = b.get_object(Bucket=bucket, Key=key)
        except Exception as e:
            if code_of(e) in ("NoSuchKey", "NoSuchVersion", "404"):
                problem(f"{bucket}/{key} is gone right after its PUT ({vid})")
            else:
                with lock:
                    trouble[f"GET {code_of(e)}"] += 1
            return
        data = got["Body"].read()
        if data != want or (vid and got.get("VersionId") != vid):
            problem(f"{bucket}/{key} reads {data[:40]!r} ({got.get('VersionId')}), "
                    f"not {want[:40]!r} ({vid}) right after its PUT")

    def put_surely(bucket, key, data):
        """A last PUT through B, acknowledged (retried), so the final state is known."""
        for attempt in range(10):
            try:
                return b.put_object(Bucket=bucket, Key=key, Body=data).get("VersionId")
            except Exception:
                time.sleep(0.5)
        raise AssertionError(f"no PUT of {bucket}/{key} through B was acknowledged")

    def versioned_writer(w):
        # Each key has one writer, so its versions are in the order of n.
        n = 0
        while running():
            n += 1
            key = f"v/w{w}-{n % 2}"
            data = f"{key} n{n:05d} ".encode() * (1 + n % 40)
            c = a if (w + n) % 2 else b
            with lock:
                tried[key][n] = data
            try:
                vid = c.put_object(Bucket=vers, Key=key, Body=data)["VersionId"]
            except Exception as e:
                with lock:
                    trouble[f"PUT {code_of(e)}"] += 1
                time.sleep(0.05)
                continue
            with lock:
                acked[key].append((n, vid))
            read_back(key, vers, data, vid)
        for key in (f"v/w{w}-0", f"v/w{w}-1"):
            n += 1
            data = f"{key} n{n:05d} last".encode()
            with lock:
                tried[key][n] = data
            vid = put_surely(vers, key, data)
            with lock:
                acked[key].append((n, vid))

    def plain_writer(w):
        # The same bytes again to a "tmp/" key (after the others in the listing) when its
        # version is a day old: a pass may judge that version expired and meet the new one
        # when it comes to remove it (the new one must stay: its write time differs).
        hot, spare = hot_keys[w], f"keep/hot-{w}"
        # First when the first pass with the 150 expired keys is under way.
        first = time.time() + 20
        while running() and time.time() < first and exists(b, plain, tmp[0]):
            time.sleep(0.02)
        n = 0
        while running():
            n += 1
            c = a if (w + n) % 2 else b
            t0 = time.time()
            try:
                c.put_object(Bucket=plain, Key=hot, Body=hot_bytes)
            except Exception as e:
                with lock:
                    trouble[f"PUT {code_of(e)}"] += 1
                time.sleep(0.05)
                continue
            # It expires a day after its PUT started (the version it wrote is no older),
            # not before: polled until shortly before.
            while time.time() < t0 + DAY - 0.3:
                try:
                    got = b.get_object(Bucket=plain, Key=hot)["Body"].read()
                    if got != hot_bytes:
                        problem(f"{hot} reads {got[:40]!r}")
                except Exception as e:
                    if code_of(e) == "NoSuchKey" and time.time() < t0 + DAY:
                        problem(f"{hot} expired {time.time() - t0:.2f} s after its PUT started")
                        break
                time.sleep(0.05)
            data = f"{spare} n{n}".encode()
            try:
                c.put_object(Bucket=plain, Key=spare, Body=data)
                read_back(spare, plain, data)
            except Exception as e:
                with lock:
                    trouble[f"PUT {code_of(e)}"] += 1
            until = t0 + DAY + random.uniform(0, 1)
            while running() and time.time() < until:
                time.sleep(0.02)
        final[spare] = f"{spare} last".encode()
        put_surely(plain, spare, final[spare])

    def filler():
        # New "tmp/" keys all along (before the hot ones in the listing): every pass has
        # some to expire.
        n = 0
        while running():
            n += 1
            try:
                (a if n % 2 else b).put_object(Bucket=plain, Key=f"tmp/fill-{n:04d}", Body=b"f")
            except Exception as e:
                with lock:
                    trouble[f"PUT {code_of(e)}"] += 1
            time.sleep(0.05)

    def marker_writer():
        # Lone delete markers: some revived by a PUT racing the workers.
        n = 0
        while running():
            n += 1
            key, c = f"m/back-{n:03d}", (a if n % 2 else b)
            try:
                vid = c.put_object(Bucket=vers, Key=key, Body=b"gone")["VersionId"]
                c.delete_object(Bucket=vers, Key=key)
                c.delete_object(Bucket=vers, Key=key, VersionId=vid)
            except Exception as e:
                with lock:
                    trouble[f"marker {code_of(e)}"] += 1
                time.sleep(0.05)
                continue
            if n % 3 == 0:
                gone_markers.append(key)
                continue
            time.sleep(random.uniform(0, 0.5))
            data = f"{key} back".encode()
            vid = put_surely(vers, key, data)
            revived[key] = (vid, data)
            read_back(key, vers, data, vid)

    def undoer(w):
        # A version written over, then the newer one removed by id ("undo") while a pass is
        # about to remove the older one: either the pass removed it before (the key is
        # gone), or it is current again and must stay. The undo comes when a pass has just
        # removed the older version of a sentinel key under "n/", written over just after
        # (so due just after): that pass judged the "x/" key in the same listing and comes
        # to it after the "v/" keys.
        n = 0
        while running():
            n += 1
            key, c = f"x/{w}-{n:03d}", (a if (w + n) % 2 else b)
            sentinel = f"n/{w}-{n:03d}"
            try:
                first = c.put_object(Bucket=vers, Key=key, Body=f"{key} first".encode())
                c.put_object(Bucket=vers, Key=sentinel, Body=b"old")
                second = c.put_object(Bucket=vers, Key=key, Body=f"{key} second".encode())
                c.put_object(Bucket=vers, Key=sentinel, Body=b"new")
                with lock:
                    sentinels.append(sentinel)
            except Exception as e:
                with lock:
                    trouble[f"undo {code_of(e)}"] += 1
                time.sleep(0.05)
                continue
            until = time.time() + 3 * DAY
            try:
                while running() and time.time() < until and len(b.list_object_versions(
                        Bucket=vers, Prefix=sentinel).get("Versions", [])) > 1:
                    time.sleep(0.01)
                b.delete_object(Bucket=vers, Key=key, VersionId=second["VersionId"])
            except Exception as e:
                with lock:
                    trouble[f"undo {code_of(e)}"] += 1
                continue
            try:
                got = b.get_object(Bucket=vers, Key=key)
            except Exception as e:
                if code_of(e) != "NoSuchKey":
                    problem(f"{key}: GET after the undo: {e}")
                with lock:
                    undone[key] = None  # the older version went first: the key is gone
                continue
            if got["VersionId"] != first["VersionId"]:
                problem(f"{key} reads {got['VersionId']} after the undo, not {first['VersionId']}")
            with lock:
                undone[key] = (first["VersionId"], f"{key} first".encode())

    def uploader():
        # Uploads under "up/" keep coming; each is aborted a day after it started.
        n = 0
        while running():
            n += 1
            key, c = f"up/live-{n:03d}", (a if n % 2 else b)
            try:
                uid = c.create_multipart_upload(Bucket=plain, Key=key)["UploadId"]
                live_uploads.append((key, uid))
                c.upload_part(Bucket=plain, Key=key, UploadId=uid, PartNumber=1, Body=b"live")
            except Exception as e:
                with lock:
                    trouble[f"upload {code_of(e)}"] += 1
            time.sleep(0.5)

    def lister():
        # Listings page through keys the workers remove meanwhile: nothing twice.
        while running():
            try:
                keys(b, plain)
                versions(b, vers)
            except AssertionError as e:
                problem(str(e))
            except Exception as e:
                with lock:
                    trouble[f"list {code_of(e)}"] += 1
            time.sleep(0.1)

    def wait_for_stop():
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()
    work = [lambda w=w: versioned_writer(w) for w in range(4)]
    work += [lambda w=w: plain_writer(w) for w in range(2)]
    work += [lambda w=w: undoer(w) for w in range(4)]
    work += [filler, marker_writer, uploader, lister]
    print("WRITING", flush=True)
    writing = time.time()
    with concurrent.futures.ThreadPoolExecutor(len(work)) as pool:
        for f in [pool.submit(fn) for fn in work]:
            f.result()
    wrote = time.time() - writing
    assert not problems, "\n".join(problems[:20])
    for key, done in acked.items():
        assert len(done) >= KEEP + 3, f"only {len(done)} versions of {key} were acknowledged"

    # Within a deadline, the workers (both alive again) finish the job.
    eventually("every tmp/ key expires", lambda: not keys(a, plain, "tmp/") and not keys(b, plain, "tmp/"))
    eventually("uploads under up/ are aborted", lambda: not uploads(a, "up/") and not uploads(b, "up/"))

    def converged():
        vs = versions(b, vers)
        count = collections.Counter(k for k, _ in vs)
        # Under "x/" and "n/" no older version stays (also of keys a failed write left).
        return (all(count[k] <= KEEP + 1 for k in acked)
                and all(n <= 1 for k, n in count.items() if k.startswith(("x/", "n/")))
                and all(count[k] == 1 for k in sentinels)
                and not any(count[k] for k in lone + gone_markers))

    eventually("noncurrent versions beyond the newest 2 go; lone markers go", converged)

    # Bucket "life-plain": exactly the keys no rule covers, byte for byte through both.
    expected = dict(kept, **final)
    for c in (a, b):
        assert keys(c, plain) == sorted(expected), keys(c, plain)
        for k, data in expected.items():
            assert c.get_object(Bucket=plain, Key=k)["Body"].read() == data, f"{k} differs"
    for key, uid in old_uploads + live_uploads:
        try:
            b.upload_part(Bucket=plain, Key=key, UploadId=uid, PartNumber=2, Body=b"late")
            raise AssertionError(f"upload {key} {uid} was not aborted")
        except ClientError as e:
            assert code_of(e) == "NoSuchUpload", e.response
    assert uploads(b, "keep-up/") == {spared}, "the upload no rule covers stays"
    b.complete_multipart_upload(
        Bucket=plain, Key="keep-up/x", UploadId=spared,
        MultipartUpload={"Parts": [{"PartNumber": n + 1, "ETag": e}
                                   for n, e in enumerate(spared_parts)]})
    assert a.get_object(Bucket=plain, Key="keep-up/x")["Body"].read() == parts[0] + parts[2]

    # Bucket "life-versions".
    vs = versions(a, vers)
    assert vs == versions(b, vers), "both gateways list the same versions"
    removed = 0
    for key, done in acked.items():
        mine = {vid: v for (k, vid), v in vs.items() if k == key}
        assert not any(v["Marker"] for v in mine.values()), f"{key} got a delete marker"
        last_n, last_vid = done[-1]
        assert last_vid in mine and mine[last_vid]["IsLatest"], f"{key}: its last write is not current: {mine}"
        for c in (a, b):
            got = c.get_object(Bucket=vers, Key=key)
            assert got["VersionId"] == last_vid and got["Body"].read() == tried[key][last_n], key
        older = []
        for vid in mine:
            if vid == last_vid:
                continue
            data = b.get_object(Bucket=vers, Key=key, VersionId=vid)["Body"].read()
            n = int(data.split(b" n", 1)[1][:5])
            assert tried[key].get(n) == data and n < last_n, f"{key} {vid}: {data[:40]!r}"
            older.append(n)
        # The newest KEEP older versions that were written (a PUT cut off by the kill may
        # have landed too), and none older.
        assert len(older) == KEEP, f"{key} keeps {sorted(older)} besides its current version"
        for n, vid in done[:-1]:
            if n > min(older):
                assert vid in mine, f"{key}: version {n} ({vid}) is gone, {sorted(older)} kept"
            else:
                removed += vid not in mine
    for vid, data in other.items():
        assert b.get_object(Bucket=vers, Key="other/x", VersionId=vid)["Body"].read() == data
    assert {vid for (k, vid) in vs if k == "other/x"} == set(other)
    live_versions = {vid: v for (k, vid), v in vs.items() if k == "m/live"}
    assert set(live_versions) == {live, live_marker} and live_versions[live_marker]["IsLatest"]
    for key, (vid, data) in revived.items():
        got = a.get_object(Bucket=vers, Key=key)
        assert got["VersionId"] == vid and got["Body"].read() == data, key
    for key, back in undone.items():
        mine = [v["VersionId"] for (k, _), v in vs.items() if k == key]
        if back is None:
            assert not mine, f"{key}: {mine} listed after the undo found nothing"
            continue
        assert mine == [back[0]], f"{key}: {back[0]}, current again after the undo, went: {mine}"
        got = b.get_object(Bucket=vers, Key=key)
        assert got["VersionId"] == back[0] and got["Body"].read() == back[1], key
    print(f"LIFECYCLE {sum(map(len, acked.values()))} versions written in {wrote:.1f} s, "
          f"{removed} noncurrent removed, {len(revived)} markers revived, "
          f"{sum(1 for x in undone.values() if x)} of {len(undone)} undone versions back, "
          f"{len(lone) + len(gone_markers)} lone markers and {len(tmp)} tmp/ keys gone, "
          f"{len(old_uploads) + len(live_uploads)} uploads aborted; {time.time() - started:.1f} s; "
          f"tolerated failures: {dict(trouble)}", flush=True)


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
elif mode == "lifecycle":
    lifecycle()
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
