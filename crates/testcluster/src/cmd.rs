//! Bounded runs of short external commands (`ip`, `nft`, `tc`, `etcdctl`, ...): every run has
//! a deadline, after which the command's process group is killed.

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest a plumbing command (`ip`, `nft`, `tc`) may take.
pub(crate) const TOOL_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a running command is polled for its exit.
const POLL_INTERVAL: Duration = Duration::from_millis(5);
/// How long the output pipes may stay open after the command exited (a grandchild may hold
/// them); past that the output read so far is dropped rather than waited for.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Finds an administration tool on `PATH` or in the sbin directories, which a non-login root
/// shell may not have on `PATH`.
pub(crate) fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs `cmd` to completion, feeding it `stdin`, and kills its process group if it is still
/// running after `timeout`.
pub(crate) fn output(mut cmd: Command, stdin: Option<&[u8]>, timeout: Duration) -> Result<Output> {
    let desc = format!("{cmd:?}");
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let mut child = cmd.spawn().with_context(|| format!("spawn {desc}"))?;
    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let data = data.to_vec();
        // A thread, so a command that does not read its input cannot block us.
        std::thread::spawn(move || pipe.write_all(&data));
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    // Loop bound: `timeout` of polling.
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .with_context(|| format!("wait for {desc}"))?
        {
            break status;
        }
        if Instant::now() >= deadline {
            // SAFETY: kill(2) with a negative pid signals the command's own process group.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            bail!("{desc} did not finish within {timeout:?}; killed");
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    let stdout = stdout.recv_timeout(PIPE_GRACE).unwrap_or_default();
    let stderr = stderr.recv_timeout(PIPE_GRACE).unwrap_or_default();
    Ok(Output {
        status,
        stdout,
        stderr,
    })
}

/// Reads a pipe to its end on a thread and hands the bytes over a channel.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    } else {
        let _ = tx.send(Vec::new());
    }
    rx
}

/// Runs the tool `name` with `args` (and an optional stdin script) within [`TOOL_TIMEOUT`];
/// fails with its stderr unless it exits 0, else returns its stdout.
pub(crate) fn run_tool(name: &str, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let program =
        tool(name).ok_or_else(|| anyhow!("`{name}` not found on PATH or in /usr/sbin"))?;
    let mut cmd = Command::new(&program);
    cmd.args(args);
    let out = output(cmd, stdin.map(str::as_bytes), TOOL_TIMEOUT)?;
    if !out.status.success() {
        bail!(
            "`{name} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
