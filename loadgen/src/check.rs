//! What an answer must show to count as a success (`--expect-status`,
//! `--expect-body-contains`), and the search for a substring in a body
//! that arrives in pieces. Pure.
//!
//! The search keeps no bytes between pieces: it is Knuth-Morris-Pratt's,
//! whose whole state is how much of the substring the bytes seen so far
//! end with, so a match split across two reads is found without holding
//! any of the body, and each byte is looked at once.

use crate::summary::ErrorKind;

/// Expected statuses a run may list (the CRD's bound).
pub const MAX_STATUSES: usize = 32;
/// The longest substring a body may be searched for, in bytes.
pub const MAX_NEEDLE: usize = 1024;

/// What an answer is checked for.
#[derive(Debug, Clone, Default)]
pub struct Checks {
    /// The statuses that pass; any other is an error of kind check. Empty:
    /// today's classes (4xx is http4xx, 5xx is http5xx, anything else
    /// passes), so a runner given no checks counts as it always did.
    pub statuses: Vec<u16>,
    /// A substring the body must contain; None: the body is not looked at.
    pub body_contains: Option<Needle>,
}

impl Checks {
    /// The error an answer's status alone makes, if any.
    pub fn status(&self, status: u16) -> Option<ErrorKind> {
        if self.statuses.is_empty() {
            return match status {
                500..=599 => Some(ErrorKind::Http5xx),
                400..=499 => Some(ErrorKind::Http4xx),
                _ => None,
            };
        }
        (!self.statuses.contains(&status)).then_some(ErrorKind::Check)
    }

    /// The error a whole answer makes, if any: its status first, then —
    /// when a substring is expected — whether its body held it (`found`,
    /// ignored without one).
    pub fn verdict(&self, status: u16, found: bool) -> Option<ErrorKind> {
        self.status(status).or_else(|| (self.body_contains.is_some() && !found).then_some(ErrorKind::Check))
    }
}

/// Why a substring cannot be searched for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NeedleError {
    #[error("empty")]
    Empty,
    #[error("{0} bytes, more than {MAX_NEEDLE}")]
    TooLong(usize),
}

/// A substring to search bodies for, with its KMP failure table (built
/// once per run, shared by every request's [`Search`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needle {
    bytes: Box<[u8]>,
    /// `fail[i]`: the length of the longest proper prefix of
    /// `bytes[..=i]` that is also its suffix.
    fail: Box<[usize]>,
}

impl Needle {
    pub fn new(bytes: &[u8]) -> Result<Self, NeedleError> {
        if bytes.is_empty() {
            return Err(NeedleError::Empty);
        }
        if bytes.len() > MAX_NEEDLE {
            return Err(NeedleError::TooLong(bytes.len()));
        }
        let mut fail = vec![0usize; bytes.len()];
        let mut k = 0;
        for i in 1..bytes.len() {
            while k > 0 && bytes[i] != bytes[k] {
                k = fail[k - 1];
            }
            if bytes[i] == bytes[k] {
                k += 1;
            }
            fail[i] = k;
        }
        Ok(Self { bytes: bytes.into(), fail: fail.into() })
    }

    /// A search through one body, from its start.
    pub fn search(&self) -> Search<'_> {
        Search { needle: self, matched: 0, found: false }
    }
}

/// One body's search, fed its bytes in the pieces they arrive in.
#[derive(Debug, Clone)]
pub struct Search<'a> {
    needle: &'a Needle,
    /// How many of the needle's first bytes the bytes fed so far end with.
    matched: usize,
    found: bool,
}

