//! OCI images built without Docker: layers are tar streams of files taken
//! from this machine (its own Debian 12 packages) or from our builds, written
//! as an OCI image-layout archive (`oci-spec` for the JSON, `tar` for the
//! streams) that containerd imports with `ctr images import`.
//!
//! Layers are uncompressed and deterministic (sorted entries, mtime 0), so
//! the same inputs give the same digests and a re-import is a no-op.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use oci_spec::image::{
    Arch, ConfigBuilder, DescriptorBuilder, Digest, ImageConfigurationBuilder, ImageIndexBuilder, ImageManifestBuilder,
    MediaType, Os, PlatformBuilder, RootFsBuilder,
};
use sha2::{Digest as _, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("writing {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("image metadata: {0}")]
    Spec(#[from] oci_spec::OciSpecError),
    #[error("{0}")]
    Other(String),
}

/// Where an image file's bytes come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file on this machine (symlinks followed).
    Host(PathBuf),
    Bytes(Vec<u8>),
}

/// One entry of a layer.
#[derive(Debug, Clone)]
pub enum Entry {
    File { path: String, source: Source, mode: u32, uid: u64, gid: u64 },
    Dir { path: String, mode: u32, uid: u64, gid: u64 },
    Symlink { path: String, target: String },
}

impl Entry {
    /// A root-owned file.
    pub fn file(path: &str, source: Source, mode: u32) -> Self {
        Entry::File { path: path.into(), source, mode, uid: 0, gid: 0 }
    }

    pub fn dir(path: &str, mode: u32) -> Self {
        Entry::Dir { path: path.into(), mode, uid: 0, gid: 0 }
    }

    pub fn symlink(path: &str, target: &str) -> Self {
        Entry::Symlink { path: path.into(), target: target.into() }
    }

    fn path(&self) -> &str {
        match self {
            Entry::File { path, .. } | Entry::Dir { path, .. } | Entry::Symlink { path, .. } => path,
        }
    }
}

/// A layer: its entries (parent directories are added as needed).
#[derive(Debug, Clone, Default)]
pub struct Layer {
    pub entries: Vec<Entry>,
}

/// What an image is: references, layers and the runtime config.
#[derive(Debug, Clone, Default)]
pub struct ImageSpec {
    /// Every name the image is imported under (the first is its main one).
    pub references: Vec<String>,
    pub layers: Vec<Layer>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `uid:gid` (or empty for root).
    pub user: String,
    pub env: Vec<String>,
    pub working_dir: String,
    pub labels: BTreeMap<String, String>,
}

/// What was written.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub references: Vec<String>,
    pub archive: PathBuf,
    /// `sha256:…` of the manifest.
    pub manifest_digest: String,
    pub size: u64,
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The tar stream of one layer.
pub fn layer_tar(layer: &Layer) -> Result<Vec<u8>, ImageError> {
    // Parent directories first, entries sorted by path: deterministic, and
    // every file's directory exists before it.
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    for e in &layer.entries {
        let path = e.path().trim_start_matches('/').to_string();
        let mut parent = Path::new(&path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            let key = p.to_string_lossy().into_owned();
            entries.entry(key.clone()).or_insert_with(|| Entry::dir(&key, 0o755));
            parent = p.parent();
        }
        entries.insert(path, e.clone());
    }
    let mut builder = tar::Builder::new(Vec::new());
    for (path, e) in &entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        match e {
            Entry::Dir { mode, uid, gid, .. } => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(*mode);
                header.set_uid(*uid);
                header.set_gid(*gid);
                header.set_size(0);
                builder.append_data(&mut header, format!("{path}/"), std::io::empty())
            }
            Entry::Symlink { target, .. } => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_size(0);
                builder.append_link(&mut header, path, target)
            }
            Entry::File { source, mode, uid, gid, .. } => {
                let bytes = match source {
                    Source::Bytes(b) => b.clone(),
                    Source::Host(p) => {
                        std::fs::read(p).map_err(|source| ImageError::Read { path: p.clone(), source })?
                    }
                };
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(*mode);
                header.set_uid(*uid);
                header.set_gid(*gid);
                header.set_size(bytes.len() as u64);
                builder.append_data(&mut header, path, bytes.as_slice())
            }
        }
        .map_err(|e| ImageError::Other(format!("adding {path} to a layer: {e}")))?;
    }
    builder.into_inner().map_err(|e| ImageError::Other(format!("finishing a layer: {e}")))
}

/// The repository-relative tag of a reference (`…:tag`), for the OCI
/// `org.opencontainers.image.ref.name` annotation.
fn tag_of(reference: &str) -> &str {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    last.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest")
}

