//! Values a run reads from files (mounted Secrets and ConfigMaps),
//! bounded, with errors that name the file and never its content.

/// A header value read from a file, at most this long.
pub const MAX_HEADER_VALUE: usize = 16 * 1024;
/// The largest body read from a file: a Secret holds at most 1 MiB.
pub const MAX_BODY_FILE: u64 = 1024 * 1024;
/// A CA bundle read at most this long (a ConfigMap's limit).
pub const MAX_CA_BYTES: u64 = 1024 * 1024;

/// A header value read from `path`: at most 16 KiB, one trailing newline
/// dropped, a valid header value. The error says why, never what it read.
pub fn header_value(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_HEADER_VALUE as u64 + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if bytes.len() > MAX_HEADER_VALUE {
        return Err(format!("{} is longer than 16 KiB", path.display()));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8", path.display()))?;
    let value = text.strip_suffix('\n').map(|v| v.strip_suffix('\r').unwrap_or(v)).unwrap_or(&text);
    if reqwest::header::HeaderValue::from_str(value).is_err() {
        return Err(format!("{} holds no valid header value (a control character or newline)", path.display()));
    }
    Ok(value.to_string())
}

/// The body in `path`, exactly; errors name the file, never its content.
pub fn body(path: &std::path::Path) -> Result<Vec<u8>, String> {
    capped(path, MAX_BODY_FILE)
}

/// The file's bytes, at most `max` (1 MiB); errors name the file, never
/// its content.
pub fn capped(path: &std::path::Path, max: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(max + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    if bytes.len() as u64 > max {
        return Err(format!("{} is longer than {} MiB", path.display(), max / (1024 * 1024)));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A body file is read as its bytes exactly (no newline dropped, not
    /// necessarily text), at most 1 MiB; errors name the file, never what
    /// it holds.
    #[test]
    fn a_body_file_is_sent_exactly_and_bounded() {
        let dir = std::env::temp_dir().join(format!("loadgen-body-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exact = dir.join("exact");
        std::fs::write(&exact, b"{\"token\":\"s3cret\"}\n\xff").unwrap();
        assert_eq!(body(&exact).unwrap(), b"{\"token\":\"s3cret\"}\n\xff");
        let big = dir.join("big");
        std::fs::write(&big, vec![b's'; 1024 * 1024 + 1]).unwrap();
        let err = body(&big).unwrap_err();
        assert!(err.contains("big") && err.contains("1 MiB") && !err.contains("sss"), "{err}");
        let err = body(&dir.join("missing")).unwrap_err();
        assert!(err.contains("missing"), "{err}");
        std::fs::write(dir.join("max"), vec![b'a'; 1024 * 1024]).unwrap();
        assert_eq!(body(&dir.join("max")).unwrap().len(), 1024 * 1024);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
