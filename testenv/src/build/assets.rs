//! The control-plane binaries: finding them, and building them from the Go
//! module proxy when they are missing.
//!
//! `go install k8s.io/kubernetes/cmd/kube-apiserver@vX` does not work: the
//! `k8s.io/kubernetes` go.mod replaces every staging module (`k8s.io/api`,
//! `k8s.io/client-go`, ...) with `./staging/...` at `v0.0.0`, and replace
//! directives only apply in the main module. So we generate a small wrapper
//! module that requires `k8s.io/kubernetes vX.Y.Z` and replaces each staging
//! module with its published `v0.Y.Z` twin. The list of staging modules and
//! the `godebug` line are read from the downloaded go.mod, never hard-coded,
//! so a new Kubernetes version needs no code change.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::build::versions;

/// Binaries the control plane needs, looked up in [`Assets::kubernetes_dir`].
pub const CONTROL_PLANE_BINARIES: &[&str] =
    &["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"];

/// The node's Kubernetes binaries, built with the control plane into the same
/// directory. Not required when `FLOTILLA_TEST_ASSETS` is set (node-less tests
/// run without them); the node asks for them itself.
pub const NODE_BINARIES: &[&str] = &["kubelet", "kube-proxy"];

/// Why the binaries are not usable.
#[derive(Debug, thiserror::Error)]
pub enum AssetsError {
    #[error(
        "{missing} not found in {dir}. Build the test control plane with `cargo xtask setup` \
         (needs Go on PATH; about 10 minutes cold on 2 cores, then cached), or point \
         FLOTILLA_TEST_ASSETS at a directory holding etcd, kube-apiserver, \
         kube-controller-manager, kube-scheduler and kubectl"
    )]
    Missing { missing: String, dir: PathBuf },
    #[error(
        "the one-node cluster's tools ({missing}) are not in {dir}: build them with `cargo xtask setup` \
         (containerd, CoreDNS and pause from the Go module proxy; a few minutes cold, then cached)"
    )]
    MissingNodeTools { missing: String, dir: PathBuf },
    #[error(
        "`go` was not found on PATH: install Go 1.26 or newer (e.g. from go.dev or your package manager), or set FLOTILLA_TEST_ASSETS to prebuilt binaries"
    )]
    NoGo,
    #[error("{what} failed: {detail}")]
    Build { what: String, detail: String },
    #[error("I/O error at {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> AssetsError + '_ {
    move |source| AssetsError::Io { path: path.to_path_buf(), source }
}

/// Where every tool lives.
#[derive(Debug, Clone)]
pub struct Assets {
    /// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl.
    pub kubernetes_dir: PathBuf,
    /// The Kubernetes version the binaries are (as far as we know).
    pub kubernetes_version: String,
}

impl Assets {
    /// Finds already-built binaries (never builds): `FLOTILLA_TEST_ASSETS`,
    /// else the cache directory of the selected Kubernetes version.
    pub fn locate() -> Result<Self, AssetsError> {
        let version = versions::kubernetes_version();
        let dir = match std::env::var_os(versions::ENV_TEST_ASSETS).filter(|d| !d.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => versions::kubernetes_bin_dir(&version),
        };
        let from_env = std::env::var_os(versions::ENV_TEST_ASSETS).is_some_and(|d| !d.is_empty());
        let required = CONTROL_PLANE_BINARIES.iter().chain(if from_env { &[][..] } else { NODE_BINARIES });
        let missing: Vec<&str> = required.copied().filter(|b| !dir.join(b).is_file()).collect();
        if !missing.is_empty() {
            return Err(AssetsError::Missing { missing: missing.join(", "), dir });
        }
        Ok(Self { kubernetes_dir: dir, kubernetes_version: version })
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        self.kubernetes_dir.join(name)
    }

    /// helm from the cache, if it was built.
    pub fn helm() -> Result<PathBuf, AssetsError> {
        let path = versions::helm_bin_dir().join("helm");
        if path.is_file() {
            Ok(path)
        } else {
            Err(AssetsError::Missing { missing: "helm".into(), dir: versions::helm_bin_dir() })
        }
    }
}

