//! Processes the harness starts on hosts, with their logs and the faults a test injects
//! (SIGKILL, SIGSTOP/SIGCONT, SIGTERM, restart).

use crate::host::Host;
use crate::registry::{lock, start_time, Registry, Resource};
use anyhow::{bail, Context, Result};
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest wait for a SIGKILLed process to be reaped, or for SIGSTOP/SIGCONT to take effect.
pub(crate) const SIGNAL_WAIT: Duration = Duration::from_secs(10);
/// How often a process or its log is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Lines of log quoted in error messages.
const TAIL_LINES: usize = 30;

/// What to run: a program, its arguments, extra environment and working directory.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    current_dir: Option<PathBuf>,
    name: Option<String>,
}

impl ProcessSpec {
    /// A spec that runs `program` (a path, or a name looked up on `PATH`) with no arguments.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Self {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            current_dir: None,
            name: None,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable (on top of the test process's environment).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Sets the working directory.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.current_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Names the process in its log file name and in errors (default: the program's file name).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The command that runs this spec on `host` (stdio and process group not set).
    pub(crate) fn command(&self, host: &Host) -> Result<Command> {
        let mut cmd = host.command(&self.program)?;
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(dir) = &self.current_dir {
            cmd.current_dir(dir);
        }
        Ok(cmd)
    }

    /// The name used in log file names and errors.
    pub fn display_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            Path::new(&self.program)
                .file_name()
                .unwrap_or(&self.program)
                .to_string_lossy()
                .into_owned()
        })
    }
}

/// A process running (or once run) on a host. Cloning gives another handle to the same
/// process. It runs until a fault method ends it or its [`Net`](crate::Net) is dropped
/// (dropping a `Proc` handle does not kill it).
#[derive(Clone)]
pub struct Proc {
    inner: Arc<ProcInner>,
}

struct ProcInner {
    host: Host,
    spec: ProcessSpec,
    /// The program restarts run instead of the spec's ([`Proc::restart_as`]: an upgrade).
    program: Mutex<Option<OsString>>,
    log_path: PathBuf,
    registry: Arc<Registry>,
    state: Mutex<ProcState>,
}

/// The current incarnation (a restart makes a new one).
struct ProcState {
    child: Child,
    pid: u32,
    exit: Option<ExitStatus>,
    /// Log offset where this incarnation's output starts.
    log_start: u64,
}

impl std::fmt::Debug for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Proc({} on {}, pid {})",
            self.inner.spec.display_name(),
            self.inner.host.name,
            self.pid()
        )
    }
}

/// Starts `spec` on `host` with stdout and stderr appended to `log_path`, in its own process
/// group (so signals reach its children too), and records it for cleanup.
fn start(
    host: &Host,
    spec: &ProcessSpec,
    log_path: &Path,
    registry: &Registry,
) -> Result<ProcState> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .with_context(|| format!("open {}", log_path.display()))?;
    let log_start = log.metadata()?.len();
    let mut cmd = spec.command(host)?;
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0);
    let mut child = cmd.spawn().with_context(|| {
        format!(
            "spawn {:?} on host {}",
            spec.program.to_string_lossy(),
            host.name
        )
    })?;
    let pid = child.id();
    // A process that already exited has no start time: 0 never matches, so never killed.
    let start = start_time(pid).unwrap_or(0);
    if let Err(e) = registry.record(Resource::Proc { pid, start }) {
        // The Net went away meanwhile: nothing would ever kill this process.
        // SAFETY: kill(2) on the process group of the child just spawned.
        unsafe { libc::kill(-(pid as i32), libc::SIGKILL) };
        let _ = child.wait();
        return Err(e);
    }
    Ok(ProcState {
        child,
        pid,
        exit: None,
        log_start,
    })
}

