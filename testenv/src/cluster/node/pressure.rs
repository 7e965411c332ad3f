//! The node's resource pressure: a kubelet short of disk, memory or pids
//! taints its node and schedules no pod until the shortage ends, which it
//! never does by itself on a test machine. Every test about pods would then
//! wait out its timeout on a Pending pod; `up` says why instead.

use std::path::Path;

use k8s_openapi::api::core::v1::Node;

/// The node's pressure conditions that are true, each as
/// `DiskPressure (KubeletHasDiskPressure: kubelet has disk pressure)`.
pub fn pressures(node: &Node) -> Vec<String> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_.ends_with("Pressure") && c.status == "True")
        .map(|c| {
            let reason = c.reason.as_deref().unwrap_or("no reason");
            match c.message.as_deref() {
                Some(m) if !m.is_empty() => format!("{} ({reason}: {m})", c.type_),
                _ => format!("{} ({reason})", c.type_),
            }
        })
        .collect()
}

/// `12.3 GiB free of 92.0 GiB on /var/lib/…`, or why it cannot say.
pub fn describe_free_space(path: &Path) -> String {
    match free_space(path) {
        Ok((free, total)) => format!("{} free of {} on {}", gib(free), gib(total), path.display()),
        Err(e) => format!("free space on {} unknown: {e}", path.display()),
    }
}

/// Bytes available to an unprivileged writer and the filesystem's size.
fn free_space(path: &Path) -> std::io::Result<(u64, u64)> {
    let st = rustix::fs::statvfs(path)?;
    Ok((st.f_bavail.saturating_mul(st.f_frsize), st.f_blocks.saturating_mul(st.f_frsize)))
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(conditions: serde_json::Value) -> Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}, "status": {"conditions": conditions}}))
            .unwrap()
    }

    #[test]
    fn only_true_pressure_conditions_count() {
        let n = node(serde_json::json!([
            {"type": "Ready", "status": "True"},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
            {"type": "DiskPressure", "status": "True", "reason": "KubeletHasDiskPressure",
             "message": "kubelet has disk pressure"},
            {"type": "PIDPressure", "status": "True", "reason": "KubeletHasInsufficientPID"},
        ]));
        assert_eq!(
            pressures(&n),
            vec![
                "DiskPressure (KubeletHasDiskPressure: kubelet has disk pressure)".to_string(),
                "PIDPressure (KubeletHasInsufficientPID)".to_string(),
            ]
        );
        assert!(pressures(&node(serde_json::json!([]))).is_empty());
    }

    #[test]
    fn free_space_of_a_real_directory_is_at_most_its_size() {
        let (free, total) = free_space(&std::env::temp_dir()).unwrap();
        assert!(total > 0 && free <= total, "{free} of {total}");
        assert!(describe_free_space(Path::new("/no/such/dir")).contains("unknown"));
    }
}
