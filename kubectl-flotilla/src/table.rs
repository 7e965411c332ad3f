//! Columns aligned as `kubectl get` aligns them.

use std::io::Write;

/// Writes `rows` under `header`, each column as wide as its widest cell
/// (the last one unpadded), separated by three spaces.
pub fn write(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: &mut dyn Iterator<Item = &str>| -> std::io::Result<()> {
        let cells: Vec<&str> = cells.collect();
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}   "));
            }
        }
        writeln!(out, "{}", s.trim_end())
    };
    line(out, &mut header.iter().copied())?;
    for row in rows {
        line(out, &mut row.iter().map(String::as_str))?;
    }
    Ok(())
}

/// [`write`], each line indented by two spaces (a table under a heading).
pub fn write_indented(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut buf = Vec::new();
    write(&mut buf, header, rows)?;
    for line in String::from_utf8_lossy(&buf).lines() {
        writeln!(out, "  {line}")?;
    }
    Ok(())
}

/// How long ago `t` was, as kubectl's AGE column says it (5s, 3m, 2h, 4d).
pub fn age(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    let Some(t) = t else { return "<unknown>".to_string() };
    let now = k8s_openapi::jiff::Timestamp::now();
    let secs = now.as_second().saturating_sub(t.0.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn columns_align_on_their_widest_cell() {
        let mut out = Vec::new();
        let rows = vec![
            vec!["LoadTest".into(), "a".into(), "x y".into()],
            vec!["PodAlert".into(), "bbbb".into(), String::new()],
        ];
        write(&mut out, &["KIND", "NAME", "MESSAGE"], &rows).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "KIND       NAME   MESSAGE\nLoadTest   a      x y\nPodAlert   bbbb\n"
        );
    }
}
