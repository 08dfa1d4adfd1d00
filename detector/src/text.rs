//! Text from outside — span fields, recordings from another machine, a service's replies —
//! as pinwatch writes it: one escaping rule and one bound, used by every writer of such text
//! (the log line, `print` and `summary`, the profile's strings, `ctl`'s output, the report
//! page's JSON).
//!
//! **Escaping.** A control character (C0, DEL, C1: `ESC` sequences that retitle or clear a
//! terminal, a newline that forges a log line) or a bidirectional control (U+061C, U+200E,
//! U+200F, U+202A–U+202E, U+2066–U+2069: they reorder what is shown) is written as Rust writes
//! it, `\u{1b}`, so that what is shown is what was recorded. Escaping is idempotent: escaped
//! text has nothing left to escape.
//!
//! **Bounds** are in bytes of UTF-8, counted after escaping, `…` included: a cut falls at the
//! end of a character or of an escape, never inside one.

use std::fmt::{self, Write};

/// Whether `c` is written escaped: a control character or a bidirectional control.
pub fn is_escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Shows `T` with every [`is_escaped`] character escaped: `format!("{}", Escaped(&s))`.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<T>(pub T);

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(Escaping(f), "{}", self.0)
    }
}

/// Writes what it is given to the inner writer, escaped.
struct Escaping<W>(W);

impl<W: Write> Write for Escaping<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for c in s.chars() {
            if is_escaped(c) {
                write!(self.0, "{}", c.escape_unicode())?;
            } else {
                self.0.write_char(c)?;
            }
        }
        Ok(())
    }
}

/// `path` as one word of a shell command, quoted where it needs to be (a space, a quote, `$`):
/// for advice to paste (`chmod 700 '/run/my svc'`). A path holding a character [`Escaped`]
/// would escape, or bytes that are not UTF-8, is written in `$'…'` with escapes
/// (`$'/tmp/a\nb'`, as `ls` quotes it), which bash, zsh and ksh read back as those bytes: the
/// word holds nothing a terminal acts on, and pastes as the path.
pub(crate) fn shell_word(path: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let bytes = path.as_os_str().as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(p) if !p.chars().any(is_escaped) => match shlex::try_quote(p) {
            Ok(q) => q.into_owned(),
            // Only a NUL is refused, and no path holds one.
            Err(_) => p.to_owned(),
        },
        _ => dollar_quoted(bytes),
    }
}

/// `bytes` as one `$'…'` word: `\n`, `\t`, `\r`, `\'`, `\\`, and `\xHH` for each byte of
/// an escaped character or of what is not UTF-8; the other characters as they are.
fn dollar_quoted(bytes: &[u8]) -> String {
    let mut out = String::from("$'");
    let hex = |out: &mut String, bytes: &[u8]| {
        for b in bytes {
            // Writing into a String cannot fail.
            let _ = write!(out, "\\x{b:02x}");
        }
    };
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\'' => out.push_str("\\'"),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if is_escaped(c) => hex(&mut out, c.encode_utf8(&mut [0; 4]).as_bytes()),
                c => out.push(c),
            }
        }
        hex(&mut out, chunk.invalid());
    }
    out.push('\'');
    out
}

/// `s` escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_escaped(&mut out, s);
    out
}

/// Appends `s` to `out`, escaped.
pub fn push_escaped(out: &mut String, s: &str) {
    // Writing into a String cannot fail.
    let _ = Escaping(&mut *out).write_str(s);
}

/// `s` escaped and cut to at most `max` bytes, `…` marking the cut (and counted in `max`):
/// the longest prefix of whole characters and whole escapes that leaves room for it.
pub fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max && !s.chars().any(is_escaped) {
        return s.to_owned();
    }
    cut(s, max, |out, c| {
        if is_escaped(c) {
            // Writing into a String cannot fail.
            let _ = write!(out, "{}", c.escape_unicode());
        } else {
            out.push(c);
        }
    })
}

/// `s` given back in quotes, as Rust writes a string literal (a quote or a backslash in it
/// escaped, so that where it ends is plain), and [escaped](escape); at most `max` bytes in all,
/// quotes included, `…` inside the closing quote marking a cut. For a value an error names.
pub fn quoted(s: &str, max: usize) -> String {
    let inside = cut(s, max.saturating_sub(2), |out, c| {
        if is_escaped(c) {
            let _ = write!(out, "{}", c.escape_unicode());
        } else {
            let _ = write!(out, "{}", c.escape_debug());
        }
    });
    format!("\"{inside}\"")
}