/// Progress reporting for long builds: one line per call.
pub type Progress<'a> = &'a dyn Fn(&str);

/// Builds whatever is missing (control plane and helm), printing progress.
/// Idempotent: a second call with everything present does nothing.
pub fn ensure_all(progress: Progress<'_>) -> Result<Assets, AssetsError> {
    if std::env::var_os(versions::ENV_TEST_ASSETS).is_some_and(|d| !d.is_empty()) {
        let assets = Assets::locate()?;
        progress(&format!("using FLOTILLA_TEST_ASSETS={}", assets.kubernetes_dir.display()));
    } else if Assets::locate().is_err() {
        build_kubernetes(&versions::kubernetes_version(), progress)?;
    }
    if Assets::helm().is_err() {
        build_helm(progress)?;
    }
    let assets = Assets::locate()?;
    progress(&format!("control plane binaries: {}", assets.kubernetes_dir.display()));
    progress(&format!("helm: {}", Assets::helm()?.display()));
    Ok(assets)
}

fn go_command() -> Result<Command, AssetsError> {
    let ok = Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return Err(AssetsError::NoGo);
    }
    let mut cmd = Command::new("go");
    cmd.env("CGO_ENABLED", "0").env("GOFLAGS", "-mod=mod");
    Ok(cmd)
}

