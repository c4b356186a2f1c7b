//! Bad NBD input against the full `basalt up` server over raw TCP: a broken handshake, an
//! unknown export and out-of-range requests get the protocol's answers, and the server keeps
//! serving other clients afterwards.
//!
//! Wire constants are those of the NBD protocol document (repository NetworkBlockDevice/nbd,
//! file doc/proto.md). Everything on the wire is big-endian.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// "NBDMAGIC": the first 8 bytes the server sends.
const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": second server magic (newstyle) and the prefix of every client option.
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Handshake flags (server): fixed newstyle, may omit the 124 zero bytes.
const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flags: the client speaks fixed newstyle / wants no zero padding.
const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;
/// Options.
const NBD_OPT_EXPORT_NAME: u32 = 1;
const NBD_OPT_ABORT: u32 = 2;
const NBD_OPT_LIST: u32 = 3;
const NBD_OPT_GO: u32 = 7;
/// An option code no server knows (answered with NBD_REP_ERR_UNSUP).
const UNKNOWN_OPTION: u32 = 0x0bad_0bad;
/// Option reply types.
const NBD_REP_ACK: u32 = 1;
const NBD_REP_SERVER: u32 = 2;
const NBD_REP_INFO: u32 = 3;
/// Error replies have bit 31 set.
const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR + 1;
const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR + 6;
/// NBD_INFO_EXPORT: u16 type, u64 size, u16 transmission flags.
const NBD_INFO_EXPORT: u16 = 0;
/// Transmission flags.
const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
/// Transmission request: u32 magic, u16 flags, u16 type, u64 cookie, u64 offset, u32 length.
const NBD_REQUEST_MAGIC: u32 = 0x2560_9513;
/// Simple reply: u32 magic, u32 error, u64 cookie (then data for a successful READ).
const NBD_SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Commands.
const NBD_CMD_READ: u16 = 0;
const NBD_CMD_WRITE: u16 = 1;
const NBD_CMD_DISC: u16 = 2;
const NBD_CMD_FLUSH: u16 = 3;
const NBD_CMD_CACHE: u16 = 5;
/// Command flag: force unit access (the write is durable when acknowledged).
const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
/// Transmission flags the export must advertise for the contract's commands.
const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
const NBD_FLAG_SEND_CACHE: u16 = 1 << 10;
/// Error values (errno numbers fixed by the protocol).
const NBD_EINVAL: u32 = 22;
const NBD_ENOSPC: u32 = 28;

/// Bound on every blocking read, so a server that stops answering fails the test.
const IO_TIMEOUT: Duration = Duration::from_secs(20);

struct Conn {
    s: TcpStream,
    /// Both sides agreed to drop the 124 zero bytes after OPT_EXPORT_NAME.
    no_zeroes: bool,
}

/// One option reply.
#[derive(Debug)]
struct OptReply {
    option: u32,
    kind: u32,
    data: Vec<u8>,
}

impl Conn {
    /// Connect and finish the server greeting and the client flags (fixed newstyle).
    fn handshake(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.set_read_timeout(Some(IO_TIMEOUT)).expect("read timeout");
        s.set_write_timeout(Some(IO_TIMEOUT))
            .expect("write timeout");
        let mut c = Conn {
            s,
            no_zeroes: false,
        };
        assert_eq!(c.u64(), NBDMAGIC, "server greeting magic");
        assert_eq!(c.u64(), IHAVEOPT, "server newstyle magic");
        let flags = c.u16();
        assert!(
            flags & NBD_FLAG_FIXED_NEWSTYLE != 0,
            "server must speak fixed newstyle, flags {flags:#x}"
        );
        let mut client_flags = NBD_FLAG_C_FIXED_NEWSTYLE;
        if flags & NBD_FLAG_NO_ZEROES != 0 {
            client_flags |= NBD_FLAG_C_NO_ZEROES;
            c.no_zeroes = true;
        }
        c.send(&client_flags.to_be_bytes());
        c
    }

    fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).expect("send to the NBD server");
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        self.s
            .read_exact(&mut b)
            .unwrap_or_else(|e| panic!("read {n} bytes from the NBD server: {e}"));
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.bytes(2).try_into().expect("2 bytes"))
    }

    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.bytes(4).try_into().expect("4 bytes"))
    }

    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.bytes(8).try_into().expect("8 bytes"))
    }

    fn option(&mut self, code: u32, data: &[u8]) {
        let mut b = Vec::with_capacity(16 + data.len());
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&code.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.send(&b);
    }

    fn reply(&mut self) -> OptReply {
        assert_eq!(self.u64(), OPT_REPLY_MAGIC, "option reply magic");
        let option = self.u32();
        let kind = self.u32();
        let len = self.u32();
        assert!(len <= 1 << 20, "option reply of {len} bytes");
        let data = self.bytes(len as usize);
        OptReply { option, kind, data }
    }

    /// Send OPT_GO for `name` (no information requests).
    fn go(&mut self, name: &str) {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&0u16.to_be_bytes());
        self.option(NBD_OPT_GO, &d);
    }

    /// OPT_GO `name` and read the replies up to ACK; returns (size, transmission flags).
    fn go_ok(&mut self, name: &str) -> (u64, u16) {
        self.go(name);
        let mut export = None;
        for _ in 0..16 {
            let r = self.reply();
            assert_eq!(r.option, NBD_OPT_GO, "reply to OPT_GO: {r:?}");
            match r.kind {
                NBD_REP_INFO => {
                    assert!(r.data.len() >= 2, "short NBD_REP_INFO: {r:?}");
                    let info = u16::from_be_bytes([r.data[0], r.data[1]]);
                    if info == NBD_INFO_EXPORT {
                        assert_eq!(r.data.len(), 12, "NBD_INFO_EXPORT length: {r:?}");
                        let size = u64::from_be_bytes(r.data[2..10].try_into().expect("8"));
                        let flags = u16::from_be_bytes([r.data[10], r.data[11]]);
                        export = Some((size, flags));
                    }
                }
                NBD_REP_ACK => {
                    return export.expect("OPT_GO acknowledged without NBD_INFO_EXPORT");
                }
                other => panic!("unexpected reply {other:#x} to OPT_GO {name:?}: {r:?}"),
            }
        }
        panic!("no NBD_REP_ACK within 16 replies to OPT_GO");
    }

    fn request(&mut self, kind: u16, cookie: u64, offset: u64, len: u32, payload: &[u8]) {
        self.request_flags(0, kind, cookie, offset, len, payload);
    }

    fn request_flags(
        &mut self,
        flags: u16,
        kind: u16,
        cookie: u64,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) {
        let mut b = Vec::with_capacity(28 + payload.len());
        b.extend_from_slice(&NBD_REQUEST_MAGIC.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&kind.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(payload);
        self.send(&b);
    }

    /// Read a simple reply header; returns the error value.
    fn simple_reply(&mut self, cookie: u64) -> u32 {
        assert_eq!(self.u32(), NBD_SIMPLE_REPLY_MAGIC, "simple reply magic");
        let error = self.u32();
        assert_eq!(self.u64(), cookie, "reply cookie");
        error
    }

    /// Expect the server to close the connection without sending anything.
    fn expect_closed(&mut self, what: &str) {
        let mut b = [0u8; 64];
        match self.s.read(&mut b) {
            Ok(0) => {}
            Ok(n) => panic!(
                "{what}: server sent {n} bytes instead of closing: {:02x?}",
                &b[..n]
            ),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("{what}: server kept the connection open for {IO_TIMEOUT:?}")
            }
            Err(e) => panic!("{what}: unexpected error instead of a close: {e}"),
        }
    }
}

/// After bad input: a fresh raw client lists and opens vol0, and qemu-io reads and writes.
fn assert_server_still_serves(cluster: &Cluster) {
    let mut c = Conn::handshake(cluster.nbd_addr);
    c.option(NBD_OPT_LIST, &[]);
    let mut names = Vec::new();
    for _ in 0..64 {
        let r = c.reply();
        assert_eq!(r.option, NBD_OPT_LIST, "{r:?}");
        match r.kind {
            NBD_REP_SERVER => {
                let len = u32::from_be_bytes(r.data[0..4].try_into().expect("4")) as usize;
                names.push(String::from_utf8_lossy(&r.data[4..4 + len]).into_owned());
            }
            NBD_REP_ACK => break,
            other => panic!("unexpected reply {other:#x} to OPT_LIST: {r:?}"),
        }
    }
    assert_eq!(
        names,
        vec!["vol0".to_string()],
        "exports listed by a fresh client"
    );
    let (size, _) = c.go_ok("vol0");
    assert_eq!(size, VOL0_BYTES);
    c.request(NBD_CMD_DISC, 99, 0, 0, &[]);
    c.expect_closed("after NBD_CMD_DISC");
    qemu_io_ok(
        &cluster.uri("vol0"),
        &["write -P 0x42 64k 64k", "read -P 0x42 64k 64k"],
    );
}

/// A client that sends a bad option magic after the greeting is disconnected (no reply),
/// and the server keeps serving other clients.
#[test]
fn bad_option_magic_closes_connection() {
    let cluster = Cluster::start();
    let mut c = Conn::handshake(cluster.nbd_addr);
    let mut bad = Vec::new();
    bad.extend_from_slice(b"BADMAGIC");
    bad.extend_from_slice(&NBD_OPT_GO.to_be_bytes());
    bad.extend_from_slice(&0u32.to_be_bytes());
    c.send(&bad);
    c.expect_closed("after a bad option magic");
    // Garbage instead of the client flags is no better for the server's health.
    let mut s = TcpStream::connect(cluster.nbd_addr).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
    drop(s);
    assert_server_still_serves(&cluster);
}

