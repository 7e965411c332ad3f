//! Child processes of the control plane: spawning with a log file, free
//! loopback ports, and stopping.
#![allow(unsafe_code)] // pre_exec hooks (std makes them unsafe) and atexit(3)

use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use rustix::process::Signal;
use rustix::process::{Pid, kill_process, set_parent_process_death_signal, setsid, test_kill_process};

/// How a child's lifetime is tied to ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifetime {
    /// Killed by the kernel when the spawning thread exits (PR_SET_PDEATHSIG),
    /// so a crashed or killed test binary leaves nothing behind.
    DieWithParent,
    /// In its own session, outliving us (`cargo xtask cluster up`).
    Detached,
}

/// A free TCP port for a child to listen on (127.0.0.1, or every address),
/// never given twice while its taker lives.
///
/// Two races made start-up fail with "Address already in use" on CI, where
/// many test binaries run side by side:
/// - the kernel's own pick (`bind(:0)`) is in the ephemeral range, the one
///   every outgoing connection takes its local port from; between our
///   release and the child's bind, a client's connection took it. Ports
///   here come from below that range, which connect() never hands out.
/// - another process picking the same port in between: a port is claimed
///   across processes by an exclusive lock (`flock`) on
///   `<tmp>/flotilla-ports/<port>`, held by this process until it exits —
///   the kernel drops it then, however the process ends, so a dead taker's
///   claim is free again and no two live processes hold one port.
///
/// A port something already listens on (a detached cluster's, say) is
/// skipped: it is bound on every address (IPv4 and IPv6) before it is given.
pub fn free_port() -> std::io::Result<u16> {
    free_port_in(&std::env::temp_dir().join("flotilla-ports"))
}

/// The claims this process holds (their locks last as long as the files
/// stay open), by port.
static CLAIMS: std::sync::Mutex<std::collections::BTreeMap<u16, File>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn free_port_in(dir: &Path) -> std::io::Result<u16> {
    let mut claims = CLAIMS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    std::fs::create_dir_all(dir)?;
    // Other users' test runs share the directory (sticky, as /tmp is).
    {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
    }
    let Some((low, high)) = port_range() else {
        // No room below the ephemeral range: the kernel's pick, claimed.
        for _ in 0..256 {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            if !claims.contains_key(&port)
                && let Some(file) = claim(dir, port)?
            {
                claims.insert(port, file);
                return Ok(port);
            }
        }
        return Err(std::io::Error::other("no free port in 256 of the kernel's picks"));
    };
    let span = u32::from(high - low) + 1;
    // A start of its own per process, so that processes started together
    // do not walk the same ports in the same order.
    let start = rand::random_range(0..span);
    for step in 0..span {
        let port = low + ((start + step) % span) as u16;
        if claims.contains_key(&port) {
            continue;
        }
        let Some(file) = claim(dir, port)? else { continue };
        if listenable(port) {
            claims.insert(port, file);
            return Ok(port);
        }
        // Someone outside the claims listens there: dropping the file
        // releases the lock; the port is left to them.
    }
    Err(std::io::Error::other(format!("no free port in {low}..={high}")))
}

/// Ports below the kernel's ephemeral range (`ip_local_port_range`) and
/// below Kubernetes' NodePort range (30000–32767: kube-proxy sends a
/// connection to 127.0.0.1 on a NodePort to the Service), at most 16,384 of
/// them and none under 10,000 (well-known services); `None` when fewer than
/// 1,000 are left there (an ephemeral range that starts low).
fn port_range() -> Option<(u16, u16)> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|low| low.parse::<u16>().ok()))
        .unwrap_or(32768);
    let high = ephemeral_low.saturating_sub(1).min(29_999);
    let low = high.saturating_sub(16_383).max(10_000);
    (high >= low && high - low >= 999).then_some((low, high))
}

/// Takes the claim on `port`: its file, locked, while it stays open
/// (`None`: another process holds it, or the file cannot be opened).
fn claim(dir: &Path, port: u16) -> std::io::Result<Option<File>> {
    let file =
        match std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(port.to_string())) {
            Ok(f) => f,
            // Another user's claim file: theirs.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(None),
            Err(e) => return Err(e),
        };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// Nothing listens on `port` on any address: bound on IPv4 and IPv6 (the
/// latter only where this machine has IPv6).
fn listenable(port: u16) -> bool {
    let v4 = TcpListener::bind(("127.0.0.1", port)).is_ok() && TcpListener::bind(("0.0.0.0", port)).is_ok();
    let v6 = match TcpListener::bind(("::", port)) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::AddrNotAvailable || e.raw_os_error() == Some(97),
    };
    v4 && v6
}

