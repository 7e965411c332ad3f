//! A time a pod's status states, in 8 bytes: `Option<jiff::Timestamp>` is
//! 24, and a view holds five of them (memory per pod, issue 28). The API's
//! `metav1.Time` is whole seconds, so seconds lose nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Seconds since the Unix epoch, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stamp(i64);

impl Default for Stamp {
    fn default() -> Self {
        Self::NONE
    }
}

impl Stamp {
    pub const NONE: Stamp = Stamp(i64::MIN);

    /// `t` to the second (`metav1.Time` has no finer part).
    pub fn of(t: Option<&Time>) -> Self {
        Self::from(t.map(|t| t.0))
    }

    pub fn get(self) -> Option<Timestamp> {
        if self == Self::NONE { None } else { Timestamp::from_second(self.0).ok() }
    }

    pub fn is_none(self) -> bool {
        self == Self::NONE
    }
}

impl From<Option<Timestamp>> for Stamp {
    fn from(t: Option<Timestamp>) -> Self {
        t.map_or(Self::NONE, |t| Stamp(t.as_second()))
    }
}

impl From<Timestamp> for Stamp {
    fn from(t: Timestamp) -> Self {
        Stamp(t.as_second())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_8_bytes_and_reads_back_to_the_second() {
        assert_eq!(size_of::<Stamp>(), 8);
        let t: Timestamp = "2026-11-20T07:59:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Stamp::of(Some(&Time(t))).get(), Some(t));
        assert_eq!(Stamp::of(None).get(), None);
        assert!(Stamp::default().is_none());
        let early = Timestamp::MIN;
        assert_eq!(Stamp::from(early).get().map(|t| t.as_second()), Some(early.as_second()));
    }
}
