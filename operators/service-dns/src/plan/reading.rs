//! The plan's inputs read into the shapes it decides on: the zone's
//! records by name with the ownership TXTs apart, and the Services that
//! want each name.

use std::collections::BTreeMap;

use crate::desired::Claim;
use crate::hostname::owned_name_of_txt;
use crate::model::{RecordSet, RecordType};
use crate::registry::{self, Ownership};

/// A Service that wants a name, with the records it wants there.
pub(super) type Claimant<'c> = (&'c Claim, Vec<&'c RecordSet>);

/// The zone as the plan reads it.
pub(super) struct Zone<'r> {
    /// Records at each name (ownership TXTs aside).
    pub at: BTreeMap<&'r str, Vec<&'r RecordSet>>,
    /// The ownership TXT of each name (`_flotilla-owner.<name>`).
    pub txt_at: BTreeMap<&'r str, &'r RecordSet>,
}

impl<'r> Zone<'r> {
    pub fn read(current: impl IntoIterator<Item = &'r RecordSet>) -> Self {
        let mut zone = Zone { at: BTreeMap::new(), txt_at: BTreeMap::new() };
        for r in current {
            if let Some(owned) = owned_name_of_txt(&r.name).filter(|_| r.rtype == RecordType::Txt) {
                zone.txt_at.insert(owned, r);
            } else {
                zone.at.entry(&*r.name).or_default().push(r);
            }
        }
        zone
    }

    /// Who owns `name` by its TXT (any owner's), and that TXT.
    pub fn ownership(&self, name: &str) -> Option<(Ownership, &'r RecordSet)> {
        self.txt_at.get(name).and_then(|r| registry::ownership_of(r).map(|o| (o, *r)))
    }

    /// The records at `name` (ownership TXTs aside).
    pub fn records(&self, name: &str) -> Vec<&'r RecordSet> {
        self.at.get(name).cloned().unwrap_or_default()
    }
}

/// The claimants of each name.
pub(super) fn claimants_by_name(claims: &[Claim]) -> BTreeMap<&str, Vec<Claimant<'_>>> {
    let mut wanted: BTreeMap<&str, Vec<Claimant<'_>>> = BTreeMap::new();
    for c in claims {
        let mut by_name: BTreeMap<&str, Vec<&RecordSet>> = BTreeMap::new();
        for r in &c.records {
            by_name.entry(&*r.name).or_default().push(r);
        }
        for (name, records) in by_name {
            wanted.entry(name).or_default().push((c, records));
        }
    }
    wanted
}

/// One of our A/AAAA/CNAME records (not an alias or routing-policy set).
pub(super) fn is_ours_managed(r: &RecordSet) -> bool {
    r.rtype.is_managed() && !r.is_foreign()
}