#[cfg(test)]
mod free_port_tests {
    /// Many in a row, as tests start operators: never the same port twice,
    /// none in the kernel's ephemeral range, each one claimed.
    #[test]
    fn a_port_is_never_given_twice() {
        let ports: Vec<u16> = (0..200).map(|_| super::free_port().unwrap_or_else(|e| panic!("{e}"))).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        if let Some((low, high)) = super::port_range() {
            assert!(ports.iter().all(|p| (low..=high).contains(p)), "{ports:?} outside {low}..={high}");
        }
        // Each one locked: another open file description cannot take it.
        let dir = std::env::temp_dir().join("flotilla-ports");
        for port in &ports {
            assert!(super::claim(&dir, *port).unwrap().is_none(), "{port} is not held");
        }
    }

    /// A claim held (another process's lock: here another open file) is
    /// skipped; a claim file nobody holds (its taker died: the kernel
    /// dropped the lock) is taken.
    #[test]
    fn a_held_claim_is_respected_and_a_dead_ones_file_taken() {
        let dir = std::env::temp_dir().join(format!("flotilla-ports-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let held = super::claim(&dir, 20000).unwrap().expect("a fresh claim");
        assert!(super::claim(&dir, 20000).unwrap().is_none(), "held by another open file");
        drop(held);
        std::fs::write(dir.join("20001"), "a dead taker's file").unwrap();
        assert!(super::claim(&dir, 20001).unwrap().is_some(), "nobody holds it");
        assert!(super::claim(&dir, 20000).unwrap().is_some(), "released when its file closed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A port something listens on (outside the claims) is not given.
    #[test]
    fn a_port_in_use_is_not_listenable() {
        let held = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        assert!(!super::listenable(held.local_addr().unwrap().port()));
    }
}

/// A running component with its log file.
#[derive(Debug)]
pub struct Process {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Process {
    pub fn spawn(name: &str, bin: &Path, args: &[String], log_dir: &Path, lifetime: Lifetime) -> std::io::Result<Self> {
        Self::spawn_with_env(name, bin, args, log_dir, lifetime, &[])
    }

    /// [`Process::spawn`] with extra environment variables.
    pub fn spawn_with_env(
        name: &str,
        bin: &Path,
        args: &[String],
        log_dir: &Path,
        lifetime: Lifetime,
        env: &[(&str, &str)],
    ) -> std::io::Result<Self> {
        let log = log_dir.join(format!("{name}.log"));
        let out = File::create(&log)?;
        let err = out.try_clone()?;
        let mut cmd = Command::new(bin);
        cmd.args(args).envs(env.iter().copied()).stdin(Stdio::null()).stdout(out).stderr(err);
        // SAFETY: the closures make one system call each (prctl, setsid),
        // async-signal-safe, and allocate nothing.
        unsafe {
            match lifetime {
                Lifetime::DieWithParent => cmd.pre_exec(die_with_parent),
                Lifetime::Detached => cmd.pre_exec(|| setsid().map(drop).map_err(std::io::Error::from)),
            };
        }
        let child = cmd.spawn()?;
        Ok(Self { name: name.to_string(), child, log })
    }

    /// `Some(status)` when the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// SIGTERM, then SIGKILL after `grace`; reaps the child.
    pub fn stop(&mut self, grace: Duration) {
        terminate_pid(self.child.id(), grace);
        let _ = self.child.wait();
    }
}

/// In a child between fork and exec: SIGKILL when the spawning thread exits.
pub fn die_with_parent() -> std::io::Result<()> {
    set_parent_process_death_signal(Some(Signal::KILL)).map_err(std::io::Error::from)
}

/// Sends `signal` to `pid` (gone, or not ours: nothing happens).
pub fn signal_pid(pid: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process(pid, signal);
    }
}

pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Whether a process with this pid exists (and is not a zombie we own).
pub fn pid_alive(pid: u32) -> bool {
    let Some(raw) = i32::try_from(pid).ok().and_then(Pid::from_raw) else { return false };
    if test_kill_process(raw).is_err() {
        return false;
    }
    // A zombie still "exists"; treat it as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

/// SIGTERM a pid, wait up to `grace`, then SIGKILL.
pub fn terminate_pid(pid: u32, grace: Duration) {
    signal_pid(pid, Signal::TERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !pid_alive(pid) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal_pid(pid, Signal::KILL);
}

/// Processes (and their directories) to remove when the test binary exits.
static AT_EXIT: std::sync::Mutex<Vec<(Vec<u32>, PathBuf)>> = std::sync::Mutex::new(Vec::new());
static REGISTER_AT_EXIT: std::sync::Once = std::sync::Once::new();

extern "C" fn cleanup_at_exit() {
    let all = match AT_EXIT.lock() {
        Ok(mut guard) => std::mem::take(&mut *guard),
        Err(_) => return,
    };
    for (pids, dir) in all.into_iter().rev() {
        for pid in pids.into_iter().rev() {
            terminate_pid(pid, Duration::from_secs(3));
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Runs `hook` when the process exits normally (after `main` returns or
/// `exit` is called), like C's `atexit`. Ours through libc, the one call
/// here not through rustix: `atexit` is the C library's, not a system call
/// (rustix has none), and the test harness leaves through `exit`, where no
/// `Drop` runs.
pub fn at_exit(hook: extern "C" fn()) {
    // SAFETY: registering a plain extern "C" fn with atexit.
    unsafe {
        libc::atexit(hook);
    }
}

/// Starts long-lived test servers for the rest of this process: `start`
/// runs on a thread that then parks forever, so children spawned with
/// [`Lifetime::DieWithParent`] (PR_SET_PDEATHSIG fires when the *spawning
/// thread* exits) die with the process even if it crashes, and an `atexit`
/// hook stops `pids` and removes `dir` on a normal exit. `start` returns the
/// value to hand back, the pids, and whatever must stay alive (kept on the
/// parked thread, never dropped).
pub fn run_until_exit<T, K, F>(thread_name: &str, dir: PathBuf, start: F) -> Result<T, String>
where
    T: Send + 'static,
    K: 'static,
    F: FnOnce(&Path) -> Result<(T, Vec<u32>, K), String> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(thread_name.to_string())
        .spawn(move || match start(&dir) {
            Ok((value, pids, keep)) => {
                if let Ok(mut guard) = AT_EXIT.lock() {
                    guard.push((pids, dir));
                }
                // SAFETY: registering a plain extern "C" fn with atexit, once.
                REGISTER_AT_EXIT.call_once(|| unsafe {
                    libc::atexit(cleanup_at_exit);
                });
                let _ = tx.send(Ok(value));
                let _keep = keep;
                loop {
                    std::thread::park();
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        })
        .map_err(|e| e.to_string())?;
    rx.recv().map_err(|e| e.to_string())?
}

/// An operator binary run as a process by tests and benchmarks, as a user
/// runs it: `KUBECONFIG`, its endpoints on free loopback ports, stderr in a
/// log file. Killed (and its log removed) when dropped.
#[derive(Debug)]
pub struct OperatorProcess {
    pub child: Child,
    pub log: PathBuf,
    pub metrics_port: u16,
    pub health_port: u16,
}

impl OperatorProcess {
    /// Starts `binary` with `args`, `env` and `KUBECONFIG=kubeconfig`;
    /// `--metrics-bind-address` and `--health-probe-bind-address` are added.
    pub fn start(binary: &Path, kubeconfig: &Path, args: &[String], env: &[(&str, &str)]) -> std::io::Result<Self> {
        Self::start_limited(binary, kubeconfig, args, env, None)
    }

    /// [`OperatorProcess::start`] inside `limit`'s cgroup from its first
    /// instruction (a pod's memory limit, as the kernel enforces it).
    pub fn start_limited(
        binary: &Path,
        kubeconfig: &Path,
        args: &[String],
        env: &[(&str, &str)],
        limit: Option<&crate::memory_limit::MemoryLimit>,
    ) -> std::io::Result<Self> {
        if !binary.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is missing: build it first (`cargo build --workspace --all-targets`)", binary.display()),
            ));
        }
        let (metrics_port, health_port) = (free_port()?, free_port()?);
        let name = binary.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let log = std::env::temp_dir().join(format!("{name}-{}-{metrics_port}.log", std::process::id()));
        let mut cmd = Command::new(binary);
        cmd.args(args)
            .arg(format!("--metrics-bind-address=127.0.0.1:{metrics_port}"))
            .arg(format!("--health-probe-bind-address=127.0.0.1:{health_port}"))
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .env("KUBECONFIG", kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log)?);
        if let Some(limit) = limit {
            limit.join_on_exec(&mut cmd);
        }
        let child = cmd.spawn()?;
        Ok(Self { child, log, metrics_port, health_port })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends `signal` (e.g. `Signal::TERM`).
    pub fn signal(&self, signal: Signal) {
        signal_pid(self.child.id(), signal);
    }

    /// Everything it has logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM (the operator finishes its work and releases its lease), then
    /// SIGKILL after 15 s; the exit status.
    pub fn stop(mut self) -> Option<std::process::ExitStatus> {
        terminate_pid(self.child.id(), Duration::from_secs(15));
        self.child.wait().ok()
    }

    /// `127.0.0.1:<port>` of `/metrics`.
    pub fn metrics_address(&self) -> String {
        format!("127.0.0.1:{}", self.metrics_port)
    }

    pub fn metrics_url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.metrics_port)
    }

    /// `http://127.0.0.1:<port>` of `/healthz` and `/readyz`.
    pub fn health_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.health_port)
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}
