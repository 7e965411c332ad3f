//! A Route53 emulator for tests, the demo and benchmarks: moto's standalone
//! server (`moto[server]` from PyPI), installed by `cargo xtask setup` into a
//! virtualenv in the cache and started on a free loopback port.
//!
//! ```no_run
//! let moto = flotilla_testenv::aws::moto::shared(); // one server per test binary
//! // AWS_ENDPOINT_URL_ROUTE_53=moto.endpoint, dummy credentials
//! ```
//!
//! moto is not AWS: it accepts a duplicate CREATE with other values, answers
//! a DELETE of a missing record with `InvalidInput`, applies a failing batch
//! partly and always answers INSYNC. Assert on a zone's final contents.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::build::assets::Progress;
use crate::build::versions::cache_root;
use crate::cluster::process::{self, Lifetime, Process};

/// The moto release installed and tested against.
pub const MOTO_VERSION: &str = "5.2.5";

/// Why moto is not usable.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    #[error(
        "moto {MOTO_VERSION} is not installed at {0}: run `cargo xtask setup` (it installs moto[server] into a venv there)"
    )]
    Missing(PathBuf),
    #[error("installing moto failed: {0}")]
    Install(String),
    #[error("moto_server did not start: {0}")]
    Start(String),
}

/// The virtualenv moto lives in.
pub fn venv_dir() -> PathBuf {
    cache_root().join(format!("moto-{MOTO_VERSION}"))
}

/// `moto_server` in the venv, when installed (never installs).
pub fn locate() -> Result<PathBuf, MotoError> {
    let bin = venv_dir().join("bin").join("moto_server");
    if bin.is_file() && venv_dir().join(".installed").is_file() { Ok(bin) } else { Err(MotoError::Missing(venv_dir())) }
}

/// Installs moto into [`venv_dir`] unless it is there (idempotent):
/// `python3 -m venv`, then `pip install moto[server]==MOTO_VERSION`.
pub fn ensure(progress: Progress<'_>) -> Result<PathBuf, MotoError> {
    if let Ok(bin) = locate() {
        progress(&format!("moto {MOTO_VERSION}: {} (cached)", bin.display()));
        return Ok(bin);
    }
    let dir = venv_dir();
    let started = Instant::now();
    progress(&format!("moto {MOTO_VERSION}: creating a venv at {}", dir.display()));
    let python = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
    run(Command::new(&python).args(["-m", "venv", "--clear"]).arg(&dir), "python3 -m venv")?;
    progress(&format!("moto {MOTO_VERSION}: pip install moto[server]=={MOTO_VERSION} (about a minute)"));
    let pip = dir.join("bin").join("pip");
    run(
        Command::new(&pip).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("moto[server]=={MOTO_VERSION}"),
        ]),
        "pip install moto[server]",
    )?;
    std::fs::write(dir.join(".installed"), MOTO_VERSION).map_err(|e| MotoError::Install(e.to_string()))?;
    let bin = locate()?;
    progress(&format!("moto {MOTO_VERSION}: installed in {:.0?}", started.elapsed()));
    Ok(bin)
}

