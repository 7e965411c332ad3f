//! The images `cargo xtask images` builds without Docker agree with the
//! Dockerfile (user, entrypoint, where the binary goes) and carry exactly
//! the reference each chart renders by default, so `helm install` needs no
//! image override on the local cluster.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::Read;

use flotilla_e2e::{
    build_chart_dependencies, chart_image_reference, charts_dir, helm_ok, loadgen_image_reference, operators, root,
    yaml_documents,
};
use flotilla_testenv::cluster::node::images::{OPERATOR_BINARY_PATH, OPERATOR_USER, archive_name, images_dir};
use serde_json::Value;

/// `(USER, ENTRYPOINT, COPY destination of the binary)` of the Dockerfile's
/// final stage.
fn dockerfile_runtime() -> (String, Vec<String>, String) {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let last_stage = text.rsplit("\nFROM ").next().unwrap();
    let user = last_stage.lines().find_map(|l| l.strip_prefix("USER ")).unwrap().trim().to_string();
    let entrypoint: Vec<String> =
        serde_json::from_str(last_stage.lines().find_map(|l| l.strip_prefix("ENTRYPOINT ")).unwrap().trim()).unwrap();
    let copy = last_stage.lines().find(|l| l.starts_with("COPY --from=builder")).unwrap();
    let dest = copy.split_whitespace().last().unwrap().to_string();
    (user, entrypoint, dest)
}

/// The image config inside a built OCI archive.
fn image_config(reference: &str) -> Value {
    let path = images_dir().join(archive_name(reference));
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} — build the images with `cargo xtask images`", path.display()));
    let mut blobs = std::collections::HashMap::new();
    let mut archive = tar::Archive::new(bytes.as_slice());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        blobs.insert(name, data);
    }
    let index: Value = serde_json::from_slice(&blobs["index.json"]).unwrap();
    let manifest = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["io.containerd.image.name"] == reference)
        .unwrap_or_else(|| panic!("{reference} is not named in {}", path.display()));
    let digest = manifest["digest"].as_str().unwrap().trim_start_matches("sha256:");
    let manifest: Value = serde_json::from_slice(&blobs[&format!("blobs/sha256/{digest}")]).unwrap();
    let config = manifest["config"]["digest"].as_str().unwrap().trim_start_matches("sha256:");
    serde_json::from_slice(&blobs[&format!("blobs/sha256/{config}")]).unwrap()
}

#[test]
fn local_operator_images_agree_with_the_dockerfile() {
    let (user, entrypoint, dest) = dockerfile_runtime();
    assert_eq!(user, OPERATOR_USER, "Dockerfile USER vs the local image");
    assert_eq!(entrypoint, vec![OPERATOR_BINARY_PATH.to_string()], "Dockerfile ENTRYPOINT vs the local image");
    assert_eq!(dest, OPERATOR_BINARY_PATH, "where the Dockerfile copies the binary");
    let mut images: Vec<(String, String)> =
        operators().unwrap().into_iter().map(|op| (chart_image_reference(&op).unwrap(), op)).collect();
    images.push((loadgen_image_reference().unwrap(), "loadgen".into()));
    for (reference, op) in images {
        let config = image_config(&reference);
        assert_eq!(config["config"]["User"], Value::from(user.clone()), "{op}");
        assert_eq!(config["config"]["Entrypoint"], serde_json::json!(entrypoint), "{op}");
        assert_eq!(config["architecture"], "amd64");
    }
}

#[test]
fn local_image_references_are_what_the_charts_render_by_default() {
    build_chart_dependencies().unwrap();
    for op in operators().unwrap() {
        let path = charts_dir().join(&op).display().to_string();
        let mut args = vec!["template", "rel", path.as_str()];
        if op == "service-dns" {
            args.extend(["--set", "route53.hostedZoneId=Z1"]);
        }
        let docs = yaml_documents(&helm_ok(None, &args).unwrap()).unwrap();
        let d = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["image"], Value::from(chart_image_reference(&op).unwrap()), "{op}");
        assert_eq!(c["imagePullPolicy"], "IfNotPresent", "{op}: nothing is pulled when the image is present");
        if op == "load-tester" {
            let flag = format!("--loadgen-image={}", loadgen_image_reference().unwrap());
            assert!(c["args"].as_array().unwrap().iter().any(|a| a == flag.as_str()), "{op}: {}", c["args"]);
        }
    }
}
