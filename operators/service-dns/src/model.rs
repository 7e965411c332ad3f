//! The record model shared by the desired state, the current state and the plan.

use std::fmt;

/// The record types service-dns writes for a Service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordType {
    A,
    Aaaa,
    Cname,
    Txt,
    /// Anything else found in the zone (MX, NS, SOA, …): never touched.
    Other,
}

impl RecordType {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordType::A => "A",
            RecordType::Aaaa => "AAAA",
            RecordType::Cname => "CNAME",
            RecordType::Txt => "TXT",
            RecordType::Other => "OTHER",
        }
    }

    /// The address/alias types a Service may own at a name.
    pub const MANAGED: [RecordType; 3] = [RecordType::A, RecordType::Aaaa, RecordType::Cname];

    pub fn is_managed(self) -> bool {
        Self::MANAGED.contains(&self)
    }
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record set's values, sorted, without duplicates. Nearly every record
/// set has one (an address, an ownership TXT): it is kept as it is, not in
/// a slice of one, which saves an allocation (32 bytes with malloc's cost)
/// per record of the zone copy. Reads, compares and hashes as the slice.
#[derive(Clone)]
pub enum Values {
    One(Box<str>),
    Many(Box<[Box<str>]>),
}

impl Default for Values {
    fn default() -> Self {
        Values::Many(Box::default())
    }
}

impl std::ops::Deref for Values {
    type Target = [Box<str>];

    fn deref(&self) -> &[Box<str>] {
        match self {
            Values::One(v) => std::slice::from_ref(v),
            Values::Many(v) => v,
        }
    }
}

impl From<Vec<Box<str>>> for Values {
    fn from(mut v: Vec<Box<str>>) -> Self {
        match v.pop() {
            Some(one) if v.is_empty() => Values::One(one),
            Some(last) => {
                v.push(last);
                Values::Many(v.into_boxed_slice())
            }
            None => Values::default(),
        }
    }
}

impl FromIterator<Box<str>> for Values {
    fn from_iter<I: IntoIterator<Item = Box<str>>>(iter: I) -> Self {
        iter.into_iter().collect::<Vec<_>>().into()
    }
}

impl<'a> IntoIterator for &'a Values {
    type Item = &'a Box<str>;
    type IntoIter = std::slice::Iter<'a, Box<str>>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for Values {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Values {}

impl PartialOrd for Values {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Values {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (**self).cmp(&**other)
    }
}

impl std::hash::Hash for Values {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl fmt::Debug for Values {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// One record set as Route53 has it (or as we want it): name (lowercase,
/// no trailing dot), type, TTL and values, or — for an ALIAS — the alias
/// target instead of TTL and values. `extra` also marks what we never
/// write (routing policies, unknown types): its presence only makes a
/// name taken.
///
/// The zone copy kept between listings holds two of these per Service (its
/// name and the ownership TXT), so they are laid out small (issue 28,
/// heap_budget.rs): boxed strings and slice rather than `String` and `Vec`
/// (no spare capacity, no capacity word), 64 bytes inline instead of 88,
/// and the one value nearly every record set has kept in place of a
/// slice of one ([`Values`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordSet {
    pub name: Box<str>,
    pub rtype: RecordType,
    /// 0 for an ALIAS (Route53 gives it none: the target's TTL applies).
    pub ttl: i64,
    /// Sorted, without duplicates; empty for an ALIAS.
    pub values: Values,
    /// What almost no record has: an ALIAS target, or what makes the record
    /// foreign. Boxed so that the field is one pointer wide: every record
    /// pays for the field.
    pub extra: Option<Box<Extra>>,
}

/// The rare part of a record set.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Extra {
    /// Never written, only in the way: Route53's own type name for
    /// `Other`, a routing policy we do not write (latency, geolocation,
    /// multivalue …), an alias of another type. Kept so that the record is
    /// shown faithfully.
    Foreign(Box<str>),
    /// A Route53 ALIAS (an `A`/`AAAA` set answered with the target's
    /// addresses): ours to write like any address record.
    Alias(Alias),
    /// One set of a weighted or failover routing policy (an ALIAS, if
    /// the target is one): ours to write; beside it at the name and type
    /// only other sets of the same policy, each its set identifier's.
    Routed(Routing, Option<Alias>),
}

/// The routing policy of a set: several sets at one name and type, told
/// apart by their set identifiers (one per cluster, for active/active).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Routing {
    pub set_id: Box<str>,
    pub policy: RoutingPolicy,
    /// A Route53 health check deciding whether the set is answered.
    pub health_check_id: Option<Box<str>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RoutingPolicy {
    /// Answered in proportion to its weight among the sets (0–255).
    Weighted(u8),
    /// The primary answered while healthy, else the secondary.
    Failover(FailoverRole),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailoverRole {
    Primary,
    Secondary,
}

impl FailoverRole {
    /// Route53's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            FailoverRole::Primary => "PRIMARY",
            FailoverRole::Secondary => "SECONDARY",
        }
    }
}

impl RoutingPolicy {
    /// Whether sets of `self` and `other` may stand at one name and type
    /// (Route53: one policy per name and type, one primary and one
    /// secondary at most).
    pub fn coexists_with(self, other: RoutingPolicy) -> bool {
        match (self, other) {
            (RoutingPolicy::Weighted(_), RoutingPolicy::Weighted(_)) => true,
            (RoutingPolicy::Failover(a), RoutingPolicy::Failover(b)) => a != b,
            _ => false,
        }
    }
}

