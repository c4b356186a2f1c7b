//! Byte-level protocol tests with a raw socket client: malformed handshakes, options and
//! requests, error codes, concurrency and shutdown. After every fatal case the test checks
//! that the server still serves a well-behaved client.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_nbd::wire::*;
use basalt_nbd::{ExportMap, MemDevice, Server, ServerConfig};
use common::{FailingDevice, RawClient, SlowDevice, TestServer};

const MIB: u64 = 1 << 20;

/// A healthy client can still negotiate, write and read back on `export`.
fn assert_still_serving(port: u16, export: &str) {
    let (mut c, _, _) = RawClient::open(port, export, false);
    c.request(CMD_WRITE, 0, 1, 0, 4);
    c.send(b"live");
    assert_eq!(c.simple(), (0, 1));
    c.request(CMD_READ, 0, 2, 0, 4);
    assert_eq!(c.simple(), (0, 2));
    assert_eq!(c.read_n(4), b"live");
    c.request(CMD_DISC, 0, 3, 0, 0);
    c.expect_closed();
}

#[test]
fn export_name_honours_no_zeroes() {
    // Goal: OPT_EXPORT_NAME enters transmission with size and flags, and the 124 zero bytes
    // are sent exactly when the client did not ask for NO_ZEROES.
    let t = TestServer::start();
    t.add_mem("a", 3 * MIB);
    for no_zeroes in [false, true] {
        let mut c = RawClient::connect(t.port);
        let flags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
        c.send(&flags.to_be_bytes());
        c.send_option(OPT_EXPORT_NAME, b"a");
        assert_eq!(c.u64(), 3 * MIB);
        let tflags = c.u16();
        assert_ne!(tflags & FLAG_HAS_FLAGS, 0);
        assert_ne!(tflags & FLAG_CAN_MULTI_CONN, 0);
        assert_eq!(tflags & FLAG_SEND_DF, 0, "DF needs structured replies");
        if !no_zeroes {
            assert_eq!(c.read_n(124), vec![0u8; 124]);
        }
        // The next bytes must be the reply to this request, not leftover padding.
        c.request(CMD_FLUSH, 0, 42, 0, 0);
        assert_eq!(c.simple(), (0, 42));
    }
}

#[test]
fn bad_handshakes_close_only_that_connection() {
    // Goal: unknown client flags, a bad option magic, an unknown EXPORT_NAME and an absurd
    // option length each end that connection, and the server keeps serving.
    let t = TestServer::start();
    t.add_mem("a", MIB);

    let mut c = RawClient::connect(t.port);
    c.send(&(1u32 << 5).to_be_bytes());
    c.expect_closed();

    let mut c = RawClient::negotiating(t.port);
    c.send(&[0xde; 16]);
    c.expect_closed();

    let mut c = RawClient::negotiating(t.port);
    c.send_option(OPT_EXPORT_NAME, b"nope");
    c.expect_closed();

    let mut c = RawClient::negotiating(t.port);
    let mut hdr = IHAVEOPT.to_be_bytes().to_vec();
    hdr.extend_from_slice(&OPT_GO.to_be_bytes());
    hdr.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
    c.send(&hdr);
    let (opt, kind, _) = c.option_reply();
    assert_eq!((opt, kind), (OPT_GO, REP_ERR_TOO_BIG));
    c.expect_closed();

    // Half a greeting reply, then gone.
    let mut c = RawClient::connect(t.port);
    c.send(&[0, 0]);
    drop(c);

    assert_still_serving(t.port, "a");
}