/// Writes `spec` as an OCI image-layout tar archive at `out`.
pub fn write_archive(spec: &ImageSpec, out: &Path) -> Result<BuiltImage, ImageError> {
    if spec.references.is_empty() {
        return Err(ImageError::Other("an image needs at least one reference".into()));
    }
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut layer_descriptors = Vec::new();
    let mut diff_ids = Vec::new();
    for layer in &spec.layers {
        let tar = layer_tar(layer)?;
        let digest = sha256(&tar);
        layer_descriptors.push(
            DescriptorBuilder::default()
                .media_type(MediaType::ImageLayer)
                .digest(Digest::try_from(format!("sha256:{digest}"))?)
                .size(tar.len() as u64)
                .build()?,
        );
        diff_ids.push(format!("sha256:{digest}"));
        blobs.push((digest, tar));
    }
    let mut config = ConfigBuilder::default();
    if !spec.user.is_empty() {
        config = config.user(spec.user.clone());
    }
    if !spec.entrypoint.is_empty() {
        config = config.entrypoint(spec.entrypoint.clone());
    }
    if !spec.cmd.is_empty() {
        config = config.cmd(spec.cmd.clone());
    }
    if !spec.env.is_empty() {
        config = config.env(spec.env.clone());
    }
    if !spec.working_dir.is_empty() {
        config = config.working_dir(spec.working_dir.clone());
    }
    if !spec.labels.is_empty() {
        config = config.labels(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<HashMap<_, _>>());
    }
    let image_config = ImageConfigurationBuilder::default()
        .architecture(Arch::Amd64)
        .os(Os::Linux)
        .created("1970-01-01T00:00:00Z")
        .config(config.build()?)
        .rootfs(RootFsBuilder::default().typ("layers").diff_ids(diff_ids).build()?)
        .build()?;
    let config_json = serde_json::to_vec(&image_config).map_err(|e| ImageError::Other(e.to_string()))?;
    let config_digest = sha256(&config_json);
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(
            DescriptorBuilder::default()
                .media_type(MediaType::ImageConfig)
                .digest(Digest::try_from(format!("sha256:{config_digest}"))?)
                .size(config_json.len() as u64)
                .build()?,
        )
        .layers(layer_descriptors)
        .build()?;
    blobs.push((config_digest, config_json));
    let manifest_json = serde_json::to_vec(&manifest).map_err(|e| ImageError::Other(e.to_string()))?;
    let manifest_digest = sha256(&manifest_json);
    let platform = PlatformBuilder::default().architecture(Arch::Amd64).os(Os::Linux).build()?;
    // One index entry per reference: containerd names the image after
    // `io.containerd.image.name`.
    let mut index_manifests = Vec::new();
    for reference in &spec.references {
        index_manifests.push(
            DescriptorBuilder::default()
                .media_type(MediaType::ImageManifest)
                .digest(Digest::try_from(format!("sha256:{manifest_digest}"))?)
                .size(manifest_json.len() as u64)
                .platform(platform.clone())
                .annotations(HashMap::from([
                    ("io.containerd.image.name".to_string(), reference.clone()),
                    ("org.opencontainers.image.ref.name".to_string(), tag_of(reference).to_string()),
                ]))
                .build()?,
        );
    }
    blobs.push((manifest_digest.clone(), manifest_json));
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(index_manifests)
        .build()?;
    let index_json = serde_json::to_vec(&index).map_err(|e| ImageError::Other(e.to_string()))?;

    let mut archive = tar::Builder::new(Vec::new());
    let mut add = |name: &str, bytes: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_mode(0o644);
        header.set_size(bytes.len() as u64);
        header.set_entry_type(tar::EntryType::Regular);
        archive.append_data(&mut header, name, bytes)
    };
    let wrap = |e: std::io::Error| ImageError::Write { path: out.to_path_buf(), source: e };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#).map_err(wrap)?;
    add("index.json", &index_json).map_err(wrap)?;
    for (digest, bytes) in &blobs {
        add(&format!("blobs/sha256/{digest}"), bytes).map_err(wrap)?;
    }
    let bytes = archive.into_inner().map_err(wrap)?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir).map_err(|source| ImageError::Write { path: dir.to_path_buf(), source })?;
    }
    let tmp = out.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(|source| ImageError::Write { path: tmp.clone(), source })?;
    file.write_all(&bytes).map_err(|source| ImageError::Write { path: tmp.clone(), source })?;
    std::fs::rename(&tmp, out).map_err(|source| ImageError::Write { path: out.to_path_buf(), source })?;
    Ok(BuiltImage {
        references: spec.references.clone(),
        archive: out.to_path_buf(),
        manifest_digest: format!("sha256:{manifest_digest}"),
        size: bytes.len() as u64,
    })
}

/// `/etc/passwd`, `/etc/group` and the home directory of distroless's users
/// (root, nobody, nonroot 65532).
pub fn users_layer() -> Layer {
    let passwd = "root:x:0:0:root:/root:/sbin/nologin\n\
                  nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n\
                  nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
    let group = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n";
    Layer {
        entries: vec![
            Entry::file("/etc/passwd", Source::Bytes(passwd.into()), 0o644),
            Entry::file("/etc/group", Source::Bytes(group.into()), 0o644),
            Entry::file("/etc/nsswitch.conf", Source::Bytes(b"hosts: files dns\n".to_vec()), 0o644),
            Entry::dir("/root", 0o700),
            Entry::Dir { path: "/home/nonroot".into(), mode: 0o700, uid: 65532, gid: 65532 },
            Entry::dir("/tmp", 0o1777),
        ],
    }
}

