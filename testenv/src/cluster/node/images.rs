//! The images the one-node cluster runs, built here without Docker
//! ([`crate::build::images`]) and imported into the node's containerd (`k8s.io`
//! namespace, where the kubelet looks): the pod sandbox (`pause`), CoreDNS,
//! the test toolbox (Debian's busybox-static), and each operator's image
//! from its release binary on a distroless-equivalent base.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::build::images::{
    BuiltImage, Entry, ImageError, ImageSpec, Layer, Source, ca_certificates_layer, debian_libraries_layer,
    users_layer, write_archive,
};
use crate::build::node_assets::{NodeAssets, PAUSE_IMAGE, coredns_image};
use crate::build::versions::cache_root;

/// The test toolbox: busybox (shell, httpd, wget, nc, sleep, ps …).
pub const TOOLBOX_IMAGE: &str = "localhost/flotilla/toolbox:latest";
/// Manifests that say `image: busybox` (the seeds' do) run the toolbox.
pub const BUSYBOX_ALIAS: &str = "docker.io/library/busybox:latest";

/// Where built image archives are kept; the node imports every one at start.
pub fn images_dir() -> PathBuf {
    cache_root().join("images")
}

/// What an operator image is, as the Dockerfile says (`USER`, `ENTRYPOINT`,
/// the binary's path): the local build and the Dockerfile are compared by a
/// test, so they cannot drift apart.
pub const OPERATOR_BINARY_PATH: &str = "/usr/local/bin/operator";
pub const OPERATOR_USER: &str = "65532:65532";

/// busybox-static's `wget -T <n>` dies with SIGSEGV (plain `wget` works), so
/// the toolbox's `wget` applies `-T`/`--timeout` from outside, with busybox's
/// `timeout`: a test's HTTP request can never hang.
const WGET_WRAPPER: &str = r#"#!/bin/busybox sh
# flotilla toolbox: busybox wget with a working -T (busybox-static's own -T
# crashes with SIGSEGV); the timeout is applied with busybox timeout.
t=
n=$#
while [ "$n" -gt 0 ]; do
  a=$1; shift; n=$((n-1))
  case "$a" in
    -T) t=$1; shift; n=$((n-1));;
    -T*) t=${a#-T};;
    --timeout=*) t=${a#--timeout=};;
    *) set -- "$@" "$a";;
  esac
done
if [ -n "$t" ]; then exec /bin/busybox timeout -s KILL "$t" /bin/busybox wget "$@"; fi
exec /bin/busybox wget "$@"
"#;