#[test]
fn options_are_answered_and_negotiation_continues() {
    // Goal: unknown options get ERR_UNSUP, malformed ones ERR_INVALID, a moderately oversized
    // one ERR_TOO_BIG (skipped without being stored), unknown exports ERR_UNKNOWN, LIST
    // names every export, STARTTLS is refused, and the same connection can still GO.
    let t = TestServer::start();
    t.add_mem("a", MIB);
    t.add_mem("b", 2 * MIB);
    let mut c = RawClient::negotiating(t.port);

    c.send_option(99, b"whatever");
    assert_eq!(c.option_reply().1, REP_ERR_UNSUP);
    c.send_option(OPT_LIST, b"x");
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    c.send_option(OPT_GO, &[0, 0, 0, 9, b'a']);
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    c.send_option(OPT_INFO, &vec![7u8; 100 << 10]);
    assert_eq!(c.option_reply().1, REP_ERR_TOO_BIG);
    c.send_option(OPT_INFO, &RawClient::export_data("missing"));
    assert_eq!(c.option_reply().1, REP_ERR_UNKNOWN);
    c.send_option(OPT_STARTTLS, &[]);
    assert_eq!(c.option_reply().1, REP_ERR_UNSUP);

    c.send_option(OPT_LIST, &[]);
    let mut names = Vec::new();
    loop {
        let (opt, kind, data) = c.option_reply();
        assert_eq!(opt, OPT_LIST);
        if kind == REP_ACK {
            break;
        }
        assert_eq!(kind, REP_SERVER);
        let n = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
        names.push(String::from_utf8(data[4..4 + n].to_vec()).unwrap());
    }
    assert_eq!(names, ["a", "b"]);

    let (size, flags) = c.go("b", false);
    assert_eq!(size, 2 * MIB);
    assert_eq!(flags & FLAG_READ_ONLY, 0);
    c.request(CMD_READ, 0, 5, 0, 512);
    assert_eq!(c.simple(), (0, 5));
    assert_eq!(c.read_n(512), vec![0u8; 512]);
}

#[test]
fn slow_handshakes_and_excess_connections_are_dropped() {
    // Goal: a client that stalls in negotiation is dropped after the handshake timeout, and
    // connections beyond max_connections are closed at once while others keep working.
    let t = TestServer::start_with(ServerConfig {
        max_connections: 2,
        shutdown_grace: Duration::from_secs(1),
        handshake_timeout: Duration::from_millis(300),
        tls: None,
        stats: None,
    });
    t.add_mem("a", MIB);
    let started = Instant::now();
    let mut stalled = RawClient::negotiating(t.port);
    stalled.send(&IHAVEOPT.to_be_bytes()); // half an option header, then nothing
    let mut held = RawClient::negotiating(t.port);
    let mut third = std::net::TcpStream::connect(("127.0.0.1", t.port)).expect("connect");
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 18];
    let n = std::io::Read::read(&mut third, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "third connection must be closed without a greeting");
    stalled.expect_closed();
    held.expect_closed();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert_still_serving(t.port, "a");
}

#[test]
fn abort_is_acknowledged() {
    // Goal: OPT_ABORT gets an ACK and the server closes.
    let t = TestServer::start();
    let mut c = RawClient::negotiating(t.port);
    c.send_option(OPT_ABORT, &[]);
    assert_eq!(c.option_reply(), (OPT_ABORT, REP_ACK, vec![]));
    c.expect_closed();
}

#[test]
fn meta_contexts_are_negotiated_per_spec() {
    // Goal: SET_META_CONTEXT needs structured replies; an empty LIST query lists
    // base:allocation; unknown namespaces select nothing without an error, and then
    // BLOCK_STATUS is EINVAL; a malformed query is ERR_INVALID.
    let t = TestServer::start();
    t.add_mem("a", MIB);
    let mut c = RawClient::negotiating(t.port);
    let set = RawClient::meta_data("a", &[BASE_ALLOCATION]);
    c.send_option(OPT_SET_META_CONTEXT, &set);
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);

    c.send_option(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.option_reply().1, REP_ACK);
    c.send_option(OPT_LIST_META_CONTEXT, &RawClient::meta_data("a", &[]));
    let (_, kind, data) = c.option_reply();
    assert_eq!(kind, REP_META_CONTEXT);
    assert_eq!(&data[4..], BASE_ALLOCATION.as_bytes());
    assert_eq!(c.option_reply().1, REP_ACK);
    c.send_option(
        OPT_LIST_META_CONTEXT,
        &RawClient::meta_data("a", &["base:"]),
    );
    assert_eq!(c.option_reply().1, REP_META_CONTEXT);
    assert_eq!(c.option_reply().1, REP_ACK);
    c.send_option(
        OPT_LIST_META_CONTEXT,
        &RawClient::meta_data("a", &["nocolon"]),
    );
    assert_eq!(c.option_reply().1, REP_ERR_INVALID);
    c.send_option(
        OPT_SET_META_CONTEXT,
        &RawClient::meta_data("zz", &[BASE_ALLOCATION]),
    );
    assert_eq!(c.option_reply().1, REP_ERR_UNKNOWN);

    let unknown = RawClient::meta_data("a", &["x-foo:bar", "base:"]);
    c.send_option(OPT_SET_META_CONTEXT, &unknown);
    assert_eq!(c.option_reply().1, REP_ACK, "nothing selected, no error");
    c.send_option(OPT_GO, &RawClient::export_data("a"));
    while c.option_reply().1 != REP_ACK {}
    c.request(CMD_BLOCK_STATUS, 0, 9, 0, 4096);
    let chunk = c.any_reply();
    assert_eq!(chunk.kind, REPLY_TYPE_ERROR);
    assert_eq!(&chunk.payload[0..4], &EINVAL.to_be_bytes());
}

