//! A host of the test network: a name, an address and (in namespace mode) a network namespace.

use anyhow::{anyhow, bail, Context, Result};
use std::ffi::OsStr;
use std::fs::File;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::process::Command;

/// One machine of the simulated cluster, made by [`Net::add_host`](crate::Net::add_host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The name given to `add_host`, unique within its Net.
    pub name: String,
    /// The host's address: on the Net's bridge (10.77.I.N), or 127.77.I.N in loopback mode.
    pub ip: Ipv4Addr,
    /// The network namespace (`ip netns` name), `None` in loopback mode.
    pub netns: Option<String>,
}

impl Host {
    /// Runs `f` on a fresh thread that has entered this host's network namespace, so sockets
    /// it creates (listeners, connections) belong to the host; returns what `f` returns and
    /// re-raises its panic. In loopback mode `f` simply runs on a fresh thread.
    pub fn enter<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        let ns = match &self.netns {
            Some(ns) => {
                let path = format!("/run/netns/{ns}");
                Some(File::open(&path).with_context(|| format!("open {path}"))?)
            }
            None => None,
        };
        let joined = std::thread::scope(|scope| {
            scope
                .spawn(move || -> Result<R> {
                    if let Some(ns) = ns {
                        // Network namespaces are per thread, so this thread alone moves.
                        // SAFETY: setns(2) on an open namespace fd.
                        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                            bail!("setns: {}", std::io::Error::last_os_error());
                        }
                    }
                    Ok(f())
                })
                .join()
        });
        match joined {
            Ok(result) => result.map_err(|e| anyhow!("enter host {}: {e:#}", self.name)),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// A command that runs `program` on this host: `ip netns exec NS program`, which execs,
    /// so the child's pid is the program's own.
    pub(crate) fn command(&self, program: &OsStr) -> Result<Command> {
        Ok(match &self.netns {
            Some(ns) => {
                let ip = crate::cmd::tool("ip").context("`ip` (iproute2) not found")?;
                let mut cmd = Command::new(ip);
                cmd.args(["netns", "exec", ns]).arg(program);
                cmd
            }
            None => Command::new(program),
        })
    }
}
