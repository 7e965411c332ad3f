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

/// One record set as Route53 has it (or as we want it): name (lowercase,
/// no trailing dot), type, TTL and values. `foreign` marks what we never
/// write (alias targets, routing policies, unknown types): its presence
/// only makes a name taken.
///
/// The zone copy kept between listings holds two of these per Service (its
/// name and the ownership TXT), so they are laid out small (issue 28,
/// heap_budget.rs): boxed strings and slice rather than `String` and `Vec`
/// (no spare capacity, no capacity word), 56 bytes inline instead of 88.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordSet {
    pub name: Box<str>,
    pub rtype: RecordType,
    pub ttl: i64,
    /// Sorted, without duplicates.
    pub values: Box<[Box<str>]>,
    /// Route53's own type name for `Other` (and the set identifier, alias
    /// flag) so that the record is shown faithfully; never written back.
    /// Boxed twice so that the field is one pointer wide: almost no record
    /// has one, and every record pays for the field.
    pub foreign: Option<Box<Box<str>>>,
}

impl RecordSet {
    pub fn new(name: impl Into<Box<str>>, rtype: RecordType, ttl: i64, mut values: Vec<String>) -> Self {
        values.sort();
        values.dedup();
        let values = values.into_iter().map(String::into_boxed_str).collect();
        Self { name: name.into(), rtype, ttl, values, foreign: None }
    }

    /// What makes the record foreign, if it is.
    pub fn foreign(&self) -> Option<&str> {
        self.foreign.as_deref().map(|f| &**f)
    }

    /// Characters Route53 counts against its per-request value limit.
    pub fn value_chars(&self) -> usize {
        self.values.iter().map(|v| v.len()).sum()
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