impl Search<'_> {
    /// Takes the body's next bytes.
    pub fn feed(&mut self, piece: &[u8]) {
        let (bytes, fail) = (&self.needle.bytes, &self.needle.fail);
        let mut i = 0;
        while !self.found && i < piece.len() {
            if self.matched == 0 {
                // Nothing pending: skip straight to the next possible start.
                match piece[i..].iter().position(|b| *b == bytes[0]) {
                    Some(p) => i += p,
                    None => return,
                }
            }
            let b = piece[i];
            while self.matched > 0 && bytes[self.matched] != b {
                self.matched = fail[self.matched - 1];
            }
            if bytes[self.matched] == b {
                self.matched += 1;
            }
            self.found = self.matched == bytes.len();
            i += 1;
        }
    }

    /// Whether the bytes fed so far contain the needle.
    pub fn found(&self) -> bool {
        self.found
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use proptest::prelude::*;

    use super::*;

    fn contains(body: &[u8], needle: &[u8]) -> bool {
        body.windows(needle.len()).any(|w| w == needle)
    }

    fn found_in(pieces: &[&[u8]], needle: &[u8]) -> bool {
        let needle = Needle::new(needle).unwrap();
        let mut s = needle.search();
        pieces.iter().for_each(|p| s.feed(p));
        s.found()
    }

    #[test]
    fn a_needle_split_across_pieces_is_found() {
        assert!(found_in(&[b"..\"sta", b"tus\":\"o", b"k\"}"], b"\"status\":\"ok\""));
        // One byte at a time, and a needle whose prefix repeats (the
        // failure table, not a restart, keeps "aab" after "aaa").
        assert!(found_in(&[b"a", b"a", b"a", b"b"], b"aab"));
        assert!(found_in(&[b"abab", b"abac"], b"ababac"));
        assert!(!found_in(&[b"abab", b"", b"abab"], b"ababac"));
        assert!(!found_in(&[], b"x"));
        assert!(found_in(&[b"x"], b"x"));
    }

    #[test]
    fn needles_are_one_to_1024_bytes() {
        assert_eq!(Needle::new(b""), Err(NeedleError::Empty));
        assert!(Needle::new(&[b'a'; MAX_NEEDLE]).is_ok());
        assert_eq!(Needle::new(&[b'a'; MAX_NEEDLE + 1]), Err(NeedleError::TooLong(MAX_NEEDLE + 1)));
    }

    #[test]
    fn without_expected_statuses_the_classes_count_as_before() {
        let none = Checks::default();
        assert_eq!(none.verdict(503, false), Some(ErrorKind::Http5xx));
        assert_eq!(none.verdict(404, false), Some(ErrorKind::Http4xx));
        for ok in [101, 200, 204, 301, 304] {
            assert_eq!(none.verdict(ok, false), None, "{ok}");
        }
    }

    #[test]
    fn expected_statuses_pass_and_any_other_is_a_check_error() {
        let c = Checks { statuses: vec![200, 404], body_contains: None };
        assert_eq!(c.verdict(200, false), None);
        assert_eq!(c.verdict(404, false), None, "an expected 404 passes");
        assert_eq!(c.verdict(204, false), Some(ErrorKind::Check), "a 2xx not listed fails");
        assert_eq!(c.verdict(500, false), Some(ErrorKind::Check));
    }

    #[test]
    fn a_body_without_the_substring_is_a_check_error_once_the_status_passed() {
        let body = Checks { statuses: vec![], body_contains: Some(Needle::new(b"ok").unwrap()) };
        assert_eq!(body.verdict(200, true), None);
        assert_eq!(body.verdict(200, false), Some(ErrorKind::Check));
        // A failed status keeps its own kind, whatever the body.
        assert_eq!(body.verdict(503, false), Some(ErrorKind::Http5xx));
        let both = Checks { statuses: vec![200], ..body };
        assert_eq!(both.verdict(500, true), Some(ErrorKind::Check));
        assert_eq!(both.verdict(200, false), Some(ErrorKind::Check));
        assert_eq!(both.verdict(200, true), None);
    }

    proptest! {
        /// However a body is cut into pieces, the search finds the needle
        /// exactly when the body contains it. A small alphabet, so that
        /// near-misses and overlapping prefixes are common.
        #[test]
        fn any_split_finds_the_needle_iff_the_body_contains_it(
            body in prop::collection::vec(prop::sample::select(b"ab".to_vec()), 0..200),
            needle in prop::collection::vec(prop::sample::select(b"ab".to_vec()), 1..8),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
            points.extend([0, body.len()]);
            points.sort_unstable();
            let pieces: Vec<&[u8]> = points.windows(2).map(|w| &body[w[0]..w[1]]).collect();
            prop_assert_eq!(found_in(&pieces, &needle), contains(&body, &needle));
        }

        /// Any bytes, any needle planted anywhere: found, however cut.
        #[test]
        fn a_planted_needle_is_always_found(
            before in prop::collection::vec(any::<u8>(), 0..300),
            needle in prop::collection::vec(any::<u8>(), 1..40),
            after in prop::collection::vec(any::<u8>(), 0..300),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let body = [before, needle.clone(), after].concat();
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
            points.extend([0, body.len()]);
            points.sort_unstable();
            let pieces: Vec<&[u8]> = points.windows(2).map(|w| &body[w[0]..w[1]]).collect();
            prop_assert!(found_in(&pieces, &needle));
        }
    }
}
