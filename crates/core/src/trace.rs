//! W3C trace context (`traceparent`, `tracestate`): what ties the spans of
//! one run together across the API, the broker, the workers and the reaper.
//!
//! Only the header values live here, checked for shape: a run keeps the
//! context it started under, and a queue message carries the context of
//! the span that published it. Spans themselves are made at the edges
//! (the runtime and the API), when a deployment exports traces.

use serde::{Deserialize, Serialize};

/// The longest `tracestate` kept: the W3C limit is 32 list members; 512
/// bytes is what the recommendation says a carrier must at least pass on.
pub const MAX_TRACESTATE_BYTES: usize = 512;

/// A span's context as the W3C headers carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, lower case.
    pub traceparent: String,
    /// Vendors' state, passed on unread; `None` when empty or unusable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// Why a `traceparent` was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceParentError {
    #[error("traceparent is not version-traceid-spanid-flags")]
    Shape,
    #[error("traceparent version ff is forbidden")]
    Version,
    #[error("traceparent {0} is not lower-case hex of its length")]
    Hex(&'static str),
    #[error("traceparent {0} is all zeros")]
    Zero(&'static str),
}

impl TraceContext {
    /// The context two headers give, when `traceparent` is well formed. A
    /// future version's value is kept by its first four fields, as the
    /// recommendation says; a `tracestate` over [`MAX_TRACESTATE_BYTES`]
    /// or with other than visible ASCII is dropped, the parent kept.
    pub fn from_headers(
        traceparent: &str,
        tracestate: Option<&str>,
    ) -> Result<Self, TraceParentError> {
        let traceparent = parse_traceparent(traceparent)?;
        let tracestate = tracestate
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE_BYTES)
            .filter(|s| s.bytes().all(|b| (0x20..0x7f).contains(&b)))
            .map(str::to_owned);
        Ok(Self {
            traceparent,
            tracestate,
        })
    }

    /// The trace id: 32 lower-case hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The parent span's id: 16 lower-case hex digits.
    pub fn span_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the parent was sampled (flag bit 0).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }
}

/// `value` as a version-00 `traceparent`, or why it is not one.
fn parse_traceparent(value: &str) -> Result<String, TraceParentError> {
    let value = value.trim();
    let mut fields = value.split('-');
    let (Some(version), Some(trace), Some(span), Some(flags)) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(TraceParentError::Shape);
    };
    let rest = fields.next();
    lower_hex(version, 2, "version")?;
    if version == "ff" {
        return Err(TraceParentError::Version);
    }
    // Version 00 has exactly four fields; a later version may add some.
    if version == "00" && rest.is_some() {
        return Err(TraceParentError::Shape);
    }
    lower_hex(trace, 32, "trace id")?;
    lower_hex(span, 16, "parent id")?;
    lower_hex(flags, 2, "flags")?;
    if trace.bytes().all(|b| b == b'0') {
        return Err(TraceParentError::Zero("trace id"));
    }
    if span.bytes().all(|b| b == b'0') {
        return Err(TraceParentError::Zero("parent id"));
    }
    // Kept as version 00: the only version this carrier writes.
    Ok(format!("00-{trace}-{span}-{flags}"))
}

fn lower_hex(field: &str, len: usize, what: &'static str) -> Result<(), TraceParentError> {
    let hex = field.len() == len
        && field
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if hex {
        Ok(())
    } else {
        Err(TraceParentError::Hex(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_well_formed_parent_is_kept_with_its_fields() {
        let context = TraceContext::from_headers(GOOD, Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(context.traceparent, GOOD);
        assert_eq!(context.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(context.span_id(), "00f067aa0ba902b7");
        assert!(context.sampled());
        assert_eq!(context.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        let unsampled = GOOD.replace("-01", "-00");
        assert!(!TraceContext::from_headers(&unsampled, None)
            .unwrap()
            .sampled());
    }

    #[test]
    fn malformed_parents_are_refused_with_the_field_at_fault() {
        let cases = [
            ("", TraceParentError::Shape),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
                TraceParentError::Shape,
            ),
            (&format!("{GOOD}-extra"), TraceParentError::Shape),
            (&GOOD.replacen("00", "ff", 1), TraceParentError::Version),
            (
                &GOOD.replace("4bf9", "4BF9"),
                TraceParentError::Hex("trace id"),
            ),
            (
                &GOOD.replace("00f067", "0xf067"),
                TraceParentError::Hex("parent id"),
            ),
            (&GOOD.replace("-01", "-1"), TraceParentError::Hex("flags")),
            (
                "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
                TraceParentError::Zero("trace id"),
            ),
            (
                "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                TraceParentError::Zero("parent id"),
            ),
        ];
        for (value, want) in cases {
            assert_eq!(
                TraceContext::from_headers(value, None),
                Err(want),
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_later_version_is_read_by_its_first_four_fields() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        let context = TraceContext::from_headers(later, None).unwrap();
        assert_eq!(context.traceparent, GOOD);
    }

    #[test]
    fn an_unusable_tracestate_is_dropped_and_the_parent_kept() {
        for state in ["", "  ", &"a".repeat(MAX_TRACESTATE_BYTES + 1), "k=v\u{7}"] {
            let context = TraceContext::from_headers(GOOD, Some(state)).unwrap();
            assert_eq!(context.tracestate, None, "{state:?}");
        }
    }

    proptest! {
        #[test]
        fn any_ids_round_trip(trace in 1u128.., span in 1u64.., flags: u8) {
            let value = format!("00-{trace:032x}-{span:016x}-{flags:02x}");
            let context = TraceContext::from_headers(&value, None).unwrap();
            prop_assert_eq!(&context.traceparent, &value);
            prop_assert_eq!(context.trace_id(), format!("{trace:032x}"));
            prop_assert_eq!(context.span_id(), format!("{span:016x}"));
            prop_assert_eq!(context.sampled(), flags & 1 == 1);
        }

        #[test]
        fn no_input_panics_and_what_is_taken_is_version_00(value in ".{0,80}") {
            if let Ok(context) = TraceContext::from_headers(&value, None) {
                prop_assert_eq!(context.traceparent.len(), 55);
                prop_assert!(context.traceparent.starts_with("00-"));
            }
        }
    }
}