/// OPT_GO for an unknown export gets NBD_REP_ERR_UNKNOWN; an unknown option gets
/// NBD_REP_ERR_UNSUP; the same session can then still open vol0.
#[test]
fn unknown_export_and_option_are_refused_in_session() {
    let cluster = Cluster::start();
    let mut c = Conn::handshake(cluster.nbd_addr);
    c.go("no-such-volume");
    let r = c.reply();
    assert_eq!(r.option, NBD_OPT_GO, "{r:?}");
    assert_eq!(
        r.kind, NBD_REP_ERR_UNKNOWN,
        "OPT_GO of an unknown export: reply type {:#x}, want NBD_REP_ERR_UNKNOWN",
        r.kind
    );
    c.option(UNKNOWN_OPTION, &[]);
    let r = c.reply();
    assert_eq!(r.option, UNKNOWN_OPTION, "{r:?}");
    assert_eq!(
        r.kind, NBD_REP_ERR_UNSUP,
        "unknown option: reply {:#x}",
        r.kind
    );
    let (size, flags) = c.go_ok("vol0");
    assert_eq!(size, VOL0_BYTES, "vol0 size in NBD_INFO_EXPORT");
    assert!(flags & NBD_FLAG_HAS_FLAGS != 0, "flags {flags:#x}");
    assert!(
        flags & NBD_FLAG_READ_ONLY == 0,
        "vol0 is writable, flags {flags:#x}"
    );
    for (bit, name) in [
        (NBD_FLAG_SEND_FLUSH, "SEND_FLUSH"),
        (NBD_FLAG_SEND_FUA, "SEND_FUA"),
        (NBD_FLAG_SEND_TRIM, "SEND_TRIM"),
        (NBD_FLAG_SEND_WRITE_ZEROES, "SEND_WRITE_ZEROES"),
        (NBD_FLAG_CAN_MULTI_CONN, "CAN_MULTI_CONN"),
        (NBD_FLAG_SEND_CACHE, "SEND_CACHE"),
    ] {
        assert!(
            flags & bit != 0,
            "vol0 lacks NBD_FLAG_{name}: flags {flags:#x}"
        );
    }
    c.request(NBD_CMD_DISC, 1, 0, 0, &[]);
    c.expect_closed("after NBD_CMD_DISC");

    // OPT_ABORT ends a session cleanly too (the server may ACK first).
    let mut c = Conn::handshake(cluster.nbd_addr);
    c.option(NBD_OPT_ABORT, &[]);
    assert_server_still_serves(&cluster);
}

/// A READ past the end of the export gets an EINVAL reply (not a disconnect), a WRITE past
/// the end an error; the same connection then serves valid requests.
#[test]
fn out_of_range_requests_get_errors_not_disconnects() {
    let cluster = Cluster::start();
    let mut c = Conn::handshake(cluster.nbd_addr);
    let (size, _) = c.go_ok("vol0");
    assert_eq!(size, VOL0_BYTES);

    // Entirely past the end, then straddling the end.
    c.request(NBD_CMD_READ, 1, size, 4096, &[]);
    assert_eq!(c.simple_reply(1), NBD_EINVAL, "READ at the export size");
    c.request(NBD_CMD_READ, 2, size - 512, 4096, &[]);
    assert_eq!(c.simple_reply(2), NBD_EINVAL, "READ straddling the end");

    // A valid WRITE of the last 8 KiB, then a WRITE past the end: its payload must be
    // consumed and an error returned, leaving the device as the valid write made it.
    let data = pseudo_random(3, 8192);
    c.request(NBD_CMD_WRITE, 3, size - 8192, 8192, &data);
    assert_eq!(c.simple_reply(3), 0, "valid WRITE at the end");
    let junk = vec![0xffu8; 4096];
    c.request(NBD_CMD_WRITE, 4, size - 1024, 4096, &junk);
    let e = c.simple_reply(4);
    assert!(
        e == NBD_ENOSPC || e == NBD_EINVAL,
        "WRITE past the end: error {e}, want ENOSPC or EINVAL"
    );

    // The same connection still works: a FUA write, a CACHE hint, a FLUSH, reads.
    let fua = pseudo_random(4, 4096);
    c.request_flags(NBD_CMD_FLAG_FUA, NBD_CMD_WRITE, 9, 4096, 4096, &fua);
    assert_eq!(c.simple_reply(9), 0, "WRITE with FUA");
    c.request(NBD_CMD_CACHE, 10, 0, 128 * 1024, &[]);
    assert_eq!(c.simple_reply(10), 0, "CACHE");
    c.request(NBD_CMD_READ, 11, 4096, 4096, &[]);
    assert_eq!(c.simple_reply(11), 0, "READ of the FUA write");
    assert_same_bytes(&c.bytes(4096), &fua, "FUA write read back");
    c.request(NBD_CMD_FLUSH, 5, 0, 0, &[]);
    assert_eq!(c.simple_reply(5), 0, "FLUSH");
    c.request(NBD_CMD_READ, 6, size - 8192, 8192, &[]);
    assert_eq!(c.simple_reply(6), 0, "valid READ at the end");
    let back = c.bytes(8192);
    assert_same_bytes(&back, &data, "last 8 KiB read back on the same connection");
    c.request(NBD_CMD_DISC, 8, 0, 0, &[]);
    c.expect_closed("after NBD_CMD_DISC");

    assert_server_still_serves(&cluster);
}

