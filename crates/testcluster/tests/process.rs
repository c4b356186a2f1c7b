//! Tests of processes on hosts: identity, logs, and the process faults.

mod common;

use basalt_testcluster::{Net, ProcessSpec};
use common::{pid_alive, proc_state};
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

fn sh(script: &str) -> ProcessSpec {
    ProcessSpec::new("sh").args(["-c", script])
}

// Goal: a spawned pid is the program itself (ip netns exec execs), inside the host's
// namespace, with its output in its log.
#[test]
fn spawned_pid_is_the_program_in_the_host_namespace() {
    let net = Net::new().unwrap();
    let h = net.add_host("h").unwrap();
    let p = net
        .spawn(&h, sh("echo hello from $$; exec sleep 30"))
        .unwrap();
    let line = p
        .wait_for_line("hello from", Duration::from_secs(5))
        .unwrap();
    assert_eq!(line, format!("hello from {}", p.pid()));
    let comm = std::fs::read_to_string(format!("/proc/{}/comm", p.pid())).unwrap();
    assert_eq!(comm.trim(), "sleep");
    let ns_of = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_ne!(ns_of(&p.pid().to_string()), ns_of("self"));
    assert!(p.log().contains("hello from"));
    assert!(p.log_path().starts_with(net.dir()));
}

// Goal: stop() freezes the process (state T, no progress), cont() lets it run on.
#[test]
fn stop_and_cont() {
    let net = Net::new().unwrap();
    let h = net.add_host("h").unwrap();
    let p = net
        .spawn(&h, sh("while :; do echo tick; sleep 0.02; done"))
        .unwrap();
    p.wait_for_line("tick", Duration::from_secs(5)).unwrap();
    p.stop().unwrap();
    assert_eq!(proc_state(p.pid()), Some('T'));
    assert!(p.is_running(), "a stopped process is still alive");
    let frozen = p.log().len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(p.log().len(), frozen, "a stopped process printed");
    p.cont().unwrap();
    assert_ne!(proc_state(p.pid()), Some('T'));
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.log().len() == frozen {
        assert!(Instant::now() < deadline, "no output after cont");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// Goal: kill9() ends the process at once; restart() starts a new one on the same log, and
// refuses while the old one runs.
#[test]
fn kill9_then_restart() {
    let net = Net::new().unwrap();
    let h = net.add_host("h").unwrap();
    let p = net.spawn(&h, sh("echo started $$; exec sleep 30")).unwrap();
    p.wait_for_line("started", Duration::from_secs(5)).unwrap();
    assert!(p.restart().is_err(), "restart while running must fail");
    let old = p.pid();
    p.kill9().unwrap();
    assert!(!pid_alive(old));
    assert!(!p.is_running());
    assert_eq!(p.exit_status().unwrap().signal(), Some(libc::SIGKILL));
    p.restart().unwrap();
    assert_ne!(p.pid(), old);
    assert!(pid_alive(p.pid()));
    // wait_for_line only looks at the new incarnation's output.
    let line = p.wait_for_line("started", Duration::from_secs(5)).unwrap();
    assert_eq!(line, format!("started {}", p.pid()));
    assert_eq!(p.log().matches("started").count(), 2);
}

// Goal: terminate() lets a process exit on SIGTERM, and SIGKILLs one that ignores it.
#[test]
fn terminate_is_clean_then_forced() {
    let net = Net::new().unwrap();
    let h = net.add_host("h").unwrap();
    let polite = net
        .spawn(
            &h,
            sh("trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done"),
        )
        .unwrap();
    polite
        .wait_for_line("ready", Duration::from_secs(5))
        .unwrap();
    let status = polite.terminate(Duration::from_secs(5)).unwrap();
    assert_eq!(status.code(), Some(3));
    assert!(polite.log().contains("got-term"));

    let stubborn = net
        .spawn(
            &h,
            sh("trap '' TERM; echo ready; while :; do sleep 0.05; done"),
        )
        .unwrap();
    stubborn
        .wait_for_line("ready", Duration::from_secs(5))
        .unwrap();
    let start = Instant::now();
    let status = stubborn.terminate(Duration::from_millis(300)).unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    assert!(start.elapsed() < Duration::from_secs(5));
}

// Goal: waits are bounded: wait_for_line times out, fails early when the process exits, and
// run() kills a command that overruns.
#[test]
fn waits_are_bounded() {
    let net = Net::new().unwrap();
    let h = net.add_host("h").unwrap();
    let quiet = net.spawn(&h, sh("echo hello; exec sleep 30")).unwrap();
    let start = Instant::now();
    let err = quiet
        .wait_for_line("never", Duration::from_millis(300))
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(
        format!("{err:#}").contains("hello"),
        "error quotes the log: {err:#}"
    );

    let short = net.spawn(&h, sh("echo bye")).unwrap();
    let start = Instant::now();
    let err = short
        .wait_for_line("never", Duration::from_secs(20))
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(format!("{err:#}").contains("exited"), "{err:#}");

    let out = net
        .run(
            &h,
            sh("echo out; echo err >&2; exit 4"),
            Duration::from_secs(5),
        )
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
    assert_eq!(out.status.code(), Some(4));
    let start = Instant::now();
    assert!(net
        .run(
            &h,
            ProcessSpec::new("sleep").arg("30"),
            Duration::from_millis(200)
        )
        .is_err());
    assert!(start.elapsed() < Duration::from_secs(3));
}