/// `s`, each character as `write` writes it, cut to at most `max` bytes with `…` marking the
/// cut (and counted in `max`): the longest prefix of whole pieces that leaves room for it.
fn cut(s: &str, max: usize, write: impl Fn(&mut String, char)) -> String {
    const MARK: char = '…';
    let room = max.saturating_sub(MARK.len_utf8());
    let mut out = String::with_capacity(s.len().min(max));
    // The end of the last piece written while it left room for the mark.
    let mut fits = 0;
    for c in s.chars() {
        if out.len() <= room {
            fits = out.len();
        }
        write(&mut out, c);
        if out.len() > max {
            out.truncate(fits);
            if MARK.len_utf8() <= max {
                out.push(MARK);
            }
            return out;
        }
    }
    out
}

/// Every string in `v` [escaped](escape), whatever field it is in (a field added later is
/// covered too): for JSON values whose strings are shown as text.
pub fn escape_json_strings(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::String(s) if s.chars().any(is_escaped) => *s = escape(s),
        serde_json::Value::Array(a) => a.iter_mut().for_each(escape_json_strings),
        serde_json::Value::Object(o) => o.values_mut().for_each(escape_json_strings),
        _ => {}
    }
}

/// JSON text with what JSON lets through raw and a terminal would act on — DEL, the C1
/// controls, the bidirectional controls — written as JSON `\uXXXX` escapes (in JSON text they
/// occur only inside strings, where the escape is valid): the same JSON, safe on a terminal.
pub fn json_safe(json: &str) -> String {
    json_escaping(json, |_| false)
}

/// [`json_safe`] JSON that may also be embedded in a `<script>` element: no `<` (which could
/// close the element with `</script>` or, with `<!--<script>`, put the HTML parser in its
/// double-escaped state where the page's own `</script>` no longer ends it), no `>` or `&`,
/// and no U+2028/U+2029 (line terminators to older JavaScript), each written as its JSON
/// `\uXXXX` escape, which is the same string to `JSON.parse`.
pub fn script_json(json: &str) -> String {
    json_escaping(json, |c| {
        matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}')
    })
}