/// The files of installed Debian packages under the library directories
/// (the runtime parts of `libc6`, `libgcc-s1`), at their real paths, with
/// this machine's usrmerge links (`/lib -> usr/lib`, …) so the dynamic
/// loader finds them where the binary says.
pub fn debian_libraries_layer(packages: &[&str]) -> Result<Layer, ImageError> {
    let mut entries = Vec::new();
    for top in ["bin", "sbin", "lib", "lib64"] {
        let p = Path::new("/").join(top);
        if let Ok(target) = std::fs::read_link(&p) {
            entries.push(Entry::symlink(&format!("/{top}"), &target.to_string_lossy()));
        }
    }
    for package in packages {
        let out = std::process::Command::new("dpkg")
            .args(["-L", package])
            .output()
            .map_err(|source| ImageError::Read { path: PathBuf::from("dpkg"), source })?;
        if !out.status.success() {
            return Err(ImageError::Other(format!(
                "Debian package {package} is not installed (`apt-get install {package}`): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let listed = Path::new(line);
            let in_lib = ["/lib", "/lib64", "/usr/lib", "/usr/lib64"].iter().any(|d| listed.starts_with(d));
            if !in_lib || line.contains("/gconv/") {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(listed) else { continue };
            if meta.is_dir() {
                continue;
            }
            // The package lists `/lib/…`; on a usrmerge system the file
            // lives in `/usr/lib/…`: put it where it really is.
            let dir = listed.parent().and_then(|d| std::fs::canonicalize(d).ok()).unwrap_or_default();
            let Some(name) = listed.file_name() else { continue };
            let real = dir.join(name).to_string_lossy().into_owned();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(listed)
                    .map_err(|source| ImageError::Read { path: listed.to_path_buf(), source })?;
                entries.push(Entry::symlink(&real, &target.to_string_lossy()));
            } else {
                entries.push(Entry::file(&real, Source::Host(listed.to_path_buf()), 0o755));
            }
        }
    }
    Ok(Layer { entries })
}

/// The CA bundle of this machine's `ca-certificates` package.
pub fn ca_certificates_layer() -> Layer {
    Layer {
        entries: vec![Entry::file(
            "/etc/ssl/certs/ca-certificates.crt",
            Source::Host(PathBuf::from("/etc/ssl/certs/ca-certificates.crt")),
            0o644,
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tar_bytes: &[u8]) -> Vec<String> {
        let mut archive = tar::Archive::new(tar_bytes);
        let mut out = Vec::new();
        for entry in archive.entries().into_iter().flatten().flatten() {
            out.push(entry.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default());
        }
        out
    }

    #[test]
    fn layers_are_deterministic_and_have_parent_directories() {
        let layer = Layer {
            entries: vec![
                Entry::file("/usr/local/bin/operator", Source::Bytes(b"x".to_vec()), 0o755),
                Entry::symlink("/bin/sh", "busybox"),
            ],
        };
        let a = layer_tar(&layer).unwrap_or_default();
        let b = layer_tar(&layer).unwrap_or_default();
        assert_eq!(sha256(&a), sha256(&b));
        let n = names(&a);
        assert_eq!(n, vec!["bin/", "bin/sh", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/operator"]);
    }

    #[test]
    fn archive_has_one_index_entry_per_reference() {
        let dir = std::env::temp_dir().join(format!("flotilla-image-test-{}", rand::random::<u32>()));
        let spec = ImageSpec {
            references: vec!["localhost/flotilla/toolbox:latest".into(), "docker.io/library/busybox:latest".into()],
            layers: vec![users_layer()],
            cmd: vec!["sh".into()],
            user: "65532:65532".into(),
            ..Default::default()
        };
        let built = write_archive(&spec, &dir.join("img.tar"));
        let built = match built {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        };
        let bytes = std::fs::read(&built.archive).unwrap_or_default();
        let mut archive = tar::Archive::new(bytes.as_slice());
        let mut index = None;
        let mut blobs = 0;
        for entry in archive.entries().into_iter().flatten().flatten() {
            let mut entry = entry;
            let path = entry.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            if path == "index.json" {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut entry, &mut s);
                index = Some(s);
            } else if path.starts_with("blobs/sha256/") {
                blobs += 1;
            }
        }
        let index: serde_json::Value = serde_json::from_str(&index.unwrap_or_default()).unwrap_or_default();
        let names: Vec<&str> = index["manifests"]
            .as_array()
            .map(|m| m.iter().filter_map(|d| d["annotations"]["io.containerd.image.name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, spec.references.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(blobs, 3, "layer, config, manifest");
        assert_eq!(tag_of("ghcr.io/flotilla-dev/flotilla-x:0.1.0"), "0.1.0");
        assert_eq!(tag_of("localhost:5000/x"), "latest");
        let _ = std::fs::remove_dir_all(dir);
    }
}