impl Proc {
    pub(crate) fn spawn(
        host: &Host,
        spec: ProcessSpec,
        log_path: PathBuf,
        registry: Arc<Registry>,
    ) -> Result<Proc> {
        let state = start(host, &spec, &log_path, &registry)?;
        Ok(Proc {
            inner: Arc::new(ProcInner {
                host: host.clone(),
                spec,
                program: Mutex::new(None),
                log_path,
                registry,
                state: Mutex::new(state),
            }),
        })
    }

    /// The pid of the current incarnation (the program's own pid, also in namespace mode).
    pub fn pid(&self) -> u32 {
        lock(&self.inner.state).pid
    }

    /// The host it runs on.
    pub fn host(&self) -> &Host {
        &self.inner.host
    }

    /// The spec it was started from.
    pub fn spec(&self) -> &ProcessSpec {
        &self.inner.spec
    }

    /// The file its stdout and stderr go to (kept across restarts).
    pub fn log_path(&self) -> &Path {
        &self.inner.log_path
    }

    /// Everything it printed so far, all incarnations (invalid UTF-8 replaced).
    pub fn log(&self) -> String {
        let bytes = std::fs::read(&self.inner.log_path).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// What the current run (since the last start or restart) wrote to the log.
    pub fn current_log(&self) -> String {
        let start = lock(&self.inner.state).log_start as usize;
        let bytes = std::fs::read(&self.inner.log_path).unwrap_or_default();
        String::from_utf8_lossy(bytes.get(start..).unwrap_or_default()).into_owned()
    }

    /// The last `TAIL_LINES` lines of the log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
    }

    /// Whether the current incarnation is still alive (a stopped process is alive).
    pub fn is_running(&self) -> bool {
        self.poll_exit().is_none()
    }

