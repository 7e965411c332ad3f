//! Writing a custom resource's status with server-side apply on the status
//! subresource: the operator owns exactly the fields it sends, and fields
//! written by other managers survive.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Applies `status` to `name`'s status subresource as `field_manager`
/// (`flotilla-<operator>`). `status` is the whole status this operator owns:
/// fields it owned and no longer sends are removed, as apply semantics say.
pub async fn apply_status<K, S>(api: &Api<K>, name: &str, field_manager: &str, status: &S) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + std::fmt::Debug,
    S: Serialize,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(name, &PatchParams::apply(field_manager).force(), &Patch::Apply(&patch)).await
}

/// A custom resource's status, as the operator writes it: its conditions
/// are what [`same_ignoring_times`] leaves the times and order out of.
pub trait ReportedStatus: Clone + PartialEq + Serialize {
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;

    /// Clears the fields that move with every write and alone never
    /// warrant one (e.g. a `lastSyncTime`): [`says_the_same`] compares
    /// without them. None by default.
    fn clear_write_times(&mut self) {}
}

/// Whether two statuses say the same: [`same_ignoring_times`], and
/// without the fields [`ReportedStatus::clear_write_times`] clears.
pub fn says_the_same<S: ReportedStatus>(a: &S, b: &S) -> bool {
    let cleared = |s: &S| {
        let mut s = s.clone();
        s.clear_write_times();
        s
    };
    same_ignoring_times(&cleared(a), &cleared(b), S::conditions_mut)
}

/// Applies `new` (as [`apply_status`]) unless `old` says the same
/// ([`says_the_same`]); whether it wrote. An unchanged status is not
/// written: every write wakes every watcher of the object, the operator's
/// own controller included.
pub async fn apply_status_if_changed<K, S>(
    api: &Api<K>,
    name: &str,
    field_manager: &str,
    old: Option<&S>,
    new: &S,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + std::fmt::Debug,
    S: ReportedStatus,
{
    if old.is_some_and(|old| says_the_same(old, new)) {
        return Ok(false);
    }
    apply_status(api, name, field_manager, new).await?;
    Ok(true)
}

/// Applies `new` (as [`apply_status`]) unless it says what the status
/// this operator wrote last said ([`Fingerprint`], kept in `last`); whether
/// it wrote. For an operator that keeps no copy of the object's status
/// (pod-alert's cache drops them: each may hold up to 256 KiB of log tails),
/// so there is no `old` to compare with; `last` is set only once the write
/// succeeded.
pub async fn apply_status_if_new<K, S>(
    api: &Api<K>,
    name: &str,
    field_manager: &str,
    last: &mut Option<Fingerprint>,
    new: &S,
) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + std::fmt::Debug,
    S: ReportedStatus,
{
    let print = Fingerprint::of(new);
    if *last == Some(print) {
        return Ok(false);
    }
    apply_status(api, name, field_manager, new).await?;
    *last = Some(print);
    Ok(true)
}

/// What a status says, condition times and order aside, as 8 bytes: equal
/// fingerprints, the same status as far as [`says_the_same`] can tell (up
/// to a 64-bit hash collision, which costs one skipped write until the
/// status changes again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint(u64);

impl Fingerprint {
    pub fn of<S: ReportedStatus>(s: &S) -> Self {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut s = without_times(s, S::conditions_mut);
        s.clear_write_times();
        serde_json::to_vec(&s).unwrap_or_default().hash(&mut h);
        Self(h.finish())
    }
}

/// Whether two statuses say the same, ignoring when their conditions last
/// changed and in which order they are listed: an unchanged status is not
/// written again (every write would wake every watcher of the object).
/// `conditions` picks a status's conditions.
pub fn same_ignoring_times<S: Clone + PartialEq>(
    a: &S,
    b: &S,
    conditions: impl Fn(&mut S) -> &mut Vec<Condition>,
) -> bool {
    without_times(a, &conditions) == without_times(b, &conditions)
}

/// `s` with its conditions' transition times zeroed and sorted by type.
fn without_times<S: Clone>(s: &S, conditions: impl Fn(&mut S) -> &mut Vec<Condition>) -> S {
    let mut s = s.clone();
    let list = conditions(&mut s);
    for c in list.iter_mut() {
        c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
    }
    list.sort_by(|x, y| x.type_.cmp(&y.type_));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, PartialEq, Debug, Serialize)]
    struct St {
        n: i32,
        conditions: Vec<Condition>,
        synced_at: Option<i64>,
    }

    impl ReportedStatus for St {
        fn conditions_mut(&mut self) -> &mut Vec<Condition> {
            &mut self.conditions
        }

        fn clear_write_times(&mut self) {
            self.synced_at = None;
        }
    }

    fn cond(t: &str, status: &str, secs: i64) -> Condition {
        Condition {
            type_: t.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH)),
        }
    }

    #[test]
    fn times_and_order_do_not_count_anything_else_does() {
        let a = St { n: 1, conditions: vec![cond("Ready", "True", 1), cond("Synced", "True", 2)], synced_at: None };
        let b = St { n: 1, conditions: vec![cond("Synced", "True", 9), cond("Ready", "True", 8)], synced_at: None };
        assert!(same_ignoring_times(&a, &b, |s| &mut s.conditions));
        let c = St { n: 2, ..b.clone() };
        assert!(!same_ignoring_times(&a, &c, |s| &mut s.conditions));
        let d = St { n: 1, conditions: vec![cond("Ready", "False", 1), cond("Synced", "True", 2)], synced_at: None };
        assert!(!same_ignoring_times(&a, &d, |s| &mut s.conditions));
    }

    #[test]
    fn a_write_time_alone_is_not_a_change_to_report() {
        let a = St { n: 1, conditions: vec![cond("Ready", "True", 1)], synced_at: Some(10) };
        let later = St { synced_at: Some(20), conditions: vec![cond("Ready", "True", 5)], ..a.clone() };
        assert!(says_the_same(&a, &later));
        assert!(!same_ignoring_times(&a, &later, |s| &mut s.conditions), "only the trait's own fields are cleared");
        let changed = St { n: 2, ..later };
        assert!(!says_the_same(&a, &changed));
    }

    #[derive(Clone, PartialEq, Debug, Serialize)]
    struct Reported {
        n: i32,
        conditions: Vec<Condition>,
    }

    impl ReportedStatus for Reported {
        fn conditions_mut(&mut self) -> &mut Vec<Condition> {
            &mut self.conditions
        }
    }

    #[test]
    fn fingerprints_agree_with_same_ignoring_times() {
        let a = Reported { n: 1, conditions: vec![cond("Ready", "True", 1), cond("Synced", "True", 2)] };
        let b = Reported { n: 1, conditions: vec![cond("Synced", "True", 9), cond("Ready", "True", 8)] };
        assert_eq!(Fingerprint::of(&a), Fingerprint::of(&b), "times and order do not count");
        let c = Reported { n: 2, ..b.clone() };
        assert_ne!(Fingerprint::of(&a), Fingerprint::of(&c));
        let d = Reported { n: 1, conditions: vec![cond("Ready", "False", 1), cond("Synced", "True", 2)] };
        assert_ne!(Fingerprint::of(&a), Fingerprint::of(&d));
        let mut e = a.clone();
        e.conditions[0].message = "now something".into();
        assert_ne!(Fingerprint::of(&a), Fingerprint::of(&e), "a message counts");
    }
}