/// Runs a go command to completion, returning stdout; on failure the error
/// carries the tail of stderr.
fn run_go(what: &str, dir: &Path, args: &[&str]) -> Result<String, AssetsError> {
    let out = go_command()?.args(args).current_dir(dir).output().map_err(io_err(dir))?;
    if !out.status.success() {
        return Err(AssetsError::Build { what: what.into(), detail: tail(&out.stderr, 40) });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn tail(bytes: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `go build -v`, reporting how many packages were compiled every few seconds.
fn build_with_progress(what: &str, dir: &Path, args: &[String], progress: Progress<'_>) -> Result<(), AssetsError> {
    let mut child = go_command()?
        .arg("build")
        .arg("-v")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io_err(dir))?;
    let stderr =
        child.stderr.take().ok_or_else(|| AssetsError::Build { what: what.into(), detail: "no stderr pipe".into() })?;
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut compiled = 0usize;
    let mut recent: Vec<String> = Vec::new();
    for line in BufReader::new(stderr).lines() {
        let line = line.unwrap_or_default();
        // `go build -v` prints one import path per compiled package; anything
        // with a space or colon is a diagnostic we keep for the error message.
        if !line.contains(' ') && !line.contains(':') {
            compiled += 1;
        }
        recent.push(line.clone());
        if recent.len() > 60 {
            recent.remove(0);
        }
        if last_report.elapsed() >= Duration::from_secs(15) {
            last_report = Instant::now();
            progress(&format!(
                "  {what}: {} elapsed, {compiled} packages compiled (now: {line})",
                fmt_elapsed(started.elapsed())
            ));
        }
    }
    let status = child.wait().map_err(io_err(dir))?;
    if !status.success() {
        return Err(AssetsError::Build { what: what.into(), detail: recent.join("\n") });
    }
    progress(&format!("  {what}: done in {} ({compiled} packages compiled)", fmt_elapsed(started.elapsed())));
    Ok(())
}

pub(crate) fn fmt_elapsed(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}m{:02}s", s / 60, s % 60)
}

/// What the wrapper module needs from `k8s.io/kubernetes`'s go.mod.
#[derive(Debug, PartialEq, Eq)]
pub struct UpstreamGoMod {
    /// Staging module paths, e.g. `k8s.io/api`.
    pub staging_modules: Vec<String>,
    /// `godebug ...` lines (or a block), copied verbatim.
    pub godebug: Vec<String>,
    /// The `go` directive's version.
    pub go_version: String,
    /// The etcd server version Kubernetes is built against (`v3.6.8`).
    pub etcd_version: Option<String>,
}

/// Parses the parts of a go.mod that the wrapper module needs.
pub fn parse_upstream_go_mod(text: &str) -> UpstreamGoMod {
    let mut staging_modules = Vec::new();
    let mut godebug = Vec::new();
    let mut go_version = String::new();
    let mut etcd_version = None;
    let mut in_godebug_block = false;
    for raw in text.lines() {
        let line = raw.split("//").next().unwrap_or("").trim();
        if in_godebug_block {
            godebug.push(raw.to_string());
            if line == ")" {
                in_godebug_block = false;
            }
            continue;
        }
        if line.starts_with("godebug") {
            godebug.push(raw.to_string());
            in_godebug_block = line.ends_with('(');
            continue;
        }
        if let Some(v) = line.strip_prefix("go ") {
            go_version = v.trim().to_string();
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        // `k8s.io/api => ./staging/src/k8s.io/api` (inside or outside a block)
        let fields = if fields.first() == Some(&"replace") { &fields[1..] } else { &fields[..] };
        if fields.len() == 3 && fields[1] == "=>" && fields[2].starts_with("./staging/") {
            staging_modules.push(fields[0].to_string());
        }
        let fields_req = if fields.first() == Some(&"require") { &fields[1..] } else { fields };
        if fields_req.len() >= 2 && fields_req[0] == "go.etcd.io/etcd/server/v3" {
            etcd_version = Some(fields_req[1].to_string());
        }
    }
    UpstreamGoMod { staging_modules, godebug, go_version, etcd_version }
}

/// The wrapper go.mod for building Kubernetes `version` (no leading `v`).
pub fn kubernetes_wrapper_go_mod(version: &str, upstream: &UpstreamGoMod) -> String {
    let minor_patch = version.split_once('.').map(|(_, rest)| rest).unwrap_or(version);
    let mut out =
        String::from("// Generated by flotilla-testenv: builds Kubernetes binaries from the Go module proxy.\n");
    out.push_str("module flotilla.dev/testenv/kubernetes\n\n");
    out.push_str(&format!("go {}\n\n", upstream.go_version));
    for line in &upstream.godebug {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!("\nrequire k8s.io/kubernetes v{version}\n\nreplace (\n"));
    for m in &upstream.staging_modules {
        out.push_str(&format!("\t{m} => {m} v0.{minor_patch}\n"));
    }
    out.push_str(")\n");
    out
}

fn tools_go(imports: &[&str]) -> String {
    let mut out =
        String::from("//go:build tools\n\n// Pins the commands built from this module.\npackage tools\n\nimport (\n");
    for i in imports {
        out.push_str(&format!("\t_ \"{i}\"\n"));
    }
    out.push_str(")\n");
    out
}

/// `-ldflags` so that `/version` and `kubectl version` tell the truth.
pub fn version_ldflags(version: &str) -> String {
    let mut parts = version.split('.');
    let major = parts.next().unwrap_or("1");
    let minor = parts.next().unwrap_or("0");
    let mut flags = String::from("-s -w");
    for pkg in ["k8s.io/component-base/version", "k8s.io/client-go/pkg/version"] {
        flags.push_str(&format!(
            " -X {pkg}.gitVersion=v{version} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor} \
             -X {pkg}.gitTreeState=clean -X {pkg}.buildDate=1970-01-01T00:00:00Z"
        ));
    }
    flags
}

fn write(path: &Path, text: &str) -> Result<(), AssetsError> {
    std::fs::write(path, text).map_err(io_err(path))
}

fn fresh_dir(path: &Path) -> Result<(), AssetsError> {
    if path.exists() {
        std::fs::remove_dir_all(path).map_err(io_err(path))?;
    }
    std::fs::create_dir_all(path).map_err(io_err(path))
}

/// Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
/// kubectl for `version` into the cache.
pub fn build_kubernetes(version: &str, progress: Progress<'_>) -> Result<PathBuf, AssetsError> {
    let started = Instant::now();
    let work = versions::cache_root().join("build").join(format!("kubernetes-v{version}"));
    fresh_dir(&work)?;
    progress(&format!(
        "building the test control plane for Kubernetes v{version} (about 10 minutes cold on 2 cores; cached afterwards)"
    ));
    progress("  downloading k8s.io/kubernetes go.mod from the Go module proxy");
    let json = run_go(
        "go mod download k8s.io/kubernetes",
        &work,
        &["mod", "download", "-json", &format!("k8s.io/kubernetes@v{version}")],
    )?;
    let info: serde_json::Value = serde_json::from_str(&json)
        .map_err(|e| AssetsError::Build { what: "go mod download".into(), detail: e.to_string() })?;
    let go_mod_path = info["GoMod"]
        .as_str()
        .map(PathBuf::from)
        .ok_or_else(|| AssetsError::Build { what: "go mod download".into(), detail: format!("no GoMod in {json}") })?;
    let text = std::fs::read_to_string(&go_mod_path).map_err(io_err(&go_mod_path))?;
    let upstream = parse_upstream_go_mod(&text);
    if upstream.staging_modules.is_empty() {
        return Err(AssetsError::Build {
            what: "reading k8s.io/kubernetes go.mod".into(),
            detail: "no staging replace directives found".into(),
        });
    }
    let etcd_version = upstream.etcd_version.clone().ok_or_else(|| AssetsError::Build {
        what: "reading k8s.io/kubernetes go.mod".into(),
        detail: "no go.etcd.io/etcd/server/v3 requirement found".into(),
    })?;
    progress(&format!(
        "  wrapper module: {} staging modules replaced with v0.{}; etcd {etcd_version} (as upstream pairs it)",
        upstream.staging_modules.len(),
        version.split_once('.').map(|(_, r)| r).unwrap_or(version)
    ));

    let out_dir = versions::kubernetes_bin_dir(version);
    let staging_bin = work.join("bin");
    std::fs::create_dir_all(&staging_bin).map_err(io_err(&staging_bin))?;

    // Kubernetes binaries.
    let k8s_dir = work.join("kubernetes");
    fresh_dir(&k8s_dir)?;
    let cmds = [
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kubectl",
        // The node's components come from the same build, so they share its
        // package cache (about two extra minutes cold).
        "k8s.io/kubernetes/cmd/kubelet",
        "k8s.io/kubernetes/cmd/kube-proxy",
    ];
    write(&k8s_dir.join("go.mod"), &kubernetes_wrapper_go_mod(version, &upstream))?;
    write(&k8s_dir.join("tools.go"), &tools_go(&cmds))?;
    progress("  resolving modules (go mod tidy)");
    run_go("go mod tidy (kubernetes)", &k8s_dir, &["mod", "tidy"])?;
    let mut args = vec![
        "-trimpath".to_string(),
        "-ldflags".to_string(),
        version_ldflags(version),
        "-o".to_string(),
        format!("{}/", staging_bin.display()),
    ];
    args.extend(cmds.iter().map(|c| c.to_string()));
    build_with_progress(
        "kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy",
        &k8s_dir,
        &args,
        progress,
    )?;

    // etcd: its module root is package main, and its go.mod has replace
    // lines too, so it also gets a wrapper module.
    let etcd_dir = work.join("etcd");
    fresh_dir(&etcd_dir)?;
    write(
        &etcd_dir.join("go.mod"),
        &format!(
            "// Generated by flotilla-testenv.\nmodule flotilla.dev/testenv/etcd\n\ngo {}\n\nrequire go.etcd.io/etcd/server/v3 {etcd_version}\n",
            upstream.go_version
        ),
    )?;
    write(&etcd_dir.join("tools.go"), &tools_go(&["go.etcd.io/etcd/server/v3"]))?;
    run_go("go mod tidy (etcd)", &etcd_dir, &["mod", "tidy"])?;
    let etcd_args = vec![
        "-trimpath".to_string(),
        "-ldflags".to_string(),
        "-s -w".to_string(),
        "-o".to_string(),
        staging_bin.join("etcd").display().to_string(),
        "go.etcd.io/etcd/server/v3".to_string(),
    ];
    build_with_progress("etcd", &etcd_dir, &etcd_args, progress)?;

    // Install atomically: a half-built directory is never mistaken for a
    // complete one.
    if let Some(parent) = out_dir.parent() {
        std::fs::create_dir_all(parent).map_err(io_err(parent))?;
    }
    if out_dir.exists() {
        std::fs::remove_dir_all(&out_dir).map_err(io_err(&out_dir))?;
    }
    std::fs::rename(&staging_bin, &out_dir).map_err(io_err(&out_dir))?;
    let _ = std::fs::remove_dir_all(&work);
    progress(&format!("built the control plane in {} -> {}", fmt_elapsed(started.elapsed()), out_dir.display()));
    Ok(out_dir)
}

/// Builds helm with `go install` (helm's go.mod has no replace lines).
pub fn build_helm(progress: Progress<'_>) -> Result<PathBuf, AssetsError> {
    let started = Instant::now();
    let dir = versions::helm_bin_dir();
    let tmp = dir.with_extension("tmp");
    fresh_dir(&tmp)?;
    progress(&format!("building helm v{} (go install; a few minutes cold)", versions::HELM_VERSION));
    let version = versions::HELM_VERSION;
    let out = go_command()?
        .env("GOBIN", &tmp)
        .env_remove("GOFLAGS")
        .args([
            "install",
            "-trimpath",
            "-ldflags",
            &format!("-s -w -X helm.sh/helm/v3/internal/version.version=v{version}"),
            &format!("helm.sh/helm/v3/cmd/helm@v{version}"),
        ])
        .current_dir(std::env::temp_dir())
        .output()
        .map_err(io_err(&tmp))?;
    if !out.status.success() {
        return Err(AssetsError::Build { what: "go install helm".into(), detail: tail(&out.stderr, 40) });
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
    }
    std::fs::rename(&tmp, &dir).map_err(io_err(&dir))?;
    progress(&format!("  helm: done in {} -> {}", fmt_elapsed(started.elapsed()), dir.display()));
    Ok(dir.join("helm"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
module k8s.io/kubernetes

go 1.26.0

godebug default=go1.26

require (
	github.com/blang/semver/v4 v4.0.0
	go.etcd.io/etcd/server/v3 v3.6.8 // indirect
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	github.com/foo/bar => github.com/foo/bar v1.0.0
)
"#;

    #[test]
    fn parses_staging_modules_godebug_and_etcd() {
        let parsed = parse_upstream_go_mod(SAMPLE);
        assert_eq!(parsed.staging_modules, vec!["k8s.io/api", "k8s.io/client-go"]);
        assert_eq!(parsed.godebug, vec!["godebug default=go1.26"]);
        assert_eq!(parsed.go_version, "1.26.0");
        assert_eq!(parsed.etcd_version.as_deref(), Some("v3.6.8"));
    }

    #[test]
    fn wrapper_replaces_each_staging_module_with_its_published_twin() {
        let parsed = parse_upstream_go_mod(SAMPLE);
        let go_mod = kubernetes_wrapper_go_mod("1.36.3", &parsed);
        assert!(go_mod.contains("require k8s.io/kubernetes v1.36.3"));
        assert!(go_mod.contains("\tk8s.io/api => k8s.io/api v0.36.3\n"));
        assert!(go_mod.contains("\tk8s.io/client-go => k8s.io/client-go v0.36.3\n"));
        assert!(go_mod.contains("godebug default=go1.26"));
        assert!(!go_mod.contains("github.com/foo/bar"));
    }

    #[test]
    fn ldflags_set_both_version_packages() {
        let flags = version_ldflags("1.36.3");
        assert!(flags.contains("-X k8s.io/component-base/version.gitVersion=v1.36.3"));
        assert!(flags.contains("-X k8s.io/client-go/pkg/version.gitMinor=36"));
        assert!(flags.starts_with("-s -w"));
    }
}