    /// The exit status of the current incarnation, if it has exited.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.poll_exit()
    }

    /// Reaps the current incarnation if it has exited.
    fn poll_exit(&self) -> Option<ExitStatus> {
        let mut state = lock(&self.inner.state);
        if state.exit.is_none() {
            state.exit = state.child.try_wait().ok().flatten();
        }
        state.exit
    }

    /// Sends `signal` to the process group; false if the process has already exited.
    fn signal(&self, signal: i32) -> bool {
        let mut state = lock(&self.inner.state);
        if state.exit.is_none() {
            state.exit = state.child.try_wait().ok().flatten();
        }
        if state.exit.is_some() {
            return false;
        }
        // Unreaped, so the pid (and the group named after it) cannot have been reused.
        // SAFETY: kill(2) on our own child's process group.
        unsafe { libc::kill(-(state.pid as i32), signal) };
        true
    }

    /// Waits until the current incarnation exits, at most `timeout`.
    pub fn wait(&self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        // Loop bound: `timeout`.
        loop {
            if let Some(status) = self.poll_exit() {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("{self:?} still running after {timeout:?}");
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// SIGKILLs the process (and its process group) and waits until it is reaped. A process
    /// that already exited is no error.
    pub fn kill9(&self) -> Result<()> {
        self.signal(libc::SIGKILL);
        self.wait(SIGNAL_WAIT).map(|_| ())
    }

    /// Sends SIGKILL without waiting (for Drop, which kills everything first, then waits).
    pub(crate) fn kill_now(&self) {
        self.signal(libc::SIGKILL);
    }

    /// Freezes the process group with SIGSTOP and waits until the process is stopped
    /// (state `T`): it keeps its sockets but answers nothing, like a hung machine.
    pub fn stop(&self) -> Result<()> {
        if !self.signal(libc::SIGSTOP) {
            bail!("{self:?} has exited: cannot stop it");
        }
        self.wait_state(|s| s == 'T', "stopped")
    }

    /// Resumes a stopped process group with SIGCONT and waits until it runs again.
    pub fn cont(&self) -> Result<()> {
        if !self.signal(libc::SIGCONT) {
            bail!("{self:?} has exited: cannot continue it");
        }
        self.wait_state(|s| s != 'T', "running")
    }

    /// The state letter of /proc/PID/stat (`R`, `S`, `T`, `Z`, ...).
    pub fn proc_state(&self) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).ok()?;
        stat[stat.rfind(')')? + 1..].trim_start().chars().next()
    }

    fn wait_state(&self, want: impl Fn(char) -> bool, what: &str) -> Result<()> {
        let deadline = Instant::now() + SIGNAL_WAIT;
        // Loop bound: SIGNAL_WAIT.
        loop {
            match self.proc_state() {
                Some(s) if want(s) => return Ok(()),
                None => bail!("{self:?} vanished while waiting for it to be {what}"),
                Some(_) if Instant::now() >= deadline => {
                    bail!("{self:?} not {what} after {SIGNAL_WAIT:?}")
                }
                Some(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    /// Sends SIGTERM (and SIGCONT, so a stopped process sees it), waits up to `timeout` for a
    /// clean exit, then SIGKILLs; returns the exit status.
    pub fn terminate(&self, timeout: Duration) -> Result<ExitStatus> {
        if self.signal(libc::SIGTERM) {
            self.signal(libc::SIGCONT);
            if let Ok(status) = self.wait(timeout) {
                return Ok(status);
            }
            self.signal(libc::SIGKILL);
        }
        self.wait(SIGNAL_WAIT)
    }

    /// [`Self::restart`] running `program` instead, from now on (the same arguments,
    /// environment and log): an upgrade of the process's binary.
    pub fn restart_as(&self, program: impl AsRef<OsStr>) -> Result<()> {
        *lock(&self.inner.program) = Some(program.as_ref().to_owned());
        self.restart()
    }

    /// Starts the same spec again on the same host, appending to the same log. The current
    /// incarnation must have exited (kill it first); fails once the Net is dropped.
    pub fn restart(&self) -> Result<()> {
        if self.is_running() {
            bail!("{self:?} is still running: kill9() or terminate() it before restart()");
        }
        if !self.inner.registry.is_open() {
            bail!("{self:?}: its Net was dropped");
        }
        let mut log = OpenOptions::new()
            .append(true)
            .open(&self.inner.log_path)
            .with_context(|| format!("open {}", self.inner.log_path.display()))?;
        writeln!(log, "==== basalt-testcluster: restart ====")?;
        let spec = match lock(&self.inner.program).clone() {
            Some(program) => ProcessSpec {
                program,
                ..self.inner.spec.clone()
            },
            None => self.inner.spec.clone(),
        };
        let mut state = lock(&self.inner.state);
        *state = start(
            &self.inner.host,
            &spec,
            &self.inner.log_path,
            &self.inner.registry,
        )?;
        Ok(())
    }

    /// Waits until the current incarnation prints a line (stdout or stderr) containing
    /// `pattern`, at most `timeout`, and returns that line. Fails early if it exits first.
    pub fn wait_for_line(&self, pattern: &str, timeout: Duration) -> Result<String> {
        let deadline = Instant::now() + timeout;
        let log_start = lock(&self.inner.state).log_start;
        let mut file = File::open(&self.inner.log_path)
            .with_context(|| format!("open {}", self.inner.log_path.display()))?;
        file.seek(SeekFrom::Start(log_start))?;
        let mut pending = Vec::new();
        // Loop bound: `timeout`.
        loop {
            // Checked before reading, so output written just before the exit is still seen.
            let exited = self.poll_exit();
            file.read_to_end(&mut pending)?;
            while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                if line.contains(pattern) {
                    return Ok(line.trim_end().to_string());
                }
            }
            // A banner printed without a newline still counts.
            let partial = String::from_utf8_lossy(&pending);
            if partial.contains(pattern) {
                return Ok(partial.into_owned());
            }
            if let Some(status) = exited {
                bail!(
                    "{self:?} exited ({status}) without printing {pattern:?}; log tail:\n{}",
                    self.log_tail()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "{self:?} printed no line containing {pattern:?} within {timeout:?}; log tail:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }
}
