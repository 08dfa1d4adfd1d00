//! Plain text tables, like the articles print.

/// Renders rows under headers, columns padded; numbers (cells starting with a digit) right-aligned.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            let numeric = c.chars().next().is_some_and(|ch| ch.is_ascii_digit());
            if numeric {
                s.push_str(&format!("{c:>w$}"));
            } else {
                s.push_str(&format!("{c:<w$}"));
            }
            if i + 1 < cells.len() {
                s.push_str(" | ");
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    out.push_str(&line(
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(|s| s.as_str())
            .collect(),
    ));
    for row in rows {
        out.push_str(&line(row.iter().map(|s| s.as_str()).collect()));
    }
    out
}

/// Milliseconds with no decimals, thousands separated: `5,022 ms`.
pub fn ms(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    let s = ms.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out + " ms"
}
