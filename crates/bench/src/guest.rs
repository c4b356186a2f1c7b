//! The test guest of `scripts/build-guest-image.sh` under QEMU: the one command line the
//! benchmark and the tests boot it with.

use anyhow::Context;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::Instant;

/// Starts a guest's QEMU `cmd` with its console (stdout) read line by line, each line with
/// when it arrived; the channel closes when QEMU exits. The caller bounds the run.
pub fn spawn_with_console(
    cmd: &mut Command,
) -> anyhow::Result<(Child, Receiver<(Instant, String)>)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("start qemu-system-x86_64 (install qemu-system-x86)")?;
    let stdout = child.stdout.take().context("qemu stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            let _ = tx.send((Instant::now(), String::from_utf8_lossy(&line).into_owned()));
        }
    });
    Ok((child, rx))
}

/// QEMU with what every test guest runs with: TCG (see below), 512 MiB, one vCPU, the
/// console on stdout, no reboot. The caller adds the kernel, disks and network.
pub fn tcg_command() -> Command {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-m", "512", "-smp", "1"])
        .args(["-nographic", "-no-reboot"]);
    cmd
}

/// QEMU booting the NVMe/TCP guest of `guest_dir` (its `nvmf-initrd.cpio`, whose /init is
/// scripts/guest-nvmf-init.sh) with `params` on the kernel command line, user networking
/// (the host is 10.0.2.2) and the guest image as a throw-away /dev/vda (fio runs from it).
/// The caller sets stdio and bounds the run.
pub fn nvmf_command(guest_dir: &Path, params: &str) -> Command {
    let mut cmd = tcg_command();
    cmd.arg("-kernel")
        .arg(guest_dir.join("vmlinux"))
        .arg("-initrd")
        .arg(guest_dir.join("nvmf-initrd.cpio"))
        .arg("-append")
        .arg(format!("console=ttyS0 quiet panic=-1 {params}"))
        .args([
            "-netdev",
            "user,id=n0",
            "-device",
            "virtio-net-pci,netdev=n0,romfile=",
        ])
        .arg("-drive")
        .arg(format!(
            "file={},format=qcow2,if=virtio,snapshot=on",
            guest_dir.join("disk.qcow2").display()
        ));
    cmd
}

/// QEMU (TCG: the KVM of these machines cannot run a stock kernel) booting the guest in
/// `guest_dir` from the NBD export `uri` as its virtio disk. The guest writes `name` as its
/// own data and runs fio for `fio_s` seconds per direction (0: none), then powers off; its
/// console is QEMU's stdout. The caller sets stdio and bounds the run.
pub fn qemu_command(guest_dir: &Path, uri: &str, name: &str, fio_s: u32) -> Command {
    let mut cmd = tcg_command();
    cmd.args(["-nic", "none"])
        .arg("-kernel")
        .arg(guest_dir.join("vmlinux"))
        .arg("-initrd")
        .arg(guest_dir.join("initrd.cpio"))
        .arg("-append")
        .arg(format!(
            "console=ttyS0 quiet panic=-1 basalt.name={name} basalt.fio={fio_s}"
        ))
        .arg("-drive")
        .arg(format!("file={uri},format=raw,if=virtio,cache=none"));
    cmd
}
