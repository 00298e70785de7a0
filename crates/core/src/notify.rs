//! Signed notifications: the signature a receiver checks, the retry
//! schedule of a delivery, which events a deployment is told of, and
//! durations as an agent file writes them (`remind_after = "30m"`).
//!
//! The signature follows the convention of Stripe's and Standard
//! Webhooks': `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. The
//! timestamp is signed with the body, so a receiver that refuses old
//! timestamps refuses a replayed delivery too.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

use crate::EventType;

/// The header that carries the signature.
pub const SIGNATURE_HEADER: &str = "X-Agentenkit-Signature";
/// How old a signed timestamp a receiver should accept, by default.
pub const DEFAULT_TOLERANCE_SECS: i64 = 300;

type HmacSha256 = Hmac<Sha256>;

/// The signature header's value for `body`, sent at `timestamp` (unix
/// seconds).
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    format!("t={timestamp},v1={}", hex(&mac(secret, timestamp, body)))
}

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SignatureError {
    #[error("the signature header is not `t=<unix seconds>,v1=<hex>`")]
    Malformed,
    #[error(
        "the signature is {age_secs} s from now, outside the {tolerance_secs} s window (a replay?)"
    )]
    OutsideWindow { age_secs: i64, tolerance_secs: i64 },
    #[error("no v1 signature matches the body")]
    Mismatch,
}

