//! Aligned text tables: a header line, then one line per row, columns padded to their widest cell.

pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    // Cells hold the daemon's text: escaped before they are measured or printed.
    let rows: Vec<Vec<String>> =
        rows.iter().map(|r| r.iter().map(|c| crate::term::printable(c).into_owned()).collect()).collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
            text.extend(std::iter::repeat_n(' ', pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// `bytes` as a person reads it: 1.5 GiB.
pub fn size(bytes: i64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v.abs() >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let t = render(&["A", "LONGER"], &[vec!["xyz".into(), "1".into()], vec!["q".into(), "22".into()]]);
        assert_eq!(t, "A    LONGER\nxyz  1\nq    22\n");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(3 << 30), "3.0 GiB");
    }

    #[test]
    fn a_cell_cannot_add_a_row_or_reach_the_terminal() {
        let t = render(&["DISK", "SERIAL"], &[vec!["1".into(), "x\r\n2  forged\u{1b}[2J".into()]]);
        assert_eq!(t.lines().count(), 2, "{t:?}");
        assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
    }
}