/// NBD_OPT_EXPORT_NAME (the oldest way in): a known export answers size and flags and then
/// serves requests; an unknown one can only be refused by closing the connection.
#[test]
fn export_name_option_known_and_unknown() {
    let cluster = Cluster::start();
    let mut c = Conn::handshake(cluster.nbd_addr);
    c.option(NBD_OPT_EXPORT_NAME, b"vol0");
    // Reply: u64 size, u16 transmission flags, then 124 zero bytes unless NO_ZEROES.
    let size = c.u64();
    let flags = c.u16();
    if !c.no_zeroes {
        assert_eq!(
            c.bytes(124),
            vec![0u8; 124],
            "padding after OPT_EXPORT_NAME"
        );
    }
    assert_eq!(size, VOL0_BYTES, "export size after OPT_EXPORT_NAME");
    assert!(flags & NBD_FLAG_HAS_FLAGS != 0, "flags {flags:#x}");
    let data = pseudo_random(5, 4096);
    c.request(NBD_CMD_WRITE, 1, 8192, 4096, &data);
    assert_eq!(c.simple_reply(1), 0, "WRITE after OPT_EXPORT_NAME");
    c.request(NBD_CMD_READ, 2, 8192, 4096, &[]);
    assert_eq!(c.simple_reply(2), 0, "READ after OPT_EXPORT_NAME");
    assert_same_bytes(&c.bytes(4096), &data, "data after OPT_EXPORT_NAME");
    c.request(NBD_CMD_DISC, 3, 0, 0, &[]);
    c.expect_closed("after NBD_CMD_DISC");

    let mut c = Conn::handshake(cluster.nbd_addr);
    c.option(NBD_OPT_EXPORT_NAME, b"no-such-volume");
    c.expect_closed("after OPT_EXPORT_NAME of an unknown export");
    assert_server_still_serves(&cluster);
}

/// Abuse in transmission: a WRITE cut off mid-payload by a disconnect, a request with a bad
/// magic, and an oversized READ. Each may cost that client its connection, but the server
/// keeps serving everyone else.
#[test]
fn broken_transmission_requests_do_not_hurt_the_server() {
    let cluster = Cluster::start();

    // WRITE header for 64 KiB, then only 1 KiB of payload, then a disconnect.
    let mut c = Conn::handshake(cluster.nbd_addr);
    c.go_ok("vol0");
    c.request(NBD_CMD_WRITE, 1, 0, 64 * 1024, &[0x5au8; 1024]);
    drop(c);

    // A request with the wrong magic: the stream is no longer NBD, the server must close.
    let mut c = Conn::handshake(cluster.nbd_addr);
    c.go_ok("vol0");
    let mut bad = Vec::new();
    bad.extend_from_slice(&0xdead_beefu32.to_be_bytes());
    bad.extend_from_slice(&[0u8; 24]);
    c.send(&bad);
    c.expect_closed("after a request with a bad magic");

    // A READ far larger than the 32 MiB maximum: an EINVAL reply or a close, never a crash.
    let mut c = Conn::handshake(cluster.nbd_addr);
    c.go_ok("vol0");
    c.request(NBD_CMD_READ, 2, 0, 256 << 20, &[]);
    let mut head = [0u8; 16];
    match c.s.read_exact(&mut head) {
        Ok(()) => {
            let magic = u32::from_be_bytes(head[0..4].try_into().expect("4"));
            let error = u32::from_be_bytes(head[4..8].try_into().expect("4"));
            assert_eq!(magic, NBD_SIMPLE_REPLY_MAGIC, "reply to an oversized READ");
            assert_eq!(error, NBD_EINVAL, "error for a 256 MiB READ");
        }
        Err(e) => assert!(
            matches!(
                e.kind(),
                ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset
            ),
            "oversized READ: neither a reply nor a close: {e}"
        ),
    }

    // The cut-off write must not have been applied (its payload never arrived in full).
    qemu_io_ok(&cluster.uri("vol0"), &["read -P 0 0 64k"]);
    assert_server_still_serves(&cluster);
}