/// Checks a signature header against `body`, as a receiver does: the
/// timestamp must be within `tolerance_secs` of `now` (unix seconds) and
/// one `v1` signature (a sender rotating its secret may send several) must
/// be the body's. Compared in constant time.
pub fn verify(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now: i64,
    tolerance_secs: i64,
) -> Result<(), SignatureError> {
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => {
                timestamp = Some(t.parse::<i64>().map_err(|_| SignatureError::Malformed)?)
            }
            Some(("v1", v)) => signatures.push(unhex(v).ok_or(SignatureError::Malformed)?),
            // Other schemes (a future v2) are for other receivers.
            Some(_) => {}
            None => return Err(SignatureError::Malformed),
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    let age_secs = now.saturating_sub(timestamp);
    if age_secs.saturating_abs() > tolerance_secs {
        return Err(SignatureError::OutsideWindow {
            age_secs,
            tolerance_secs,
        });
    }
    let matches = signatures.iter().any(|signature| {
        let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC accepts any key length");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.verify_slice(signature).is_ok()
    });
    if matches {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// How long a delivery waits after its `attempt`-th failure (1-based):
/// `first` doubled each time, at most ten minutes.
pub fn retry_delay(first: Duration, attempt: u32) -> Duration {
    const LONGEST: Duration = Duration::from_secs(600);
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    first.saturating_mul(factor).min(LONGEST)
}

/// The events a deployment sends to its notification targets: a set of
/// [`EventType`]s, one bit each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct NotifiedEvents(u32);

impl NotifiedEvents {
    pub const NONE: NotifiedEvents = NotifiedEvents(0);

    fn bit(event: EventType) -> u32 {
        let index = EventType::ALL
            .iter()
            .position(|e| *e == event)
            .expect("every event type is in ALL");
        1 << index
    }

    pub fn with(self, event: EventType) -> Self {
        NotifiedEvents(self.0 | Self::bit(event))
    }

    /// The events of either set.
    pub fn union(self, other: NotifiedEvents) -> Self {
        NotifiedEvents(self.0 | other.0)
    }

    pub fn contains(self, event: EventType) -> bool {
        self.0 & Self::bit(event) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The event types of the set, in [`EventType::ALL`]'s order.
    pub fn iter(self) -> impl Iterator<Item = EventType> {
        EventType::ALL
            .iter()
            .copied()
            .filter(move |event| self.contains(*event))
    }
}

impl FromIterator<EventType> for NotifiedEvents {
    fn from_iter<I: IntoIterator<Item = EventType>>(events: I) -> Self {
        events.into_iter().fold(Self::NONE, Self::with)
    }
}

/// The events a target is told of when its entry names none: a request
/// opened or closed, a run ended.
pub const DEFAULT_EVENTS: &[EventType] = &[
    EventType::InputRequired,
    EventType::InputResolved,
    EventType::RunCompleted,
    EventType::RunFailed,
];

/// Whether an event of this type can be sent to a target at all. A
/// `MESSAGE` or a step of a run is the stream's business, not a person's.
pub fn notifiable(event: EventType) -> bool {
    matches!(
        event,
        EventType::InputRequired
            | EventType::InputResolved
            | EventType::RunCompleted
            | EventType::RunFailed
            | EventType::RunCancelled
            | EventType::ApprovalRecorded
    )
}

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{value:?} is not a duration: write a number and a unit, as \"90s\", \"30m\", \"2h\", \"1d\" or \"1h30m\"")]
pub struct DurationError {
    pub value: String,
}

/// A duration as an agent file writes it: numbers each followed by a unit
/// (`ms`, `s`, `m`, `h`, `d`), as `"30m"` or `"1h30m"`. Zero is refused:
/// a reminder due at once is no reminder.
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let refused = || DurationError {
        value: text.to_owned(),
    };
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(refused());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(refused)?;
        if digits == 0 {
            return Err(refused());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| refused())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let millis_per = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(refused()),
        };
        rest = &rest[unit_len..];
        let millis = number.checked_mul(millis_per).ok_or_else(refused)?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or_else(refused)?;
    }
    if total.is_zero() {
        return Err(refused());
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_lists_its_events_in_order() {
        let set: NotifiedEvents = [EventType::RunFailed, EventType::InputRequired]
            .into_iter()
            .collect();
        let listed: Vec<EventType> = set.iter().collect();
        let mut expected = vec![EventType::InputRequired, EventType::RunFailed];
        expected.sort_by_key(|e| EventType::ALL.iter().position(|a| a == e));
        assert_eq!(listed, expected);
        assert_eq!(NotifiedEvents::NONE.iter().count(), 0);
    }
    use proptest::prelude::*;

    const SECRET: &[u8] = b"whsec_test";

    #[test]
    fn a_known_signature() {
        // Computed apart: python3 -c "import hmac, hashlib;
        // print(hmac.new(b'whsec_test', b'1700000000.{}', hashlib.sha256).hexdigest())"
        assert_eq!(
            sign(SECRET, 1_700_000_000, b"{}"),
            "t=1700000000,v1=35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91"
        );
    }

    #[test]
    fn refusals_name_what_was_wrong() {
        let header = sign(SECRET, 1000, b"body");
        assert_eq!(verify(SECRET, &header, b"body", 1000, 300), Ok(()));
        assert_eq!(
            verify(SECRET, &header, b"bodx", 1000, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(b"other", &header, b"body", 1000, 300),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(SECRET, &header, b"body", 1301, 300),
            Err(SignatureError::OutsideWindow {
                age_secs: 301,
                tolerance_secs: 300
            })
        );
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,v1=0g", "garbage"] {
            assert_eq!(
                verify(SECRET, bad, b"body", 1, 300),
                Err(SignatureError::Malformed),
                "{bad}"
            );
        }
        // A rotated secret: one of two signatures matches.
        let old = sign(b"old", 1000, b"body");
        let both = format!("{header},{}", old.split_once(',').unwrap().1);
        assert_eq!(verify(b"old", &both, b"body", 1000, 300), Ok(()));
    }

    #[test]
    fn retries_back_off_to_a_ceiling() {
        let first = Duration::from_millis(500);
        assert_eq!(retry_delay(first, 1), first);
        assert_eq!(retry_delay(first, 2), Duration::from_secs(1));
        assert_eq!(retry_delay(first, 4), Duration::from_secs(4));
        assert_eq!(retry_delay(first, 40), Duration::from_secs(600));
        assert_eq!(retry_delay(first, u32::MAX), Duration::from_secs(600));
    }

    #[test]
    fn durations_as_agent_files_write_them() {
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        for bad in [
            "",
            "30",
            "m",
            "0s",
            "-5m",
            "5 m",
            "5min",
            "1.5h",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn notified_events_are_a_set() {
        let set: NotifiedEvents = DEFAULT_EVENTS.iter().copied().collect();
        for event in EventType::ALL {
            assert_eq!(set.contains(*event), DEFAULT_EVENTS.contains(event));
        }
        assert!(NotifiedEvents::NONE.is_empty());
        let more = NotifiedEvents::NONE.with(EventType::RunCancelled);
        assert!(set.union(more).contains(EventType::RunCancelled));
        assert!(set.union(more).contains(EventType::InputRequired));
        assert!(!notifiable(EventType::Message));
    }

    proptest! {
        /// What is signed verifies; any change to the body, the timestamp or
        /// the secret does not.
        #[test]
        fn signatures_verify_and_tampering_is_caught(
            body in proptest::collection::vec(any::<u8>(), 0..200),
            secret in proptest::collection::vec(any::<u8>(), 1..40),
            t in 0i64..4_000_000_000,
            flip in any::<prop::sample::Index>(),
        ) {
            let header = sign(&secret, t, &body);
            prop_assert_eq!(verify(&secret, &header, &body, t, 300), Ok(()));
            if !body.is_empty() {
                let mut tampered = body.clone();
                let i = flip.index(tampered.len());
                tampered[i] ^= 1;
                prop_assert_eq!(verify(&secret, &header, &tampered, t, 300), Err(SignatureError::Mismatch));
            }
            let moved = header.replacen(&format!("t={t}"), &format!("t={}", t + 1), 1);
            prop_assert_eq!(verify(&secret, &moved, &body, t, 300), Err(SignatureError::Mismatch));
        }

        /// Any header text is checked without a panic.
        #[test]
        fn any_header_is_checked_without_panic(header in ".{0,80}", body in ".{0,20}") {
            let _ = verify(SECRET, &header, body.as_bytes(), 0, 300);
        }

        /// Durations written as `<n><unit>` read back exactly; any text is
        /// read or refused without a panic.
        #[test]
        fn durations_read_back(n in 1u64..100_000, unit in prop_oneof![Just(("ms", 1u64)), Just(("s", 1000)), Just(("m", 60_000)), Just(("h", 3_600_000))], text in ".{0,12}") {
            prop_assert_eq!(parse_duration(&format!("{n}{}", unit.0)), Ok(Duration::from_millis(n * unit.1)));
            let _ = parse_duration(&text);
        }
    }
}
