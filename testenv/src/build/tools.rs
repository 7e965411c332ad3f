//! The packaging checks' tools: Go programs installed with `go install` from
//! the Go module proxy into `~/.cache/flotilla/<tool>-<version>/bin/`, and
//! Prometheus from Debian's package. Each is looked up by the tests, which
//! fail with a message naming `cargo xtask setup` when it is missing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::build::assets::{AssetsError, Progress, fmt_elapsed};
use crate::build::versions::cache_root;

/// A tool built with `go install <package>@<version>`.
#[derive(Debug, Clone, Copy)]
pub struct GoTool {
    pub name: &'static str,
    pub package: &'static str,
    pub version: &'static str,
}

/// actionlint checks the GitHub workflows.
pub const ACTIONLINT: GoTool =
    GoTool { name: "actionlint", package: "github.com/rhysd/actionlint/cmd/actionlint", version: "v1.7.12" };
/// helm-docs generates the charts' values tables.
pub const HELM_DOCS: GoTool =
    GoTool { name: "helm-docs", package: "github.com/norwoodj/helm-docs/cmd/helm-docs", version: "v1.14.2" };
// buildx is not here: `go install` refuses its go.mod (replace and exclude
// directives) and its newest releases need module versions the proxy does not
// serve; docker-bake.hcl is checked with an HCL parser instead (e2e/tests).

pub const GO_TOOLS: &[GoTool] = &[ACTIONLINT, HELM_DOCS];

/// kwok simulates nodes and their pods without containers (the scale
/// benchmark; stages in `testenv/kwok/`, see [`crate::cluster::kwok`]).
pub const KWOK: GoTool = GoTool { name: "kwok", package: "sigs.k8s.io/kwok/cmd/kwok", version: "v0.8.0" };

/// vegeta, an open-model (constant-rate) HTTP load tool: the second
/// reference client of `cargo xtask bench load-tester`, beside wrk.
pub const VEGETA: GoTool = GoTool { name: "vegeta", package: "github.com/tsenart/vegeta/v12", version: "v12.13.0" };

/// Tools only the benchmarks use: `cargo xtask setup` installs them, the
/// setup `cargo xtask test` runs does not (no test needs them, and kwok's
/// cold build is minutes of CI time), and a benchmark installs what it
/// lacks on first use ([`GoTool::ensure`]).
pub const BENCH_GO_TOOLS: &[GoTool] = &[KWOK, VEGETA];

impl GoTool {
    pub fn dir(&self) -> PathBuf {
        cache_root().join(format!("{}-{}", self.name, self.version)).join("bin")
    }

    pub fn path(&self) -> PathBuf {
        self.dir().join(self.name)
    }

    /// The installed binary, or an error saying how to get it.
    pub fn locate(&self) -> Result<PathBuf, AssetsError> {
        let path = self.path();
        if path.is_file() {
            Ok(path)
        } else {
            Err(AssetsError::Missing { missing: self.name.to_string(), dir: self.dir() })
        }
    }

    /// The installed binary, installed first when missing.
    pub fn ensure(&self, progress: Progress<'_>) -> Result<PathBuf, AssetsError> {
        match self.locate() {
            Ok(path) => Ok(path),
            Err(_) => self.install(progress),
        }
    }

    fn install(&self, progress: Progress<'_>) -> Result<PathBuf, AssetsError> {
        let started = Instant::now();
        progress(&format!("installing {} {} (go install)", self.name, self.version));
        let dir = self.dir();
        let tmp = dir.with_extension("tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|source| AssetsError::Io { path: tmp.clone(), source })?;
        let out = Command::new("go")
            .args(["install", "-trimpath", "-ldflags=-s -w", &format!("{}@{}", self.package, self.version)])
            .env("GOBIN", &tmp)
            .env("CGO_ENABLED", "0")
            .env_remove("GOFLAGS")
            .current_dir(std::env::temp_dir())
            .stdout(Stdio::null())
            .output()
            .map_err(|_| AssetsError::NoGo)?;
        if !out.status.success() {
            let text = String::from_utf8_lossy(&out.stderr);
            let detail: Vec<&str> = text.lines().filter(|l| !l.starts_with("go: downloading")).take(8).collect();
            return Err(AssetsError::Build { what: format!("go install {}", self.name), detail: detail.join("\n") });
        }
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir).map_err(|source| AssetsError::Io { path: dir.clone(), source })?;
        progress(&format!("  {}: done in {}", self.name, fmt_elapsed(started.elapsed())));
        Ok(self.path())
    }
}

/// Prometheus from Debian's `prometheus` package.
pub const PROMETHEUS: &str = "/usr/bin/prometheus";