impl fmt::Display for Routing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.policy {
            RoutingPolicy::Weighted(w) => write!(f, "set {} (weight {w})", self.set_id),
            RoutingPolicy::Failover(r) => write!(f, "set {} (failover {})", self.set_id, r.as_str().to_lowercase()),
        }
    }
}

/// An ALIAS record's target.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Alias {
    /// The target's hosted zone (a load balancer's canonical zone).
    pub zone_id: Box<str>,
    /// Normalized (lowercase, no trailing dot).
    pub dns_name: Box<str>,
    pub evaluate_target_health: bool,
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ALIAS {} (zone {})", self.dns_name, self.zone_id)
    }
}

impl RecordSet {
    pub fn new(name: impl Into<Box<str>>, rtype: RecordType, ttl: i64, mut values: Vec<String>) -> Self {
        values.sort();
        values.dedup();
        let values = values.into_iter().map(String::into_boxed_str).collect::<Vec<_>>().into();
        Self { name: name.into(), rtype, ttl, values, extra: None }
    }

    /// An ALIAS record set at `name`.
    pub fn alias(name: impl Into<Box<str>>, rtype: RecordType, target: Alias) -> Self {
        Self {
            name: name.into(),
            rtype,
            ttl: 0,
            values: Values::default(),
            extra: Some(Box::new(Extra::Alias(target))),
        }
    }

    /// The record as a set of `routing` (an ALIAS stays one; a foreign
    /// record stays foreign).
    pub fn with_routing(mut self, routing: Routing) -> Self {
        self.extra = match self.extra.take().map(|e| *e) {
            Some(Extra::Foreign(what)) => Some(Extra::Foreign(what)),
            Some(Extra::Alias(a)) | Some(Extra::Routed(_, Some(a))) => Some(Extra::Routed(routing, Some(a))),
            None | Some(Extra::Routed(_, None)) => Some(Extra::Routed(routing, None)),
        }
        .map(Box::new);
        self
    }

    /// The routing policy of the set, if it is one of ours.
    pub fn routing(&self) -> Option<&Routing> {
        match self.extra.as_deref() {
            Some(Extra::Routed(r, _)) => Some(r),
            _ => None,
        }
    }

    /// The set identifier of one of our routing sets.
    pub fn set_id(&self) -> Option<&str> {
        self.routing().map(|r| &*r.set_id)
    }

    /// Marks the record foreign: `what` makes it so.
    pub fn into_foreign(mut self, what: impl Into<Box<str>>) -> Self {
        self.extra = Some(Box::new(Extra::Foreign(what.into())));
        self
    }

    /// What makes the record foreign, if it is.
    pub fn foreign(&self) -> Option<&str> {
        match self.extra.as_deref() {
            Some(Extra::Foreign(what)) => Some(what),
            _ => None,
        }
    }

    pub fn is_foreign(&self) -> bool {
        self.foreign().is_some()
    }

    /// The ALIAS target, if the record is one.
    pub fn alias_target(&self) -> Option<&Alias> {
        match self.extra.as_deref() {
            Some(Extra::Alias(a)) | Some(Extra::Routed(_, Some(a))) => Some(a),
            _ => None,
        }
    }

    /// Characters Route53 counts against its per-request value limit.
    pub fn value_chars(&self) -> usize {
        self.values.iter().map(|v| v.len()).sum()
    }

    /// The values as shown to people: the addresses, or the alias target,
    /// and the routing set.
    pub fn shown_values(&self) -> String {
        let shown = match self.alias_target() {
            Some(a) => a.to_string(),
            None => self.values.join(","),
        };
        match self.routing() {
            Some(r) => format!("{shown} in {r}"),
            None => shown,
        }
    }
}

/// `<type> <name>`, the identity of a record set in a zone.
pub type RecordKey = (Box<str>, RecordType);

/// The kind of a change sent to Route53.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// The name held no such record: `CREATE` (fails, rather than
    /// overwriting, if someone else created it meanwhile).
    Create,
    /// Replace a record we own.
    Upsert,
    /// Delete a record we own, with its current values.
    Delete,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "CREATE",
            Action::Upsert => "UPSERT",
            Action::Delete => "DELETE",
        }
    }

    /// Route53 counts an UPSERT twice against both request limits.
    pub fn weight(self) -> usize {
        match self {
            Action::Upsert => 2,
            Action::Create | Action::Delete => 1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub action: Action,
    pub record: RecordSet,
}

impl Change {
    /// ResourceRecord elements, as Route53 counts them (UPSERT twice).
    pub fn cost_records(&self) -> usize {
        self.record.values.len().max(1) * self.action.weight()
    }

    /// Value characters, as Route53 counts them (UPSERT twice).
    pub fn cost_chars(&self) -> usize {
        self.record.value_chars() * self.action.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_compare_and_hash_as_their_slice_however_kept() {
        use std::hash::{BuildHasher, RandomState};
        let one: Values = vec![Box::from("10.0.0.1")].into();
        let many = Values::Many(Box::new([Box::from("10.0.0.1")]));
        assert!(matches!(one, Values::One(_)), "one value is kept without a slice");
        assert_eq!(one, many);
        let h = RandomState::new();
        assert_eq!(h.hash_one(&one), h.hash_one(&many));
        let two: Values = vec![Box::from("10.0.0.1"), Box::from("10.0.0.2")].into();
        assert_eq!(&*two, &[Box::from("10.0.0.1"), Box::from("10.0.0.2")]);
        assert!(one < two, "ordered as the slices are");
        assert!(Values::from(Vec::new()).is_empty());
        assert_eq!(format!("{one:?}"), r#"["10.0.0.1"]"#);
    }
}