fn busybox_applets(busybox: &Path) -> Result<Vec<String>, ImageError> {
    let out = Command::new(busybox)
        .arg("--list")
        .output()
        .map_err(|source| ImageError::Read { path: busybox.to_path_buf(), source })?;
    if !out.status.success() {
        return Err(ImageError::Other(format!("{} --list failed", busybox.display())));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}

/// The toolbox: Debian's busybox-static with a link per applet.
pub fn toolbox_spec() -> Result<ImageSpec, ImageError> {
    let busybox = PathBuf::from("/bin/busybox");
    let mut entries = vec![Entry::file("/bin/busybox", Source::Host(busybox.clone()), 0o755)];
    for applet in busybox_applets(&busybox)? {
        if applet == "busybox" || applet == "wget" {
            continue;
        }
        entries.push(Entry::symlink(&format!("/bin/{applet}"), "busybox"));
    }
    entries.push(Entry::file("/bin/wget", Source::Bytes(WGET_WRAPPER.into()), 0o755));
    Ok(ImageSpec {
        references: vec![TOOLBOX_IMAGE.into(), BUSYBOX_ALIAS.into()],
        layers: vec![users_layer(), Layer { entries }],
        cmd: vec!["sh".into()],
        env: vec!["PATH=/bin".into()],
        ..Default::default()
    })
}

/// The pod sandbox image.
pub fn pause_spec(node: &NodeAssets) -> ImageSpec {
    ImageSpec {
        references: vec![PAUSE_IMAGE.into()],
        layers: vec![Layer { entries: vec![Entry::file("/pause", Source::Host(node.bin("pause")), 0o755)] }],
        entrypoint: vec!["/pause".into()],
        user: "65535:65535".into(),
        ..Default::default()
    }
}

/// CoreDNS (a static Go binary).
pub fn coredns_spec(node: &NodeAssets) -> ImageSpec {
    ImageSpec {
        references: vec![coredns_image()],
        layers: vec![
            users_layer(),
            Layer { entries: vec![Entry::file("/coredns", Source::Host(node.bin("coredns")), 0o755)] },
        ],
        entrypoint: vec!["/coredns".into()],
        ..Default::default()
    }
}

/// An operator's image: glibc, libgcc and CA certificates from this Debian 12
/// machine's own packages, `/etc/passwd` with nonroot 65532, no shell (the
/// contents of `gcr.io/distroless/cc-debian12:nonroot`), then the release
/// binary at [`OPERATOR_BINARY_PATH`], run as [`OPERATOR_USER`].
pub fn operator_spec(operator: &str, binary: &Path, reference: &str, version: &str) -> Result<ImageSpec, ImageError> {
    let mut labels = BTreeMap::new();
    labels.insert("org.opencontainers.image.title".into(), format!("flotilla-{operator}"));
    labels.insert("org.opencontainers.image.description".into(), format!("Flotilla operator {operator}"));
    labels.insert("org.opencontainers.image.version".into(), version.into());
    labels.insert("org.opencontainers.image.licenses".into(), "Apache-2.0".into());
    labels.insert("org.opencontainers.image.vendor".into(), "Flotilla".into());
    Ok(ImageSpec {
        references: vec![reference.into()],
        layers: vec![
            users_layer(),
            ca_certificates_layer(),
            debian_libraries_layer(&["libc6", "libgcc-s1"])?,
            Layer { entries: vec![Entry::file(OPERATOR_BINARY_PATH, Source::Host(binary.to_path_buf()), 0o755)] },
        ],
        entrypoint: vec![OPERATOR_BINARY_PATH.into()],
        user: OPERATOR_USER.into(),
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt".into(),
        ],
        labels,
        ..Default::default()
    })
}

/// A file name for an image's archive.
pub fn archive_name(reference: &str) -> String {
    let cleaned: String =
        reference.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' { c } else { '_' }).collect();
    format!("{cleaned}.tar")
}

/// Builds an image's archive into [`images_dir`].
pub fn build(spec: &ImageSpec) -> Result<BuiltImage, ImageError> {
    let first = spec.references.first().cloned().unwrap_or_default();
    write_archive(spec, &images_dir().join(archive_name(&first)))
}

/// The node's own images (sandbox, DNS, toolbox), built into [`images_dir`].
pub fn build_system_images(node: &NodeAssets) -> Result<Vec<BuiltImage>, ImageError> {
    [pause_spec(node), coredns_spec(node), toolbox_spec()?].iter().map(build).collect()
}

/// `ctr images import` of archives into the node's containerd.
pub fn import(ctr: &Path, socket: &Path, archives: &[PathBuf]) -> Result<(), ImageError> {
    for archive in archives {
        let out = Command::new(ctr)
            .arg("--address")
            .arg(socket)
            .args(["--namespace", "k8s.io", "images", "import"])
            .arg(archive)
            .output()
            .map_err(|source| ImageError::Read { path: ctr.to_path_buf(), source })?;
        if !out.status.success() {
            return Err(ImageError::Other(format!(
                "importing {}: {}",
                archive.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
    }
    Ok(())
}

/// Every archive in [`images_dir`].
pub fn archives() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(images_dir())
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "tar")).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// References of the images in the node's containerd.
pub fn list(ctr: &Path, socket: &Path) -> Result<Vec<String>, ImageError> {
    let out = Command::new(ctr)
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "images", "list", "--quiet"])
        .output()
        .map_err(|source| ImageError::Read { path: ctr.to_path_buf(), source })?;
    if !out.status.success() {
        return Err(ImageError::Other(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_names_are_file_names() {
        assert_eq!(
            archive_name("ghcr.io/flotilla-dev/flotilla-service-dns:0.1.0"),
            "ghcr.io_flotilla_dev_flotilla_service_dns_0.1.0.tar"
        );
    }
}
