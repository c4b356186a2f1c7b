//! The S3 gateway's limits against misbehaving clients: an upload whose client stalls
//! mid-body is cut off after the idle timeout and nothing of it becomes visible; beyond the
//! connection cap a new connection gets 503 SlowDown, and service resumes below it.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
#[allow(dead_code)]
mod s3;

use basalt_s3client::{amz_date, Connection, Signer};
use common::*;
use s3::credentials;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime};

const UNSIGNED: &str = "UNSIGNED-PAYLOAD";

fn signer(cluster: &Cluster) -> Signer {
    let (access, secret) = credentials(cluster.data_dir());
    Signer::new(&access, &secret, "us-east-1")
}

fn status(cluster: &Cluster, method: &str, path: &str) -> u16 {
    let addr = cluster.s3_addr.unwrap().to_string();
    let mut conn = Connection::new(&addr, &signer(cluster));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(conn.send(method, path, "", &[], b"", UNSIGNED))
        .unwrap()
}

/// Everything an answer says until the server closes (bounded by the read timeout).
fn read_all(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Goal: a PUT that sends 64 KiB of a declared 1 MiB and stops is cut off once the body idle
/// timeout passes (not held open), and the key does not exist afterwards.
#[test]
fn a_stalled_upload_is_cut_off_and_leaves_nothing() {
    let cluster = Cluster::start_with(&["--s3-body-idle-timeout", "2"]);
    assert_eq!(status(&cluster, "PUT", "/stall"), 200, "create the bucket");
    let addr = cluster.s3_addr.unwrap();
    let date = amz_date(SystemTime::now());
    let host = addr.to_string();
    let length = (1 << 20).to_string();
    let headers = [
        ("content-length", length.as_str()),
        ("host", host.as_str()),
        ("x-amz-content-sha256", UNSIGNED),
        ("x-amz-date", date.as_str()),
    ];
    let auth = signer(&cluster).authorization("PUT", "/stall/key", "", &headers, UNSIGNED, &date);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut head = format!("PUT /stall/key HTTP/1.1\r\nAuthorization: {auth}\r\n");
    for (n, v) in headers {
        head.push_str(&format!("{n}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&vec![0x61; 64 << 10]).unwrap();
    let stalled = Instant::now();
    let answer = read_all(&mut s);
    let waited = stalled.elapsed();
    assert!(
        waited < Duration::from_secs(30),
        "the stalled upload was held {waited:?} (timeout 2 s)"
    );
    assert!(
        waited >= Duration::from_millis(1500),
        "answered after {waited:?}, before the body stalled long enough: {answer}"
    );
    assert!(
        !answer.starts_with("HTTP/1.1 200"),
        "a cut-off PUT succeeded: {answer}"
    );
    assert!(
        !answer.starts_with("HTTP/1.1 403"),
        "the request was not even accepted: {answer}"
    );
    assert_eq!(
        status(&cluster, "HEAD", "/stall/key"),
        404,
        "nothing became visible"
    );
    // The gateway still serves.
    assert_eq!(status(&cluster, "GET", "/stall"), 200);
}

/// Goal: with a cap of 4 connections, a fifth is answered 503 SlowDown (S3's XML, counted in
/// the metrics) and closed; once one closes, new connections are served again.
#[test]
fn beyond_the_connection_cap_clients_get_slow_down() {
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics = format!("127.0.0.1:{metrics_port}");
    let cluster = Cluster::start_with(&["--s3-max-connections", "4", "--metrics-listen", &metrics]);
    let addr = cluster.s3_addr.unwrap();
    // Four idle connections hold the four slots (the head timeout would end them in 30 s).
    let mut held: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut fifth = TcpStream::connect(addr).unwrap();
    fifth
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let answer = read_all(&mut fifth);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("<Code>SlowDown</Code>"), "{answer}");
    assert!(answer.contains("<RequestId>"), "{answer}");
    let text = http_get(&metrics, "/metrics");
    assert!(
        text.contains("basalt_s3_connections_refused_total 1"),
        "{text}"
    );

    held.pop();
    // Bound: the freed slot is noticed when its connection ends; 50 tries of 100 ms.
    let mut served = false;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let a = read_all(&mut s);
        if !a.starts_with("HTTP/1.1 503") {
            // Anonymous ListBuckets: refused by authorization, but served, not SlowDown.
            assert!(a.starts_with("HTTP/1.1 403"), "{a}");
            served = true;
            break;
        }
    }
    assert!(
        served,
        "no connection was served after one of the four closed"
    );
    drop(held);
}

/// `GET path` over plain HTTP/1.1; the body.
fn http_get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    read_all(&mut s)
}