pub fn prometheus() -> Result<PathBuf, AssetsError> {
    let path = PathBuf::from(PROMETHEUS);
    if path.is_file() {
        Ok(path)
    } else {
        Err(AssetsError::Missing {
            missing:
                "prometheus (Debian package `prometheus`: `apt-get install prometheus`, or `cargo xtask setup` as root)"
                    .into(),
            dir: PathBuf::from("/usr/bin"),
        })
    }
}

/// Debian packages the tests and the one-node cluster use, each with a file
/// that shows it is installed.
pub const DEBIAN_PACKAGES: &[(&str, &str)] = &[
    ("prometheus", PROMETHEUS),
    ("prometheus-alertmanager", "/usr/bin/prometheus-alertmanager"),
    // The one-node cluster: the OCI runtime, CNI plugins, kube-proxy's
    // iptables and conntrack, and the toolbox image's busybox.
    ("runc", "/usr/sbin/runc"),
    ("containernetworking-plugins", "/usr/lib/cni/bridge"),
    ("iptables", "/usr/sbin/iptables"),
    ("conntrack", "/usr/sbin/conntrack"),
    ("busybox-static", "/bin/busybox"),
    ("ca-certificates", "/etc/ssl/certs/ca-certificates.crt"),
];

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// `apt-get install` of every package in [`DEBIAN_PACKAGES`] that is missing
/// (one call; needs root).
pub fn ensure_debian_packages(progress: Progress<'_>) -> Result<(), AssetsError> {
    install_missing(DEBIAN_PACKAGES, progress)
}

/// `apt-get install` of the packages (name, a file that shows it is
/// installed) that are missing: for tools one command alone needs (the
/// load-tester benchmark's `wrk`), not every setup.
pub fn install_missing(packages: &[(&str, &str)], progress: Progress<'_>) -> Result<(), AssetsError> {
    let missing: Vec<&str> =
        packages.iter().filter(|(_, file)| !std::path::Path::new(file).exists()).map(|(p, _)| *p).collect();
    if missing.is_empty() {
        return Ok(());
    }
    // Not root (a CI runner's user, a developer): apt-get through sudo when
    // it needs no password, else say what to run.
    let sudo = !is_root();
    if sudo && !Command::new("sudo").args(["-n", "true"]).output().is_ok_and(|o| o.status.success()) {
        return Err(AssetsError::Build {
            what: format!("installing Debian packages {}", missing.join(" ")),
            detail: format!(
                "not root and no password-less sudo: run `sudo apt-get install -y {}` (Debian/Ubuntu), then run this command again",
                missing.join(" ")
            ),
        });
    }
    let started = Instant::now();
    progress(&format!(
        "installing Debian packages: {} ({}apt-get)",
        missing.join(" "),
        if sudo { "sudo " } else { "" }
    ));
    let apt = |args: &[&str]| {
        let mut cmd = if sudo {
            let mut c = Command::new("sudo");
            c.args(["-n", "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]);
            c
        } else {
            let mut c = Command::new("apt-get");
            c.env("DEBIAN_FRONTEND", "noninteractive");
            c
        };
        cmd.args(args)
            .stdout(Stdio::null())
            .output()
            .map_err(|source| AssetsError::Io { path: PathBuf::from("apt-get"), source })
    };
    let update = apt(&["update", "-qq"])?;
    if !update.status.success() {
        return Err(AssetsError::Build {
            what: "apt-get update".into(),
            detail: String::from_utf8_lossy(&update.stderr).into_owned(),
        });
    }
    let mut args = vec!["install", "-y", "-qq", "--no-install-recommends"];
    args.extend(&missing);
    let out = apt(&args)?;
    if !out.status.success() {
        return Err(AssetsError::Build {
            what: format!("apt-get install {}", missing.join(" ")),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    progress(&format!("  Debian packages: done in {}", fmt_elapsed(started.elapsed())));
    Ok(())
}

/// Installs whatever packaging tool is missing.
pub fn ensure_all(progress: Progress<'_>) -> Result<(), AssetsError> {
    for tool in GO_TOOLS {
        if tool.locate().is_err() {
            tool.install(progress)?;
        }
    }
    ensure_debian_packages(progress)?;
    for tool in GO_TOOLS {
        if let Ok(p) = tool.locate() {
            progress(&format!("{}: {}", tool.name, p.display()));
        }
    }
    progress(&format!("prometheus: {PROMETHEUS}"));
    Ok(())
}

/// Installs whatever benchmark tool ([`BENCH_GO_TOOLS`]) is missing.
pub fn ensure_bench_tools(progress: Progress<'_>) -> Result<(), AssetsError> {
    for tool in BENCH_GO_TOOLS {
        let path = tool.ensure(progress)?;
        progress(&format!("{}: {}", tool.name, path.display()));
    }
    Ok(())
}
