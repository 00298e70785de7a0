//! Text from the server shown on a terminal: what a model or a caller wrote
//! (a tool's name, its arguments, a question, an error) must not move the
//! cursor, clear the screen, retitle the window, reverse what follows or
//! hide in it. A control character, a bidirectional formatting character
//! or a zero-width one is shown as its escape (`\u{1b}`), so a person reads
//! what is there.

use agentenkit_core::ids::{is_bidi_control, is_invisible};

/// Whether `c` is shown as its escape.
fn hidden(c: char, lines: bool) -> bool {
    (c.is_control() && !(lines && c == '\n')) || is_bidi_control(c) || is_invisible(c)
}

/// `text` with every control, bidirectional formatting and zero-width
/// character escaped; line breaks too, unless `lines` (multi-line values we
/// lay out).
pub fn shown(text: &str, lines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if hidden(c, lines) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_and_bidi_controls_are_shown_not_obeyed() {
        assert_eq!(shown("send_email", false), "send_email");
        assert_eq!(shown("a\u{1b}[2Jb", false), "a\\u{1b}[2Jb");
        assert_eq!(shown("evil\u{202e}gnp.exe", false), "evil\\u{202e}gnp.exe");
        assert_eq!(shown("x\u{9b}31m", false), "x\\u{9b}31m");
        assert_eq!(shown("one\ntwo", false), "one\\u{a}two");
        assert_eq!(shown("one\ntwo", true), "one\ntwo");
        assert_eq!(shown("tab\there", true), "tab\\u{9}here");
        assert_eq!(shown("pay\u{200b}pal", false), "pay\\u{200b}pal");
        // Tag characters (U+E0000–U+E007F) hide text a model reads.
        assert_eq!(
            shown("ok\u{E0068}\u{E0069}", false),
            "ok\\u{e0068}\\u{e0069}"
        );
        assert_eq!(shown("\u{feff}a\u{2060}b", false), "\\u{feff}a\\u{2060}b");
    }

    proptest! {
        /// Whatever comes in, nothing a terminal obeys comes out.
        #[test]
        fn nothing_a_terminal_obeys_comes_out(text in ".{0,64}", lines: bool) {
            let out = shown(&text, lines);
            prop_assert!(!out.chars().any(|c| hidden(c, lines)));
        }
    }
}
