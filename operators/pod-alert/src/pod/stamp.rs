//! A time a pod's status states, in 4 bytes: `Option<jiff::Timestamp>` is
//! 24, and a view holds five of them (memory per pod, issue 28). The API's
//! `metav1.Time` is whole seconds, so seconds lose nothing; an unsigned
//! 32-bit count of them reaches 2106. A time outside 1970-01-01T00:00:01Z …
//! 2106-02-07T06:28:15Z (only an annotation's author could write one: the
//! API server and the kubelet write the present) is held as the nearest
//! end: far past stays past, far future stays future.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Seconds since the Unix epoch (at least 1), or none (0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stamp(u32);

impl Default for Stamp {
    fn default() -> Self {
        Self::NONE
    }
}

impl Stamp {
    pub const NONE: Stamp = Stamp(0);

    /// `t` to the second (`metav1.Time` has no finer part).
    pub fn of(t: Option<&Time>) -> Self {
        Self::from(t.map(|t| t.0))
    }

    pub fn get(self) -> Option<Timestamp> {
        if self == Self::NONE { None } else { Timestamp::from_second(i64::from(self.0)).ok() }
    }

    pub fn is_none(self) -> bool {
        self == Self::NONE
    }
}

impl From<Option<Timestamp>> for Stamp {
    fn from(t: Option<Timestamp>) -> Self {
        t.map_or(Self::NONE, Self::from)
    }
}

impl From<Timestamp> for Stamp {
    fn from(t: Timestamp) -> Self {
        // Clamped (see the module): 0 is "none".
        Stamp(u32::try_from(t.as_second().max(1)).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_is_4_bytes_and_reads_back_to_the_second() {
        assert_eq!(size_of::<Stamp>(), 4);
        let t: Timestamp = "2026-11-20T07:59:00Z".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Stamp::of(Some(&Time(t))).get(), Some(t));
        assert_eq!(Stamp::of(None).get(), None);
        assert!(Stamp::default().is_none());
        // Outside u32 seconds: the nearest end, never "none".
        assert_eq!(Stamp::from(Timestamp::MIN).get().map(|t| t.as_second()), Some(1));
        assert_eq!(Stamp::from(Timestamp::UNIX_EPOCH).get().map(|t| t.as_second()), Some(1));
        assert_eq!(Stamp::from(Timestamp::MAX).get().map(|t| t.as_second()), Some(i64::from(u32::MAX)));
        let late: Timestamp = "2106-02-07T06:28:15Z".parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Stamp::from(late).get(), Some(late));
    }
}
