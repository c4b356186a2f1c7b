//! Tests that nothing outlives a Net: on drop, on panic, and after its process was killed.

mod common;

use basalt_testcluster::{cleanup_stale, Net, ProcessSpec};
use common::{link_exists, netns_list, pid_alive};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Set in the environment of the helper test that leaves leftovers behind.
const HELPER_ENV: &str = "BASALT_TESTCLUSTER_LEFTOVER_HELPER";

/// What a Net made, to check it is gone afterwards.
#[derive(Debug, Default, Clone)]
struct Made {
    netns: Vec<String>,
    links: Vec<String>,
    pids: Vec<u32>,
    dir: PathBuf,
}

/// Builds a Net with two hosts, a process on each and a partition, and reports it.
fn populate(net: &Net) -> Made {
    let mut made = Made {
        dir: net.dir().to_path_buf(),
        links: vec![net
            .bridge()
            .expect("populate needs a Net with namespaces, not loopback mode")
            .to_string()],
        ..Made::default()
    };
    for name in ["a", "b"] {
        let h = net.add_host(name).expect("add host");
        made.netns.push(
            h.netns
                .clone()
                .expect("a host of a Net with namespaces has one"),
        );
        let p = net
            .spawn(&h, ProcessSpec::new("sleep").arg("60"))
            .expect("spawn sleep");
        made.pids.push(p.pid());
    }
    let hosts = net.hosts();
    net.partition(&hosts[0], &[&hosts[1]]).expect("partition");
    made
}

fn assert_gone(made: &Made) {
    let listed = netns_list();
    for ns in &made.netns {
        assert!(
            !listed.contains(ns.as_str()),
            "namespace {ns} left: {listed}"
        );
    }
    for link in &made.links {
        assert!(!link_exists(link), "link {link} left");
    }
    for pid in &made.pids {
        assert!(!pid_alive(*pid), "process {pid} left");
    }
    assert!(!made.dir.exists(), "{} left", made.dir.display());
}

// Goal: dropping a Net kills its processes and removes its namespaces, bridge and files.
#[test]
fn drop_removes_everything() {
    let net = Net::new().unwrap();
    let made = populate(&net);
    assert!(netns_list().contains(made.netns[0].as_str()));
    assert!(pid_alive(made.pids[0]));
    drop(net);
    assert_gone(&made);
}

// Goal: a test that panics still removes its Net (Drop runs during unwinding).
#[test]
fn drop_cleans_up_when_the_test_panics() {
    let made = Mutex::new(Made::default());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let net = Net::new().unwrap();
        *made.lock().unwrap() = populate(&net);
        panic!("deliberate panic to test cleanup");
    }));
    assert!(result.is_err());
    let made = made.into_inner().unwrap();
    assert_eq!(made.netns.len(), 2);
    assert_gone(&made);
}

// Helper, run as a separate process by the next test: builds a Net, prints what it made and
// SIGKILLs itself so that no Drop runs.
#[test]
#[ignore = "helper process of cleanup_stale_removes_leftovers_of_a_killed_process"]
fn helper_leave_leftovers() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    let net = Net::new().unwrap();
    let made = populate(&net);
    println!(
        "LEFTOVERS {} {} {} {}",
        made.netns.join(","),
        made.links.join(","),
        made.pids
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(","),
        made.dir.display()
    );
    // SAFETY: kill(2) on ourselves: the point is to die without unwinding.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

// Goal: cleanup_stale() removes what a SIGKILLed test process left: processes, namespaces,
// bridge, temporary directory.
#[test]
fn cleanup_stale_removes_leftovers_of_a_killed_process() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "helper_leave_leftovers",
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "helper did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("LEFTOVERS "))
        .unwrap_or_else(|| panic!("helper printed no LEFTOVERS line: {out}"));
    let fields: Vec<&str> = line.split(' ').collect();
    let made = Made {
        netns: fields[0].split(',').map(String::from).collect(),
        links: fields[1].split(',').map(String::from).collect(),
        pids: fields[2].split(',').map(|p| p.parse().unwrap()).collect(),
        dir: PathBuf::from(fields[3]),
    };
    // The helper died without cleaning up (unless a concurrent Net::new swept it already).
    let listed = netns_list();
    if listed.contains(made.netns[0].as_str()) {
        assert!(pid_alive(made.pids[0]), "leftover process should still run");
    }
    cleanup_stale().unwrap();
    assert_gone(&made);
}
