//! Typed ids. Parsed at the edges (API, CLI, queue), typed everywhere inside.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Error;

macro_rules! uuid_id {
    ($name:ident, $what:literal) => {
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
        )]
        #[serde(transparent)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub struct $name(pub Uuid);

        impl $name {
            /// A new, time-ordered id (UUIDv7), so that ids sort by creation.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self, Error> {
                Uuid::parse_str(s).map(Self).map_err(|_| Error::InvalidId {
                    what: $what,
                    value: s.chars().take(64).collect(),
                })
            }
        }

        impl From<Uuid> for $name {
            fn from(id: Uuid) -> Self {
                Self(id)
            }
        }
    };
}

uuid_id!(ThreadId, "thread");
uuid_id!(RunId, "run");

/// The model's id for one tool call (`c1`, `call_abc…`). Unique within a run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallId(pub String);

impl ToolCallId {
    /// The longest id accepted, in characters (providers' ids are a few
    /// dozen).
    pub const MAX_LEN: usize = 256;

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `id` can name a tool call: 1 to [`Self::MAX_LEN`] characters, and
    /// no control character or bidirectional formatting character (an id
    /// is shown on approval cards, in the operator CLI and in logs, where
    /// those could hide or reorder what a person reads).
    pub fn check(id: &str) -> Result<(), InvalidToolCallId> {
        if id.is_empty() {
            return Err(InvalidToolCallId::Empty);
        }
        let chars = id.chars().count();
        if chars > Self::MAX_LEN {
            return Err(InvalidToolCallId::TooLong(chars));
        }
        match id
            .chars()
            .find(|c| c.is_control() || is_bidi_control(*c) || is_tag(*c))
        {
            Some(c) => Err(InvalidToolCallId::Character(c)),
            None => Ok(()),
        }
    }
}

/// Why a text cannot be a tool call id (see [`ToolCallId::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidToolCallId {
    #[error("a tool call id must not be empty")]
    Empty,
    #[error("a tool call id is at most {max} characters, not {0}", max = ToolCallId::MAX_LEN)]
    TooLong(usize),
    #[error("a tool call id must not contain the character U+{:04X}", u32::from(*.0))]
    Character(char),
}

/// The characters that change the direction text is shown in (Unicode's
/// bidirectional formatting characters, and the implicit marks).
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// Characters that take no width and show nothing, which a person cannot
/// see in text (`pay\u{200b}pal`): zero-width space, non-joiner and joiner,
/// word joiner and the invisible operators, the byte-order mark, the
/// Mongolian vowel separator, soft hyphen, and the tag characters.
pub fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}' | '\u{180E}' | '\u{200B}'..='\u{200D}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}'
    ) || is_tag(c)
}

/// Unicode's tag characters (U+E0000–U+E007F): invisible, yet each spells
/// an ASCII character to whatever reads the text (a model does), so text
/// can hide words from the person shown it.
pub fn is_tag(c: char) -> bool {
    ('\u{E0000}'..='\u{E007F}').contains(&c)
}

impl fmt::Display for ToolCallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for ToolCallId {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// The owner of an API key, and so of the threads created with it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Owner(pub String);

impl Owner {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_their_text_form() {
        let id = RunId::new();
        assert_eq!(id.to_string().parse::<RunId>(), Ok(id));
        let err = "nope".parse::<ThreadId>().unwrap_err();
        assert_eq!(err.to_string(), "invalid thread id: \"nope\"");
    }

    #[test]
    fn a_tool_call_id_is_short_and_shows_as_it_reads() {
        for ok in [
            "c1",
            "call_abc123",
            "toolu_01A09q90qw90lq917835lq9",
            "intake",
            "ü-ç",
        ] {
            assert_eq!(ToolCallId::check(ok), Ok(()), "{ok}");
        }
        assert_eq!(ToolCallId::check(""), Err(InvalidToolCallId::Empty));
        let long = "x".repeat(ToolCallId::MAX_LEN + 1);
        assert_eq!(
            ToolCallId::check(&long),
            Err(InvalidToolCallId::TooLong(257))
        );
        assert!(ToolCallId::check(&long[1..]).is_ok());
        assert!(
            ToolCallId::check(&"ü".repeat(ToolCallId::MAX_LEN)).is_ok(),
            "characters, not bytes"
        );
        for bad in [
            "c\u{1b}[31m",
            "c\n1",
            "c\u{7f}",
            "a\u{202E}gnp.exe",
            "c\u{2066}1",
            "\u{9b}",
            // Tag characters spell "ok" to a model, nothing to a person.
            "c1\u{E006F}\u{E006B}",
            "\u{E0001}",
            "c\u{E007F}",
        ] {
            assert!(
                matches!(ToolCallId::check(bad), Err(InvalidToolCallId::Character(_))),
                "{bad:?}"
            );
        }
        let message = ToolCallId::check("a\u{202E}b").unwrap_err().to_string();
        assert!(message.contains("U+202E"), "{message}");
    }

    proptest::proptest! {
        /// Whatever the text, the check decides without panicking, and
        /// what it accepts is within the length and shows no control.
        #[test]
        fn the_tool_call_id_check_is_total(id in ".{0,300}") {
            if ToolCallId::check(&id).is_ok() {
                proptest::prop_assert!(!id.is_empty() && id.chars().count() <= ToolCallId::MAX_LEN);
                proptest::prop_assert!(!id.chars().any(|c| c.is_control() || is_bidi_control(c)));
            }
        }
    }

    #[test]
    fn new_ids_sort_by_creation() {
        let a = RunId::new();
        let b = RunId::new();
        assert!(a < b);
    }
}
