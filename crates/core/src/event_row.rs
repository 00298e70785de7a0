//! Which events of a commit share one `events` row (migration 0018).
//!
//! A row costs about 80 bytes before its data (header, id, thread, run,
//! time) and an entry in each of two indexes, while most packed events are
//! a few bytes of data: a parked approval's commit wrote three rows
//! (`MESSAGE`, `TOOL_CALL`, `INPUT_REQUIRED`). The events of a commit now
//! share rows: the row's `data` is the array of their data, its `layout`
//! two bytes per event (the type's [`EventType::code`], then its packed
//! bits), and the events take the ids `row id + 0, 1, …`, which is why a
//! row holds at most [`MAX_EVENTS_PER_ROW`] (the id sequence's increment).
//!
//! [`rows`] decides the split; [`layout`] writes a shared row's layout,
//! which the `event_items` view reads back (its tests read it as the view
//! does).

use std::ops::Range;

use crate::event::EventType;
use crate::stored_event::PACKED_MESSAGE;

/// How many events one row holds at most: row ids are this far apart (the
/// increment of `events_id_seq`, migration 0018).
pub const MAX_EVENTS_PER_ROW: usize = 16;

/// The rows `events` (a commit's, in order: type and packed bits) are
/// stored in, as ranges of `events`, in order. A row holds at most
/// [`MAX_EVENTS_PER_ROW`], at most one event that names a message (the row
/// has one `message_id`), and an event whose packed bits do not fit the
/// layout's byte is alone in its row (a row of one is stored whole, with
/// the bits in their own column).
pub fn rows(events: &[(EventType, i16)]) -> Vec<Range<usize>> {
    let mut rows: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    let mut names_message = false;
    for (i, (_, packed)) in events.iter().enumerate() {
        let this_names_message = packed & PACKED_MESSAGE != 0;
        let alone = u8::try_from(*packed).is_err();
        let full = i - start == MAX_EVENTS_PER_ROW;
        if i > start && (full || alone || (names_message && this_names_message)) {
            rows.push(start..i);
            start = i;
            names_message = false;
        }
        names_message |= this_names_message;
        if alone {
            rows.push(i..i + 1);
            start = i + 1;
            names_message = false;
        }
    }
    if start < events.len() {
        rows.push(start..events.len());
    }
    rows
}

/// The layout of a row shared by `events` (one of [`rows`]' ranges of more
/// than one event): per event its type's code, then its packed bits.
///
/// # Panics
/// If an event's packed bits do not fit a byte: [`rows`] gives such an
/// event a row of its own.
pub fn layout(events: &[(EventType, i16)]) -> Vec<u8> {
    events
        .iter()
        .flat_map(|(event_type, packed)| {
            let packed = u8::try_from(*packed).expect("rows() keeps wide packed bits alone");
            [event_type.code(), packed]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stored_event::{PACKED_CALL_FIELDS, PACKED_RUN_ID};
    use proptest::prelude::*;

    /// A shared row's layout read back: each event's type (`None` for a code
    /// this version does not know) and packed bits; `None` for a layout of odd
    /// length.
    fn parse_layout(layout: &[u8]) -> Option<Vec<(Option<EventType>, i16)>> {
        if !layout.len().is_multiple_of(2) {
            return None;
        }
        Some(
            layout
                .chunks_exact(2)
                .map(|pair| {
                    let event_type = EventType::ALL.iter().copied().find(|t| t.code() == pair[0]);
                    (event_type, i16::from(pair[1]))
                })
                .collect(),
        )
    }

    const MESSAGE: (EventType, i16) = (EventType::Message, PACKED_RUN_ID | PACKED_MESSAGE);
    const CALL: (EventType, i16) = (EventType::ToolCall, PACKED_RUN_ID | PACKED_CALL_FIELDS);

    #[test]
    fn a_parks_events_share_one_row() {
        let park = [MESSAGE, CALL, (EventType::InputRequired, 43)];
        assert_eq!(rows(&park), vec![0..3]);
        assert_eq!(layout(&park), vec![2, 5, 3, 9, 5, 43]);
    }

    #[test]
    fn a_second_message_starts_a_row() {
        assert_eq!(rows(&[MESSAGE, CALL, MESSAGE, CALL]), vec![0..2, 2..4]);
    }

    #[test]
    fn wide_bits_are_alone_and_rows_are_capped() {
        let wide = (EventType::ToolCall, 256);
        assert_eq!(rows(&[CALL, wide, CALL]), vec![0..1, 1..2, 2..3]);
        assert_eq!(rows(&[wide]), vec![0..1]);
        let many = vec![CALL; MAX_EVENTS_PER_ROW * 2 + 1];
        assert_eq!(
            rows(&many),
            vec![0..16, 16..32, 32..33],
            "a row holds at most {MAX_EVENTS_PER_ROW}"
        );
        assert!(rows(&[]).is_empty());
    }

    #[test]
    fn an_unknown_code_and_an_odd_layout_are_told_apart() {
        assert_eq!(
            parse_layout(&[1, 17, 200, 0]),
            Some(vec![(Some(EventType::RunStarted), 17), (None, 0)])
        );
        assert_eq!(parse_layout(&[1]), None);
    }

    fn event() -> impl Strategy<Value = (EventType, i16)> {
        (
            prop::sample::select(EventType::ALL.to_vec()),
            prop_oneof![0i16..64, Just(256), Just(i16::MIN)],
        )
    }

    proptest! {
        /// Every event is in exactly one row, in order; no row breaks a
        /// rule; and a shared row's layout reads back as its events.
        #[test]
        fn rows_cover_the_events_in_order_and_keep_the_rules(
            events in prop::collection::vec(event(), 0..40)
        ) {
            let split = rows(&events);
            let mut next = 0;
            for row in &split {
                prop_assert_eq!(row.start, next);
                prop_assert!(!row.is_empty() && row.len() <= MAX_EVENTS_PER_ROW);
                let part = &events[row.clone()];
                let messages = part.iter().filter(|(_, p)| p & PACKED_MESSAGE != 0).count();
                prop_assert!(messages <= 1);
                if part.len() > 1 {
                    let read = parse_layout(&layout(part)).unwrap();
                    let expected: Vec<_> = part.iter().map(|(t, p)| (Some(*t), *p)).collect();
                    prop_assert_eq!(read, expected);
                }
                next = row.end;
            }
            prop_assert_eq!(next, events.len());
        }

        /// Rows end only where a rule says so: two neighbours share a row
        /// unless it is full, one of them is alone, or both name a message.
        #[test]
        fn rows_are_as_few_as_the_rules_allow(
            events in prop::collection::vec(event(), 2..40)
        ) {
            let split = rows(&events);
            for pair in split.windows(2) {
                let (before, after) = (&events[pair[0].clone()], events[pair[1].start]);
                let wide = |e: (EventType, i16)| u8::try_from(e.1).is_err();
                let reason = before.len() == MAX_EVENTS_PER_ROW
                    || wide(*before.last().unwrap())
                    || wide(after)
                    || (before.iter().any(|(_, p)| p & PACKED_MESSAGE != 0)
                        && after.1 & PACKED_MESSAGE != 0);
                prop_assert!(reason, "rows {:?} split without a reason", pair);
            }
        }
    }
}