#[test]
fn bad_requests_get_errors_and_the_connection_survives() {
    // Goal: past-end reads (EINVAL) and writes (ENOSPC, payload consumed), oversized reads,
    // unknown commands, unnegotiated or misplaced flags and a nonzero FLUSH range are refused
    // with the right code, and the same connection keeps working.
    let t = TestServer::start();
    t.add_mem("a", MIB);
    let (mut c, size, _) = RawClient::open(t.port, "a", false);
    c.request(CMD_READ, 0, 1, size - 10, 11);
    assert_eq!(c.simple(), (EINVAL, 1));
    c.request(CMD_WRITE, 0, 2, size - 1, 8);
    c.send(&[1u8; 8]);
    assert_eq!(c.simple(), (ENOSPC, 2));
    c.request(CMD_READ, 0, 3, 0, 64 << 20);
    assert_eq!(c.simple(), (EINVAL, 3));
    c.request(200, 0, 4, 0, 0);
    assert_eq!(c.simple(), (EINVAL, 4));
    c.request(CMD_READ, CMD_FLAG_DF, 5, 0, 8);
    assert_eq!(c.simple(), (EINVAL, 5), "DF without structured replies");
    c.request(CMD_READ, CMD_FLAG_REQ_ONE, 6, 0, 8);
    assert_eq!(c.simple(), (EINVAL, 6));
    c.request(CMD_FLUSH, 0, 7, 1, 0);
    assert_eq!(c.simple(), (EINVAL, 7));
    c.request(CMD_TRIM, 0, 8, u64::MAX - 1, 4);
    assert_eq!(c.simple(), (EINVAL, 8));
    c.request(CMD_BLOCK_STATUS, 0, 9, 0, 8);
    assert_eq!(c.simple(), (EINVAL, 9), "no metadata context negotiated");
    // Zero-length requests are harmless no-ops.
    for (h, kind) in [
        (10, CMD_READ),
        (11, CMD_WRITE),
        (12, CMD_TRIM),
        (13, CMD_WRITE_ZEROES),
    ] {
        c.request(kind, 0, h, 0, 0);
        assert_eq!(c.simple(), (0, h));
    }
    c.request(CMD_WRITE, CMD_FLAG_FUA, 14, 8, 3);
    c.send(b"abc");
    assert_eq!(c.simple(), (0, 14));
    c.request(CMD_READ, 0, 15, 8, 3);
    assert_eq!(c.simple(), (0, 15));
    assert_eq!(c.read_n(3), b"abc");
}

#[test]
fn fatal_requests_close_only_that_connection() {
    // Goal: a huge write gets EINVAL and then a clean close (its payload cannot be skipped
    // safely); a bad request magic and an abrupt close mid-payload drop the connection; the
    // server keeps serving other clients.
    let t = TestServer::start();
    t.add_mem("a", MIB);

    let (mut c, _, _) = RawClient::open(t.port, "a", false);
    c.request(CMD_WRITE, 0, 1, 0, u32::MAX);
    assert_eq!(c.simple(), (EINVAL, 1));
    c.expect_closed();

    let (mut c, _, _) = RawClient::open(t.port, "a", false);
    c.send(&[0x55; 28]);
    c.expect_closed();

    let (mut c, _, _) = RawClient::open(t.port, "a", false);
    c.request(CMD_WRITE, 0, 1, 0, 65536);
    c.send(&[9u8; 1000]);
    drop(c);

    let (mut c, _, _) = RawClient::open(t.port, "a", false);
    c.request(CMD_READ, 0, 1, 0, 8);
    drop(c); // gone before reading the reply

    assert_still_serving(t.port, "a");
}