fn run(cmd: &mut Command, what: &str) -> Result<(), MotoError> {
    let out = cmd.output().map_err(|e| MotoError::Install(format!("{what}: {e} (is python3 installed?)")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(MotoError::Install(format!(
            "{what} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A running moto server.
/// Python run before moto's server: its Route53 change journal indexed
/// (moto scans it for every change: ~25 s for 1,000 changes into a zone of
/// 10,000 records).
const INDEXED_JOURNAL: &str = include_str!("moto_indexed.py");

#[derive(Debug)]
pub struct MotoServer {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    pub process: Process,
}

impl MotoServer {
    /// Starts `moto_server` on a free loopback port, logging to
    /// `log_dir/moto.log`, and waits until it answers.
    pub fn start(log_dir: &Path, lifetime: Lifetime) -> Result<Self, MotoError> {
        Self::start_on(log_dir, lifetime, "127.0.0.1")
    }

    /// [`MotoServer::start`] on `host` (e.g. the one-node cluster's node
    /// address, where pods reach it).
    pub fn start_on(log_dir: &Path, lifetime: Lifetime, host: &str) -> Result<Self, MotoError> {
        let bin = locate()?;
        std::fs::create_dir_all(log_dir).map_err(|e| MotoError::Start(e.to_string()))?;
        let mut last = String::new();
        // The free port may be taken between choosing and binding: retry.
        for _ in 0..3 {
            let port = process::free_port().map_err(|e| MotoError::Start(e.to_string()))?;
            // moto's server, with its Route53 change journal indexed
            // (`moto_indexed.py`): started by the venv's Python, as
            // `moto_server` would start it.
            let args = vec![
                "-c".to_string(),
                format!("{INDEXED_JOURNAL}\nfrom moto.server import main\nmain()\n"),
                "-H".to_string(),
                host.to_string(),
                "-p".to_string(),
                port.to_string(),
            ];
            let python = bin.with_file_name("python3");
            let mut p = Process::spawn("moto", &python, &args, log_dir, lifetime)
                .map_err(|e| MotoError::Start(format!("{}: {e}", bin.display())))?;
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(status) = p.exited() {
                    last = format!("exited with {status}: {}", p.log_tail(20));
                    break;
                }
                if http_ok(host, port) {
                    return Ok(Self { endpoint: format!("http://{host}:{port}"), process: p });
                }
                if Instant::now() > deadline {
                    last = format!("not answering on port {port} after 30s: {}", p.log_tail(20));
                    p.stop(Duration::from_secs(2));
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Err(MotoError::Start(last))
    }

    pub fn pid(&self) -> u32 {
        self.process.child.id()
    }

    /// Forgets every resource (`POST /moto-api/reset`).
    pub fn reset(&self) -> Result<(), MotoError> {
        let (host, port) = route53::host_port(&self.endpoint)?;
        request(&host, port, "POST", "/moto-api/reset").map(|_| ()).map_err(MotoError::Start)
    }

    pub fn stop(&mut self) {
        self.process.stop(Duration::from_secs(3));
    }
}

/// A minimal HTTP/1.1 request; returns the status line.
fn request(host: &str, port: u16, method: &str, path: &str) -> Result<String, String> {
    let mut s = TcpStream::connect((host, port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    write!(s, "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).map_err(|e| e.to_string())?;
    let status = String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or("").to_string();
    if status.starts_with("HTTP/1.") && status.contains(" 200") {
        Ok(status)
    } else {
        Err(format!("{method} {path}: {status:?}"))
    }
}

fn http_ok(host: &str, port: u16) -> bool {
    request(host, port, "GET", "/moto-api/").is_ok()
}

/// Route53 REST calls to moto without an AWS SDK (moto does not check
/// signatures; the Authorization header only tells it the service), for the
/// demo and benchmarks. Tests use the real SDK.
pub mod route53 {
    use super::*;

    /// One record set: (name without trailing dot, type, values).
    pub type Rrset = (String, String, Vec<String>);

    /// `(host, port)` of `http://HOST:PORT`.
    pub(crate) fn host_port(endpoint: &str) -> Result<(String, u16), MotoError> {
        endpoint
            .trim_end_matches('/')
            .strip_prefix("http://")
            .and_then(|hp| hp.rsplit_once(':'))
            .and_then(|(h, p)| Some((h.to_string(), p.parse().ok()?)))
            .ok_or_else(|| MotoError::Start(format!("{endpoint} is not http://HOST:PORT")))
    }

    /// `(status, body)` of one request.
    pub fn call(endpoint: &str, method: &str, path: &str, body: &str) -> Result<(u16, String), MotoError> {
        let (host, port) = host_port(endpoint)?;
        let err = |e: std::io::Error| MotoError::Start(format!("{method} {path}: {e}"));
        let mut s = TcpStream::connect((host.as_str(), port)).map_err(err)?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(err)?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/route53/aws4_request, SignedHeaders=host, Signature=0\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .map_err(err)?;
        let mut out = Vec::new();
        s.read_to_end(&mut out).map_err(err)?;
        let text = String::from_utf8_lossy(&out).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        Ok((status, body.to_string()))
    }

    use crate::aws::route53_proxy::xml::between;

    /// Creates a hosted zone; returns its id (without `/hostedzone/`).
    pub fn create_hosted_zone(endpoint: &str, domain: &str) -> Result<String, MotoError> {
        let body = format!(
            "<CreateHostedZoneRequest xmlns=\"https://route53.amazonaws.com/doc/2013-04-01/\"><Name>{domain}.</Name><CallerReference>{domain}-{}</CallerReference></CreateHostedZoneRequest>",
            rand::random::<u64>()
        );
        let (status, text) = call(endpoint, "POST", "/2013-04-01/hostedzone", &body)?;
        let id = between(&text, "<Id>", "</Id>").into_iter().find(|i| i.contains("hostedzone"));
        match (status, id) {
            (201, Some(id)) => Ok(id.rsplit('/').next().unwrap_or(id).to_string()),
            _ => Err(MotoError::Start(format!("CreateHostedZone {domain}: HTTP {status}: {text}"))),
        }
    }

    /// Every record set of a zone, following pagination.
    pub fn list_record_sets(endpoint: &str, zone: &str) -> Result<Vec<Rrset>, MotoError> {
        let mut out = Vec::new();
        let mut start = String::new();
        loop {
            let (status, text) =
                call(endpoint, "GET", &format!("/2013-04-01/hostedzone/{zone}/rrset?maxitems=300{start}"), "")?;
            if status != 200 {
                return Err(MotoError::Start(format!("ListResourceRecordSets {zone}: HTTP {status}: {text}")));
            }
            for set in between(&text, "<ResourceRecordSet>", "</ResourceRecordSet>") {
                let name = between(set, "<Name>", "</Name>").first().map(|n| n.trim_end_matches('.').to_string());
                let rtype = between(set, "<Type>", "</Type>").first().map(|t| t.to_string());
                let values =
                    between(set, "<Value>", "</Value>").into_iter().map(|v| v.replace("&quot;", "\"")).collect();
                if let (Some(name), Some(rtype)) = (name, rtype) {
                    out.push((name, rtype, values));
                }
            }
            let truncated = between(&text, "<IsTruncated>", "</IsTruncated>").first() == Some(&"true");
            let next_name = between(&text, "<NextRecordName>", "</NextRecordName>").first().map(|s| s.to_string());
            let next_type = between(&text, "<NextRecordType>", "</NextRecordType>").first().map(|s| s.to_string());
            match (truncated, next_name, next_type) {
                (true, Some(n), Some(t)) => start = format!("&name={n}&type={t}"),
                _ => break,
            }
        }
        Ok(out)
    }

    /// The values of `name`/`rtype` if that record set exists (one request).
    pub fn find(endpoint: &str, zone: &str, name: &str, rtype: &str) -> Result<Option<Vec<String>>, MotoError> {
        Ok(find_set(endpoint, zone, name, rtype)?.map(|(_, values)| values))
    }

    /// A record set as read back: its TTL (none for an alias) and values.
    pub type Found = (Option<u64>, Vec<String>);

    /// The TTL and values of the record set `name`/`rtype`, if it exists.
    pub fn find_set(endpoint: &str, zone: &str, name: &str, rtype: &str) -> Result<Option<Found>, MotoError> {
        let (status, text) = call(
            endpoint,
            "GET",
            &format!("/2013-04-01/hostedzone/{zone}/rrset?name={name}&type={rtype}&maxitems=1"),
            "",
        )?;
        if status != 200 {
            return Err(MotoError::Start(format!("ListResourceRecordSets {zone}: HTTP {status}: {text}")));
        }
        for set in between(&text, "<ResourceRecordSet>", "</ResourceRecordSet>") {
            let n = between(set, "<Name>", "</Name>").first().map(|n| n.trim_end_matches('.').to_string());
            let t = between(set, "<Type>", "</Type>").first().map(|t| t.to_string());
            if n.as_deref() == Some(name) && t.as_deref() == Some(rtype) {
                let ttl = between(set, "<TTL>", "</TTL>").first().and_then(|t| t.trim().parse().ok());
                return Ok(Some((ttl, between(set, "<Value>", "</Value>").into_iter().map(str::to_string).collect())));
            }
        }
        Ok(None)
    }
}

/// The moto server shared by the tests of one binary.
#[derive(Debug, Clone)]
pub struct SharedMoto {
    /// `http://127.0.0.1:<port>`: the value for `AWS_ENDPOINT_URL_ROUTE_53`.
    pub endpoint: String,
}

impl SharedMoto {
    /// Environment for an AWS client (or an operator process) talking to
    /// this server with dummy credentials.
    pub fn aws_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL_ROUTE_53", self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", "testing".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
        ]
    }
}

static SHARED: OnceLock<Result<SharedMoto, String>> = OnceLock::new();

/// The moto server of this test binary, started on first use and killed
/// when the binary exits (or dies: PR_SET_PDEATHSIG from a thread that
/// lives as long as the process).
///
/// # Panics
/// When moto is not installed (the message says to run `cargo xtask setup`)
/// or does not start. Tests that need Route53 fail; they are never skipped.
pub fn shared() -> SharedMoto {
    let result = SHARED.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flotilla-moto-{}-{}", std::process::id(), rand::random::<u32>()));
        process::run_until_exit("flotilla-moto", dir, |dir| {
            let server = MotoServer::start(dir, Lifetime::DieWithParent).map_err(|e| e.to_string())?;
            let shared = SharedMoto { endpoint: server.endpoint.clone() };
            let pid = server.pid();
            Ok((shared, vec![pid], server))
        })
    });
    match result {
        Ok(m) => m.clone(),
        Err(e) => panic!("Route53 emulator unavailable: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_moto_says_how_to_install_it() {
        let msg = MotoError::Missing(PathBuf::from("/nowhere")).to_string();
        assert!(msg.contains("cargo xtask setup"), "{msg}");
    }
}
