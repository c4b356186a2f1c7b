//! Tests of the test network: reachability, partitions, bandwidth caps, the loopback fallback.

mod common;

use basalt_testcluster::Net;
use common::{cut, download, have_nft, reaches, serve};
use std::collections::HashSet;
use std::time::{Duration, Instant};

// Goal: hosts reach each other and the root namespace over TCP; partition cuts exactly the
// named pairs, partition_all cuts everything, heal restores it.
#[test]
fn partition_cuts_tcp_and_heal_restores_it() {
    let net = Net::new().unwrap();
    assert!(
        net.isolated(),
        "namespace mode expected when running as root"
    );
    let (a, b, c) = (
        net.add_host("a").unwrap(),
        net.add_host("b").unwrap(),
        net.add_host("c").unwrap(),
    );
    assert_ne!(a.ip, b.ip);
    assert!(a.netns.is_some());
    let server = serve(&a, 7000, 0);
    assert!(reaches(Some(&b), server.addr), "b -> a before partition");
    assert!(reaches(Some(&c), server.addr), "c -> a before partition");
    assert!(reaches(None, server.addr), "root -> a before partition");

    net.partition(&a, &[&b]).unwrap();
    assert!(cut(Some(&b), server.addr), "b -> a while partitioned");
    assert!(reaches(Some(&c), server.addr), "c -> a is not partitioned");
    // The other direction is cut too: b's server is unreachable from a.
    let server_b = serve(&b, 7001, 0);
    assert!(cut(Some(&a), server_b.addr), "a -> b while partitioned");
    assert!(
        reaches(Some(&c), server_b.addr),
        "c -> b is not partitioned"
    );

    net.heal(&a).unwrap();
    assert!(reaches(Some(&b), server.addr), "b -> a after heal");
    assert!(reaches(Some(&a), server_b.addr), "a -> b after heal");

    net.partition_all(&a).unwrap();
    assert!(cut(Some(&b), server.addr), "b -> a while a is cut off");
    assert!(cut(Some(&c), server.addr), "c -> a while a is cut off");
    assert!(cut(None, server.addr), "root -> a while a is cut off");
    assert!(cut(Some(&a), server_b.addr), "a -> b while a is cut off");
    assert!(reaches(Some(&a), server.addr), "a still reaches itself");

    net.heal_all().unwrap();
    assert!(reaches(Some(&b), server.addr), "b -> a after heal_all");
    assert!(reaches(None, server.addr), "root -> a after heal_all");
}

// Goal: a tbf cap really slows a transfer into the host, and clearing it restores speed.
#[test]
fn bandwidth_limit_slows_transfers() {
    let net = Net::new().unwrap();
    let (a, b) = (net.add_host("a").unwrap(), net.add_host("b").unwrap());
    let payload_bytes = 256 * 1024;
    let server = serve(&b, 7000, payload_bytes);
    net.limit_bandwidth(&a, 1000).unwrap();
    let start = Instant::now();
    assert_eq!(download(&a, server.addr), payload_bytes + 1);
    let capped = start.elapsed();
    // 256 KiB at 1000 kbit/s is ~2.1 s (less a 16 KiB burst).
    assert!(
        capped >= Duration::from_millis(1500),
        "capped transfer took {capped:?}"
    );
    net.clear_bandwidth_limit(&a).unwrap();
    let start = Instant::now();
    assert_eq!(download(&a, server.addr), payload_bytes + 1);
    let free = start.elapsed();
    assert!(
        free < Duration::from_millis(700),
        "uncapped transfer took {free:?}"
    );
}

// Goal: concurrently created Nets get distinct subnets and bridges.
#[test]
fn concurrent_nets_do_not_collide() {
    let nets: Vec<Net> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| Net::new().unwrap())).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let hosts: Vec<_> = nets.iter().map(|n| n.add_host("x").unwrap()).collect();
    for (i, x) in hosts.iter().enumerate() {
        for y in &hosts[i + 1..] {
            assert_ne!(x.ip, y.ip);
            assert_ne!(x.netns, y.netns);
        }
    }
    let bridges: HashSet<_> = nets.iter().map(|n| n.bridge().unwrap()).collect();
    assert_eq!(bridges.len(), 3);
    // Each host reaches its own Net's root address, proving the subnets are usable.
    for (net, host) in nets.iter().zip(&hosts) {
        let root = net.root_ip().unwrap();
        let server = serve(host, 7000, 0);
        assert!(reaches(None, server.addr));
        assert_eq!(root.octets()[..3], host.ip.octets()[..3]);
    }
}

// Goal: the loopback fallback gives distinct 127.x addresses that serve TCP, and partitions
// there cut traffic to the host's address (they need nft and root: without, the test fails).
#[test]
fn loopback_fallback_serves_and_partitions() {
    let net = Net::new_loopback().unwrap();
    assert!(!net.isolated());
    assert_eq!(net.bridge(), None);
    let (a, b) = (net.add_host("a").unwrap(), net.add_host("b").unwrap());
    assert_eq!(a.ip.octets()[0], 127);
    assert_ne!(a.ip, b.ip);
    assert_eq!(a.netns, None);
    let server = serve(&a, 7000, 0);
    assert!(reaches(Some(&b), server.addr));
    assert!(net.limit_bandwidth(&a, 1000).is_err());
    assert!(
        have_nft(),
        "`nft` is not installed (Debian package nftables)"
    );
    // SAFETY: geteuid(2) cannot fail.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(uid, 0, "not root: nftables rules need root");
    net.partition_all(&a).unwrap();
    assert!(cut(Some(&b), server.addr), "a's address cut off");
    let server_b = serve(&b, 7001, 0);
    assert!(reaches(None, server_b.addr), "b is not partitioned");
    net.heal(&a).unwrap();
    assert!(reaches(Some(&b), server.addr), "after heal");
}