#[test]
fn structured_replies_carry_data_errors_and_status() {
    // Goal: with structured replies, reads come as one OFFSET_DATA chunk, device errors as
    // ERROR chunks with a message (simple replies carry only the code), a short read from a
    // buggy device becomes EIO rather than a malformed frame, and block status from a device
    // that describes nothing is still one valid descriptor.
    let t = TestServer::start();
    let bad = Arc::new(FailingDevice {
        inner: MemDevice::new(MIB),
        bad_from: MIB / 2,
        short_at: 4096,
    });
    t.add("bad", bad);
    let (mut c, _, flags) = RawClient::open(t.port, "bad", true);
    assert_ne!(flags & FLAG_SEND_DF, 0);

    c.request(CMD_WRITE, 0, 1, 0, 5);
    c.send(b"hello");
    assert_eq!(c.any_reply().payload, 0u32.to_be_bytes());
    c.request(CMD_READ, CMD_FLAG_DF, 2, 0, 5);
    let r = c.any_reply();
    assert_eq!(
        (r.kind, r.flags, r.handle),
        (REPLY_TYPE_OFFSET_DATA, REPLY_FLAG_DONE, 2)
    );
    assert_eq!(&r.payload[0..8], &0u64.to_be_bytes());
    assert_eq!(&r.payload[8..], b"hello");

    c.request(CMD_READ, 0, 3, MIB / 2, 512);
    let r = c.any_reply();
    assert_eq!(
        (r.kind, r.flags, r.handle),
        (REPLY_TYPE_ERROR, REPLY_FLAG_DONE, 3)
    );
    assert_eq!(&r.payload[0..4], &EIO.to_be_bytes());
    let msg_len = u16::from_be_bytes([r.payload[4], r.payload[5]]) as usize;
    assert!(String::from_utf8_lossy(&r.payload[6..6 + msg_len]).contains("injected"));

    c.request(CMD_READ, 0, 4, 4096, 512);
    let r = c.any_reply();
    assert_eq!(
        (r.kind, &r.payload[0..4]),
        (REPLY_TYPE_ERROR, &EIO.to_be_bytes()[..])
    );

    c.request(CMD_WRITE, 0, 5, MIB / 2, 1);
    c.send(b"x");
    let r = c.any_reply();
    assert_eq!(
        (r.kind, &r.payload[0..4]),
        (REPLY_TYPE_ERROR, &ENOSPC.to_be_bytes()[..])
    );

    c.request(CMD_FLUSH, 0, 6, 0, 0);
    assert_eq!(&c.any_reply().payload[0..4], &EIO.to_be_bytes());

    c.request(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 7, 512, 1000);
    let r = c.any_reply();
    assert_eq!(r.kind, REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(r.payload.len(), 12);
    assert_eq!(&r.payload[0..4], &BASE_ALLOCATION_ID.to_be_bytes());
    assert_eq!(&r.payload[4..8], &1000u32.to_be_bytes());

    c.request(CMD_READ, 0, 8, 0, 0);
    let r = c.any_reply();
    assert_eq!((r.kind, r.flags), (REPLY_TYPE_NONE, REPLY_FLAG_DONE));

    // Without structured replies the error is a bare code and no data follows.
    let (mut c, _, _) = RawClient::open(t.port, "bad", false);
    c.request(CMD_READ, 0, 9, MIB / 2, 512);
    assert_eq!(c.simple(), (EIO, 9));
    c.request(CMD_READ, 0, 10, 0, 5);
    assert_eq!(c.simple(), (0, 10));
    assert_eq!(c.read_n(5), b"hello");
}

#[test]
fn read_only_export_refuses_writes() {
    // Goal: a read-only device is advertised READ_ONLY without write features, writes get
    // EPERM, and reads still work.
    let t = TestServer::start();
    t.add("ro", Arc::new(MemDevice::read_only_with(MIB, b"frozen")));
    let (mut c, _, flags) = RawClient::open(t.port, "ro", false);
    assert_ne!(flags & FLAG_READ_ONLY, 0);
    assert_eq!(flags & (FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES), 0);
    c.request(CMD_WRITE, 0, 1, 0, 2);
    c.send(b"no");
    assert_eq!(c.simple(), (EPERM, 1));
    c.request(CMD_TRIM, 0, 2, 0, 2);
    assert_eq!(c.simple(), (EPERM, 2));
    c.request(CMD_READ, 0, 3, 0, 6);
    assert_eq!(c.simple(), (0, 3));
    assert_eq!(c.read_n(6), b"frozen");
}

#[test]
fn replies_come_out_of_order() {
    // Goal: requests on one connection run concurrently: a fast read sent after a slow one
    // is answered first, and many pipelined requests all get answered.
    let t = TestServer::start();
    let slow = SlowDevice {
        inner: MemDevice::new(2 * MIB),
        slow_from: MIB,
        delay: Duration::from_millis(300),
    };
    t.add("slow", Arc::new(slow));
    let (mut c, _, _) = RawClient::open(t.port, "slow", false);
    c.request(CMD_READ, 0, 1, MIB, 8);
    c.request(CMD_READ, 0, 2, 0, 8);
    assert_eq!(c.simple(), (0, 2), "fast request answered first");
    c.read_n(8);
    assert_eq!(c.simple(), (0, 1));
    c.read_n(8);

    // 200 slow requests pipelined finish in about one delay, not 200 of them.
    let started = Instant::now();
    for h in 0..200u64 {
        c.request(CMD_WRITE, 0, h, MIB + h * 8, 8);
        c.send(&h.to_be_bytes());
    }
    let mut seen = std::collections::HashSet::new();
    for _ in 0..200 {
        let (err, h) = c.simple();
        assert_eq!(err, 0);
        assert!(seen.insert(h));
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn disconnect_finishes_in_flight_requests_first() {
    // Goal: after NBD_CMD_DISC the server still answers outstanding requests, then closes.
    let t = TestServer::start();
    let slow = SlowDevice {
        inner: MemDevice::new(2 * MIB),
        slow_from: 0,
        delay: Duration::from_millis(200),
    };
    t.add("slow", Arc::new(slow));
    let (mut c, _, _) = RawClient::open(t.port, "slow", false);
    c.request(CMD_WRITE, 0, 1, 0, 4);
    c.send(b"data");
    c.request(CMD_DISC, 0, 2, 0, 0);
    assert_eq!(c.simple(), (0, 1));
    c.expect_closed();
}

#[test]
fn shutdown_drains_in_flight_requests_and_stops_accepting() {
    // Goal: on shutdown an in-flight request still gets its reply, the connection then
    // closes, negotiating clients are dropped, and the listener stops accepting.
    let t = TestServer::start();
    let slow = SlowDevice {
        inner: MemDevice::new(MIB),
        slow_from: 0,
        delay: Duration::from_millis(500),
    };
    t.add("slow", Arc::new(slow));
    let (mut busy, _, _) = RawClient::open(t.port, "slow", false);
    let mut idle = RawClient::negotiating(t.port);
    busy.request(CMD_READ, 0, 1, 0, 16);
    std::thread::sleep(Duration::from_millis(100));
    let port = t.port;
    let took = std::thread::scope(|s| {
        let stopper = s.spawn(|| t.stop());
        assert_eq!(busy.simple(), (0, 1));
        busy.read_n(16);
        busy.expect_closed();
        idle.expect_closed();
        stopper.join().expect("stop thread")
    });
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn serve_connection_works_over_any_stream() {
    // Goal: serve_connection drives a session over an in-memory duplex pipe.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let exports = Arc::new(ExportMap::new());
        exports.insert("m", "", Arc::new(MemDevice::new(MIB)));
        exports.set_default(Some("m".into()));
        let server = Server::new(exports);
        let (mut client, conn) = tokio::io::duplex(1 << 16);
        let task = tokio::spawn(async move { server.serve_connection(conn).await });
        let mut greeting = [0u8; 18];
        client.read_exact(&mut greeting).await.unwrap();
        client.write_all(&3u32.to_be_bytes()).await.unwrap();
        let mut opt = IHAVEOPT.to_be_bytes().to_vec();
        opt.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
        opt.extend_from_slice(&0u32.to_be_bytes()); // "" = default export
        client.write_all(&opt).await.unwrap();
        assert_eq!(client.read_u64().await.unwrap(), MIB);
        client.read_u16().await.unwrap();
        let disc = basalt_nbd::request::Request {
            flags: 0,
            kind: CMD_DISC,
            handle: 0,
            offset: 0,
            length: 0,
        };
        client.write_all(&disc.encode()).await.unwrap();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        task.await.unwrap().unwrap();
    });
}
