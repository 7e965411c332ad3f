//! An object's UID as cached views keep it: 16 bytes for the RFC 4122 UUID
//! the API server writes, not a 36-character string on the heap (memory
//! per object held, issue 28: 48 bytes saved per pod), and 16 bytes in the
//! view (not 24: the two cases share them, 8 bytes less per object). Any other text is
//! kept as written, so a UID always reads back exactly.

use std::fmt;
use std::num::NonZeroU64;

/// A UID: equal texts, equal UIDs (ordered by bytes, UUIDs first, not as text).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid(Repr);

/// 16 bytes: a UUID's two halves (the first never zero, which leaves room
/// for the other variant's tag), or a thin pointer to any other text.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Repr {
    /// A lower-case, hyphenated UUID's bytes as two big-endian halves
    /// (ordered as the bytes are); one whose first 8 bytes are zero is kept
    /// as text.
    Uuid(NonZeroU64, u64),
    /// Anything else, as written (boxed twice: a thin pointer).
    Other(Box<Box<str>>),
}

impl Default for Uid {
    /// The empty UID (an object not yet created has none).
    fn default() -> Self {
        Self(Repr::Other(Box::default()))
    }
}

impl Uid {
    pub fn parse(s: &str) -> Self {
        let halves = uuid(s).and_then(|b| {
            let (hi, lo) = b.split_at(8);
            let hi = NonZeroU64::new(u64::from_be_bytes(hi.try_into().ok()?))?;
            Some(Repr::Uuid(hi, u64::from_be_bytes(lo.try_into().ok()?)))
        });
        Self(halves.unwrap_or_else(|| Repr::Other(Box::new(s.into()))))
    }
}

/// The bytes of `s` when it is a UUID as the API server writes one
/// (`8-4-4-4-12` lower-case hex digits): only then is it rebuilt exactly.
fn uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut out = [0u8; 16];
    let mut digits = b.iter().filter(|&&c| c != b'-');
    for byte in &mut out {
        let hi = hex(*digits.next()?)?;
        let lo = hex(*digits.next()?)?;
        *byte = hi << 4 | lo;
    }
    Some(out)
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Uuid(hi, lo) => {
                let b = [hi.get().to_be_bytes(), lo.to_be_bytes()];
                for (i, byte) in b.iter().flatten().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            Repr::Other(s) => f.write_str(s),
        }
    }
}

impl fmt::Debug for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.to_string())
    }
}

impl From<&str> for Uid {
    fn from(s: &str) -> Self {
        Self::parse(s)
    }
}

impl From<String> for Uid {
    fn from(s: String) -> Self {
        Self::parse(&s)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn an_api_server_uid_is_16_bytes_and_reads_back() {
        let s = "9b2c4e1a-0d3f-4a8b-b7e6-000000001234";
        let u = Uid::parse(s);
        assert!(matches!(u.0, Repr::Uuid(..)));
        assert_eq!(u.to_string(), s);
        assert_eq!(size_of::<Uid>(), 16);
        // First half zero: kept as text, read back the same.
        let nil = "00000000-0000-0000-0000-000000000001";
        assert!(matches!(Uid::parse(nil).0, Repr::Other(_)));
        assert_eq!(Uid::parse(nil).to_string(), nil);
        // Ordered as the bytes.
        assert!(
            Uid::parse("0a000000-0000-0000-0000-000000000000") < Uid::parse("0b000000-0000-0000-0000-000000000000")
        );
        assert!(
            Uid::parse("0a000000-0000-0000-0000-000000000001") < Uid::parse("0a000000-0000-0000-0000-000000000002")
        );
    }

    #[test]
    fn anything_else_is_kept_as_written() {
        for s in ["", "u1", "9B2C4E1A-0D3F-4A8B-B7E6-000000001234", "9b2c4e1a+0d3f-4a8b-b7e6-000000001234", "é"] {
            let u = Uid::parse(s);
            assert!(matches!(u.0, Repr::Other(_)), "{s}");
            assert_eq!(u.to_string(), s);
        }
    }

    proptest! {
        #[test]
        fn every_uid_reads_back_exactly(s in "[0-9a-fA-F-]{30,40}|\\PC{0,40}") {
            prop_assert_eq!(Uid::parse(&s).to_string(), s.clone());
            prop_assert_eq!(Uid::parse(&s), Uid::parse(&s.clone()));
        }

        #[test]
        fn equal_uids_are_equal_texts(a in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", b in "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}") {
            prop_assert_eq!(Uid::parse(&a) == Uid::parse(&b), a == b);
            prop_assert_eq!(Uid::parse(&a).to_string(), a);
        }
    }
}
