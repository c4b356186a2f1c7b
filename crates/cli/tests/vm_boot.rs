//! VM images end to end: a Linux guest image (scripts/build-guest-image.sh) imported as
//! qcow2, cloned twice in O(1), and two QEMU guests booted from the clones over NBD at once;
//! each writes its own data and runs fio inside; the clones keep their own data and the
//! image stays byte for byte what was imported. Also the import's bad input.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest a guest may run (TCG boot, a 3 s fio, power off: ~10 s when alone).
const VM_TIMEOUT: Duration = Duration::from_secs(240);

fn image(cluster: &Cluster, args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
    cmd.arg("image")
        .arg("--control")
        .arg(&cluster.control)
        .args(args);
    run(&mut cmd, Duration::from_secs(300))
}

fn image_ok(cluster: &Cluster, args: &[&str]) -> String {
    let out = image(cluster, args);
    assert_ok(&out, &format!("basalt image {}", args.join(" ")));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Copy export `uri` into `dest` with nbdcopy.
fn copy_out(uri: &str, dest: &Path) {
    let out = run(
        Command::new(require_tool("nbdcopy", "libnbd-bin"))
            .arg(uri)
            .arg(dest),
        Duration::from_secs(300),
    );
    assert_ok(&out, &format!("nbdcopy {uri}"));
}

/// Goal: import → clone twice → boot two VMs from the clones at once; each guest sees the
/// image's root, writes its own data and runs fio; afterwards each clone holds its own
/// data, the image is unchanged, and `image rm` is refused until the clones are gone.
#[test]
fn two_vms_boot_from_clones_of_an_imported_image() {
    let guest = guest_image();
    let cluster = Cluster::start();
    let out = image_ok(
        &cluster,
        &[
            "import",
            guest.join("disk.qcow2").to_str().unwrap(),
            "guest",
        ],
    );
    assert!(
        out.contains("imported image \"guest\" (256.0 MiB, qcow2)"),
        "{out}"
    );
    for vm in ["vm1", "vm2"] {
        let out = cluster.volume_ok(&["create", vm, "--from-image", "guest"]);
        assert!(out.contains("as a clone of image guest"), "{out}");
    }
    let started = Instant::now();
    let mut vms = Vec::new();
    for vm in ["vm1", "vm2"] {
        let console = cluster.scratch().join(format!("{vm}.console"));
        vms.push((
            vm,
            boot_guest(&guest, &cluster.uri(vm), vm, 3, &console),
            console,
        ));
    }
    for (vm, mut child, console) in vms {
        let status = wait_timeout(&mut child, VM_TIMEOUT);
        let text = std::fs::read_to_string(&console).unwrap_or_default();
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(
            status.is_some(),
            "{vm} did not power off within {VM_TIMEOUT:?}:\n{text}"
        );
        for line in [
            "basalt-guest: root image basalt-test-image-v1",
            "basalt-guest: fio ok",
            "basalt-guest: done",
        ] {
            assert!(
                text.contains(line),
                "{vm}: no {line:?} on the console:\n{text}"
            );
        }
        assert!(!text.contains("FAILED"), "{vm}:\n{text}");
    }
    eprintln!(
        "two guests booted, ran fio and powered off in {:?}",
        started.elapsed()
    );

    for vm in ["vm1", "vm2"] {
        let raw = cluster.scratch().join(format!("{vm}.raw"));
        copy_out(&cluster.uri(vm), &raw);
        let out = run(
            Command::new(require_tool("debugfs", "e2fsprogs"))
                .args(["-R", "cat /vmdata"])
                .arg(&raw),
            Duration::from_secs(60),
        );
        assert_ok(&out, "debugfs cat /vmdata");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            vm,
            "{vm}'s file"
        );
        let bytes = std::fs::read(&raw).expect("read the clone");
        let area = &bytes[200 << 20..(200 << 20) + 4096];
        let want = format!("{vm}\n").repeat(4096 / (vm.len() + 1) + 1);
        assert_eq!(area, &want.as_bytes()[..4096], "{vm}'s raw area");
    }
    let copy = cluster.scratch().join("image.raw");
    copy_out(&cluster.uri("image:guest"), &copy);
    let out = run(
        Command::new("cmp").arg(&copy).arg(guest.join("disk.raw")),
        Duration::from_secs(60),
    );
    assert_ok(&out, "the image is byte for byte the imported disk");

    let refused = image(&cluster, &["rm", "guest"]);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(
        text(&refused).contains("vm1 (of image guest)"),
        "{}",
        text(&refused)
    );
    cluster.volume_ok(&["rm", "vm1"]);
    cluster.volume_ok(&["rm", "vm2"]);
    image_ok(&cluster, &["rm", "guest"]);
    assert!(!image_ok(&cluster, &["ls"]).contains("guest"));
}

