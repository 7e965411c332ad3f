//! CRD files: generated from the Rust types (`#[derive(CustomResource,
//! JsonSchema)]`), one file per kind named `<plural>.<group>.yaml`. Each
//! operator crate exposes `pub fn crds() -> Vec<CustomResourceDefinition>`;
//! `cargo xtask crds` writes them to `crds/` and `cargo xtask test` fails when
//! a committed file differs from what the types generate.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

const HEADER: &str = "# Generated from the Rust types by `cargo xtask crds`. Do not edit.\n";

#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("serializing CRD {name}: {source}")]
    Yaml { name: String, source: serde_saphyr::SerializeError },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("CRD files are out of date (run `cargo xtask crds` and commit): {0}")]
    Drift(String),
}

/// `<plural>.<group>.yaml`, the CRD's own name.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// The file's text.
pub fn render(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let yaml = serde_saphyr::to_string(crd).map_err(|source| CrdError::Yaml { name: file_name(crd), source })?;
    Ok(format!("{HEADER}{yaml}"))
}

/// `--print-crd`: prints `crds` as YAML documents; the exit code says
/// whether that worked.
pub fn print(crds: &[CustomResourceDefinition]) -> std::process::ExitCode {
    match crds.iter().map(render).collect::<Result<String, _>>() {
        Ok(yaml) => {
            print!("{yaml}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Whether to write the files or only compare them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Write,
    Check,
}

/// Writes (or checks) every CRD into `dir`. In `Check` mode, any difference,
/// missing file or stale generated file is a [`CrdError::Drift`].
pub fn sync_dir(dir: &Path, crds: &[CustomResourceDefinition], mode: Mode) -> Result<Vec<String>, CrdError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| CrdError::Io { path, source }
    };
    let mut differing = Vec::new();
    let mut expected = Vec::new();
    for crd in crds {
        let name = file_name(crd);
        let path = dir.join(&name);
        let text = render(crd)?;
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() != Some(text.as_str()) {
            differing.push(name.clone());
            if mode == Mode::Write {
                std::fs::create_dir_all(dir).map_err(io(dir))?;
                std::fs::write(&path, &text).map_err(io(&path))?;
            }
        }
        expected.push(name);
    }
    // Generated files whose kind no longer exists.
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let generated = std::fs::read_to_string(entry.path()).is_ok_and(|t| t.starts_with(HEADER));
            if name.ends_with(".yaml") && generated && !expected.contains(&name) {
                differing.push(format!("{name} (stale)"));
                if mode == Mode::Write {
                    std::fs::remove_file(entry.path()).map_err(io(&entry.path()))?;
                }
            }
        }
    }
    if mode == Mode::Check && !differing.is_empty() {
        return Err(CrdError::Drift(differing.join(", ")));
    }
    Ok(differing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    fn crd(name: &str) -> CustomResourceDefinition {
        let mut c = CustomResourceDefinition::default();
        c.metadata.name = Some(name.to_string());
        c
    }

    #[test]
    fn writes_then_checks_then_catches_drift_and_stale_files() {
        let dir = std::env::temp_dir().join(format!("flotilla-crd-test-{}", rand::random::<u32>()));
        let crds = vec![crd("widgets.toy.flotilla.dev"), crd("gadgets.toy.flotilla.dev")];
        assert_eq!(sync_dir(&dir, &crds, Mode::Check).unwrap_err().to_string().matches(".yaml").count(), 2);
        sync_dir(&dir, &crds, Mode::Write).unwrap();
        assert!(dir.join("widgets.toy.flotilla.dev.yaml").is_file());
        assert!(sync_dir(&dir, &crds, Mode::Check).unwrap().is_empty());

        std::fs::write(
            dir.join("widgets.toy.flotilla.dev.yaml"),
            "# Generated from the Rust types by `cargo xtask crds`. Do not edit.\nedited: true\n",
        )
        .unwrap();
        let err = sync_dir(&dir, &crds, Mode::Check).unwrap_err().to_string();
        assert!(err.contains("widgets.toy.flotilla.dev.yaml"), "{err}");

        // A kind that no longer exists leaves a stale generated file.
        sync_dir(&dir, &crds, Mode::Write).unwrap();
        let err = sync_dir(&dir, &crds[..1], Mode::Check).unwrap_err().to_string();
        assert!(err.contains("gadgets.toy.flotilla.dev.yaml (stale)"), "{err}");
        sync_dir(&dir, &crds[..1], Mode::Write).unwrap();
        assert!(!dir.join("gadgets.toy.flotilla.dev.yaml").exists());
        // Hand-written files are not ours to judge.
        std::fs::write(dir.join("README.yaml"), "hand: written\n").unwrap();
        assert!(sync_dir(&dir, &crds[..1], Mode::Check).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn file_name_is_the_crd_name() {
        assert_eq!(file_name(&crd("copyrules.flotilla.dev")), "copyrules.flotilla.dev.yaml");
    }
}