fn json_escaping(json: &str, also: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        // Serialised JSON holds no raw C0 control (they are escaped in strings and invalid
        // elsewhere): what is left to escape is at or past DEL.
        if (is_escaped(c) && c >= '\u{7f}') || also(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                // Writing into a String cannot fail.
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `s` escaped for HTML element content and attribute values.
pub fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// The widest a text table's column is padded to, in characters. A longer cell is written
/// whole and sticks out of its column: every row padded to a crafted recording's name of a
/// megabyte would make a table of gigabytes from a file of a few.
pub const MAX_COLUMN: usize = 300;

/// The width of a text table's column whose widest cell is `widest` characters: at most
/// [`MAX_COLUMN`].
pub fn column_width(widest: usize) -> usize {
    widest.min(MAX_COLUMN)
}

/// Writes `cell` into `out` padded with spaces to `width` characters, on the left of it when
/// `right` (a number column), else after it. Unlike `{:<w$}`, any width: a cell of the
/// recording's text may be longer than a formatter's width (65,535) allows.
pub fn pad(out: &mut String, cell: &str, width: usize, right: bool) {
    let fill = width.saturating_sub(cell.chars().count());
    if right {
        out.extend(std::iter::repeat_n(' ', fill));
    }
    out.push_str(cell);
    if !right {
        out.extend(std::iter::repeat_n(' ', fill));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A quoted value ends where its quotes say, whatever it holds, and a cut one is said.
    #[test]
    fn a_quoted_value_ends_at_its_closing_quote() {
        assert_eq!(quoted("gzip", 20), "\"gzip\"");
        assert_eq!(quoted("gzip\"", 20), "\"gzip\\\"\"");
        assert_eq!(quoted("gzip\r", 20), "\"gzip\\u{d}\"");
        assert_eq!(quoted("a\\u{d}", 20), "\"a\\\\u{d}\"");
        assert_eq!(quoted("\u{202e}x", 20), "\"\\u{202e}x\"");
        assert_eq!(quoted("abcdef", 7), "\"ab…\"");
        assert_eq!(quoted("abcdef", 7).len(), 7);
        assert_eq!(quoted("abcdef", 8), "\"abcdef\"");
        // Bounded after escaping (helper-100): a hundred ESCs in 100 bytes.
        let escs = quoted(&"\u{1b}".repeat(100), 100);
        assert!(escs.len() <= 100 && escs.ends_with("…\""), "{escs}");
    }

    /// What a crafted recording or span field holds to take over a terminal or a log.
    const EVIL: &str = "a\u{1b}]0;owned\u{7}\u{1b}[2J\nWARN pinwatch: fake\u{202e}x\u{9b}\u{200f}";

    /// Each path's word, read by bash, is the path's bytes, and holds nothing escaped: a name
    /// with a newline, an escape sequence, a bidi override or bytes that are not UTF-8 pastes
    /// as itself (helper-89: it was quoted, then escaped to `\u{a}`, a different path).
    #[test]
    fn a_shell_word_pastes_as_its_path_whatever_it_holds() {
        use std::os::unix::ffi::OsStrExt as _;
        let paths: [&[u8]; 9] = [
            b"/run/plain-dir",
            b"/tmp/my svc's dir",
            b"/tmp/$HOME `id` \\ *",
            b"/tmp/a\nb",
            b"/tmp/tab\there\r",
            b"/tmp/esc\x1b[31mred\x07",
            "/tmp/\u{202e}cod.exe \u{9b} \u{e9}t\u{e9}".as_bytes(),
            b"/tmp/not utf-8 \xff\xfe\xc3",
            b"/tmp/it's\n'quoted'",
        ];
        for bytes in paths {
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(bytes));
            let word = shell_word(path);
            assert!(!word.chars().any(is_escaped), "{word:?}");
            let out = std::process::Command::new("bash")
                .args(["-c", &format!("printf %s {word}")])
                .output()
                .expect("bash runs");
            assert!(out.status.success(), "{word}: {out:?}");
            assert_eq!(out.stdout, bytes, "{word}");
        }
        assert_eq!(shell_word("/run/plain-dir".as_ref()), "/run/plain-dir");
        assert_eq!(shell_word("/tmp/a\nb".as_ref()), "$'/tmp/a\\nb'");
    }

    #[test]
    fn every_control_and_bidirectional_character_is_escaped_the_one_way() {
        let e = escape(EVIL);
        assert_eq!(
            e,
            r"a\u{1b}]0;owned\u{7}\u{1b}[2J\u{a}WARN pinwatch: fake\u{202e}x\u{9b}\u{200f}"
        );
        assert!(!e.chars().any(is_escaped), "{e}");
        for c in [
            '\u{0}', '\u{1f}', '\u{7f}', '\u{80}', '\u{9f}', '\u{61c}', '\u{200e}',
        ] {
            assert!(is_escaped(c), "{c:?}");
        }
        for c in ['a', ' ', 'é', '…', '\u{2028}', '世'] {
            assert!(!is_escaped(c), "{c:?}");
        }
        // The three ways of writing it agree.
        assert_eq!(Escaped(EVIL).to_string(), e);
        let mut pushed = String::from(">");
        push_escaped(&mut pushed, EVIL);
        assert_eq!(pushed, format!(">{e}"));
    }

    #[test]
    fn escaping_is_idempotent() {
        let once = escape(EVIL);
        assert_eq!(escape(&once), once);
        assert_eq!(bounded(&once, 1000), once);
    }

    #[test]
    fn bounds_are_bytes_after_escaping_with_the_mark_counted() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("abcd", 4), "abcd");
        assert_eq!(bounded("abcdefgh", 6), "abc…");
        // 'é' is two bytes: a cut inside it goes before it.
        assert_eq!(bounded("aéééé", 6), "aé…");
        for max in 0..40 {
            let b = bounded(EVIL, max);
            assert!(b.len() <= max, "{max}: {b:?} is {} bytes", b.len());
            assert!(!b.chars().any(is_escaped), "{b:?}");
            // Never inside an escape: what precedes the mark is a prefix of the whole escape.
            let kept = b.trim_end_matches('…');
            assert!(escape(EVIL).starts_with(kept), "{max}: {b:?}");
            assert!(
                !kept.ends_with('\\') && kept.matches("\\u{").count() == kept.matches('}').count(),
                "{max}: cut inside an escape: {b:?}"
            );
        }
        // An escape that fits exactly is kept whole.
        let exact = format!("{}\u{1b}", "x".repeat(10));
        assert_eq!(bounded(&exact, 16), r"xxxxxxxxxx\u{1b}");
        assert_eq!(bounded(&exact, 15), "xxxxxxxxxx…");
    }

    #[test]
    fn json_stays_json_and_safe() {
        let v = serde_json::json!({ "s": EVIL, "t": "</script><!--<script>&\u{2028}" });
        let json = serde_json::to_string(&v).unwrap();
        for safe in [json_safe(&json), script_json(&json)] {
            assert!(!safe.chars().any(is_escaped), "{safe}");
            let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
            assert_eq!(back, v);
        }
        let script = script_json(&json);
        assert!(!script.contains(['<', '>', '&', '\u{2028}']), "{script}");
        // Outside the Basic Multilingual Plane nothing needs escaping; were it escaped it
        // would be two `\u` units, which is still the same string.
        assert_eq!(json_safe("\"😀\""), "\"😀\"");
    }

    #[test]
    fn html_escapes_markup() {
        assert_eq!(
            html("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn a_cell_is_padded_to_any_width() {
        let mut out = String::new();
        pad(&mut out, "ab", 4, false);
        pad(&mut out, "7", 3, true);
        pad(&mut out, "éé", 1, false);
        assert_eq!(out, "ab    7éé");
        let long = "x".repeat(70_000);
        let mut out = String::new();
        pad(&mut out, "y", long.len() + 1, true);
        assert_eq!(out.len(), 70_001);
    }
}