/// Goal: a sparse raw file moves only its data; raw data from stdin imports with --size;
/// a truncated qcow2, a format Basalt does not import and a missing --size are refused
/// with a clear error and leave no image behind.
#[test]
fn imports_skip_holes_and_refuse_bad_input() {
    let cluster = Cluster::start();
    let dir = cluster.scratch();
    // 2 GiB raw with 4 MiB of data in two places.
    let sparse = dir.join("sparse.raw");
    let f = std::fs::File::create(&sparse).unwrap();
    f.set_len(2 << 30).unwrap();
    drop(f);
    qemu_io_ok(
        sparse.to_str().unwrap(),
        &["write -P 0x42 0 2M", "write -P 0x43 1G 2M"],
    );
    let before = cluster.used_bytes();
    let started = Instant::now();
    let out = image_ok(&cluster, &["import", sparse.to_str().unwrap(), "sparse"]);
    assert!(out.contains("(2.0 GiB, raw)"), "{out}");
    assert!(out.contains("4.0 MiB of data"), "{out}");
    let grew = cluster.used_bytes() - before;
    assert!(
        grew < 64 << 20,
        "a 2 GiB image with 4 MiB of data grew the cluster by {grew} bytes (3 replicas)"
    );
    eprintln!("sparse 2 GiB import: {:?}", started.elapsed());
    qemu_io_ok(
        &cluster.uri("image:sparse"),
        &["read -P 0x42 0 2M", "read -P 0 2M 1M", "read -P 0x43 1G 2M"],
    );

    // Raw from stdin.
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["image", "--control", &cluster.control.to_string()])
        .args(["import", "-", "piped", "--size", "8M"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start import");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&vec![0x77u8; 1 << 20]).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_ok(&out, "import from stdin");
    qemu_io_ok(
        &cluster.uri("image:piped"),
        &["read -P 0x77 0 1M", "read -P 0 1M 7M"],
    );

    // Bad input: nothing stays behind.
    let qcow = dir.join("t.qcow2");
    let out = run(
        Command::new("qemu-img")
            .args(["convert", "-O", "qcow2"])
            .arg(&sparse)
            .arg(&qcow),
        Duration::from_secs(60),
    );
    assert_ok(&out, "qemu-img convert");
    let len = std::fs::metadata(&qcow).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&qcow).unwrap();
    f.set_len(len / 2).unwrap();
    drop(f);
    let bad = image(&cluster, &["import", qcow.to_str().unwrap(), "truncated"]);
    assert!(
        !bad.status.success(),
        "a truncated qcow2 is refused:\n{}",
        text(&bad)
    );
    assert!(text(&bad).contains("damaged qcow2 image"), "{}", text(&bad));
    let vmdk = dir.join("x.vmdk");
    assert_ok(
        &run(
            Command::new("qemu-img")
                .args(["create", "-f", "vmdk"])
                .arg(&vmdk)
                .arg("16M"),
            Duration::from_secs(60),
        ),
        "qemu-img create vmdk",
    );
    let bad = image(&cluster, &["import", vmdk.to_str().unwrap(), "v"]);
    assert!(
        text(&bad).contains("is a vmdk image; Basalt imports raw and qcow2"),
        "{}",
        text(&bad)
    );
    let bad = image(&cluster, &["import", "-", "nosize"]);
    assert!(text(&bad).contains("needs --size"), "{}", text(&bad));
    let bad = image(&cluster, &["import", "/nonexistent.raw", "gone"]);
    assert!(
        !bad.status.success() && text(&bad).contains("error: "),
        "{}",
        text(&bad)
    );
    let bad = image(&cluster, &["import", sparse.to_str().unwrap(), "sparse"]);
    assert!(text(&bad).contains("exists"), "{}", text(&bad));
    let bad = cluster.volume(&["create", "x", "--from-image", "nope"]);
    assert!(
        text(&bad).contains("image \"nope\" does not exist"),
        "{}",
        text(&bad)
    );
    let ls = image_ok(&cluster, &["ls"]);
    for gone in ["truncated", "v", "nosize", "gone"] {
        assert!(!ls.contains(gone), "{gone} left behind:\n{ls}");
    }
}
