//! A container's runtime ID (`containerd://<64 hex digits>`), as a pod view
//! holds it: 40 bytes in place instead of a 77-byte string on the heap
//! (one per container that ended, in every pod view: memory per pod, issue
//! 28). Any other shape is kept as written, so the ID reads back exactly
//! (incidents remember notified incarnations by it, in their status).

use std::fmt;

/// The runtimes whose IDs are stored as bytes.
const RUNTIMES: [&str; 3] = ["containerd", "cri-o", "docker"];

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ContainerId {
    /// No ID (a container that never ran).
    #[default]
    None,
    /// `<RUNTIMES[runtime]>://<id as 64 lowercase hex digits>`.
    Hex { runtime: u8, id: [u8; 32] },
    /// Any other ID, as written.
    Other(Box<str>),
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

impl ContainerId {
    pub fn parse(s: &str) -> Self {
        if s.is_empty() {
            return ContainerId::None;
        }
        Self::hex(s).unwrap_or_else(|| ContainerId::Other(s.into()))
    }

    fn hex(s: &str) -> Option<Self> {
        let (runtime, digits) = s.split_once("://")?;
        let runtime = u8::try_from(RUNTIMES.iter().position(|r| *r == runtime)?).ok()?;
        let digits = digits.as_bytes();
        if digits.len() != 64 {
            return None;
        }
        let mut id = [0u8; 32];
        for (byte, pair) in id.iter_mut().zip(digits.chunks_exact(2)) {
            *byte = hex_digit(pair[0])? << 4 | hex_digit(pair[1])?;
        }
        Some(ContainerId::Hex { runtime, id })
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, ContainerId::None)
    }
}

impl From<&str> for ContainerId {
    fn from(s: &str) -> Self {
        Self::parse(s)
    }
}

impl From<String> for ContainerId {
    fn from(s: String) -> Self {
        Self::parse(&s)
    }
}

impl fmt::Display for ContainerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContainerId::None => Ok(()),
            ContainerId::Hex { runtime, id } => {
                f.write_str(RUNTIMES.get(usize::from(*runtime)).copied().unwrap_or_default())?;
                f.write_str("://")?;
                id.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
            ContainerId::Other(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn runtime_ids_are_held_as_bytes_and_read_back() {
        let s = format!("containerd://{}", "0123456789abcdef".repeat(4));
        let id = ContainerId::parse(&s);
        assert!(matches!(id, ContainerId::Hex { runtime: 0, .. }), "{id:?}");
        assert_eq!(id.to_string(), s);
        assert!(size_of::<ContainerId>() <= 40);
    }

    #[test]
    fn other_shapes_are_kept_as_written() {
        for s in [
            "containerd://abc",
            "containerd://0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
            "rkt://x",
            "plain",
        ] {
            let id = ContainerId::parse(s);
            assert!(matches!(id, ContainerId::Other(_)), "{s}: {id:?}");
            assert_eq!(id.to_string(), s);
        }
        assert!(ContainerId::parse("").is_empty());
        assert_eq!(ContainerId::parse("").to_string(), "");
    }

    proptest! {
        /// Whatever a runtime (or an attacker's status patch) writes reads back unchanged.
        #[test]
        fn every_id_reads_back(s in "(containerd|cri-o|docker|x)?(://)?[0-9a-fA-F]{0,70}") {
            prop_assert_eq!(ContainerId::parse(&s).to_string(), s);
        }
    }
}
