//! The owner id when `--owner-id` is not given: derived from the cluster,
//! so that two clusters sharing a zone never both call themselves
//! `default` and delete each other's names (external-dns's most reported
//! problem). The `kube-system` namespace's UID is fixed for a cluster's
//! life; two installations in one cluster that watch different parts of it
//! (`--watch-namespace`, `--service-selector`) get different ids too.
//!
//! The id is short on purpose: it is in every ownership TXT, and Route53
//! counts those characters against its 32,000 per request — the whole UID
//! (36 characters) cost a 5,000-Service burst five more requests, and
//! `k8s-` + 8 hex digits still one more than `default`: 8 hex digits alone
//! cost what `default` does. 32 bits of a random UID tell a user's clusters
//! apart (and `--owner-id` pins any other id).

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};

/// The namespace whose UID identifies the cluster.
pub const CLUSTER_NAMESPACE: &str = "kube-system";

/// FNV-1a, 64 bits: a hash that stays the same across Rust releases (an
/// owner id must never change under an upgrade).
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            h = (h ^ 0xff).wrapping_mul(0x0100_0000_01b3);
        }
        for b in p.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// `<first 8 hex digits of the UID>` for an installation watching the
/// whole cluster, else `<8 hex>-<6 hex of what it watches>` (8 or 15
/// characters).
pub fn derive(cluster_uid: &str, watch_namespace: Option<&str>, selector: Option<&str>) -> String {
    let uid: String =
        cluster_uid.chars().filter(char::is_ascii_hexdigit).take(8).collect::<String>().to_ascii_lowercase();
    match (watch_namespace, selector) {
        (None, None) => uid,
        (ns, sel) => {
            let scope = fnv1a(&[ns.unwrap_or(""), sel.unwrap_or("")]);
            format!("{uid}-{:06x}", scope & 0xff_ffff)
        }
    }
}

/// Reads the cluster's UID (`get namespaces/kube-system`).
pub async fn cluster_uid(client: &Client) -> Result<String, kube::Error> {
    let ns = Api::<Namespace>::all(client.clone()).get(CLUSTER_NAMESPACE).await?;
    Ok(ns.metadata.uid.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_are_stable_valid_and_scoped() {
        let uid = "0f6f2c3e-8a1b-4f7e-9c1d-2b3a4c5d6e7f";
        let all = derive(uid, None, None);
        assert_eq!(all, "0f6f2c3e");
        let a = derive(uid, Some("team-a"), None);
        let b = derive(uid, Some("team-b"), None);
        assert_ne!(a, b, "two installations watching different namespaces differ");
        assert_ne!(a, all);
        assert_eq!(a, derive(uid, Some("team-a"), None), "stable");
        assert_ne!(derive(uid, None, Some("dns=public")), all);
        assert!(a.starts_with("0f6f2c3e-") && a.len() == 15, "{a}");
        for id in [&all, &a] {
            assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{id}");
        }
        // Pinned: the value must never change between releases.
        assert_eq!(fnv1a(&["team-a", ""]), fnv1a(&["team-a", ""]));
        assert_eq!(fnv1a(&["a"]), 0xaf63_dc4c_8601_ec8c);
    }
}
