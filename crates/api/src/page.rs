//! Lists a page at a time: `?after=&limit=` in, a JSON array out, and while
//! more may follow a `Link: <…?after=…&limit=…>; rel="next"` header
//! (RFC 8288, as GitHub pages its lists). A page holds at most `limit`
//! items (1 to 1000, default 1000) and stops before 4 MiB of JSON.

use agentenkit_core::RunId;
use agentenkit_store::{InboxPosition, ReadBound, ReadPage};
use axum::http::header::LINK;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::DateTime;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use crate::ApiError;

/// The most items one page of a list holds (`limit`'s maximum and default).
pub const MAX_PAGE_ITEMS: i64 = 1000;
/// The most bytes of JSON one page of a list holds: a page stops before the
/// item that would pass it (it holds one item at least, whatever its size).
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// A page of a list: the items after `after`, at most `limit`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    /// Only items after this one (a message's id, a journal entry's
    /// position: the last one seen); default: from the first.
    #[param(value_type = Option<i64>, minimum = 0, nullable = false)]
    after: Option<String>,
    /// At most this many (1 to 1000, the default). A page also stops before
    /// 4 MiB of JSON; while more may follow, the answer's `Link` header
    /// (`rel="next"`) names the next page.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 1000, nullable = false)]
    limit: Option<String>,
}

impl PageQuery {
    /// `(after, limit)`, `after` as `what` names the items.
    pub(crate) fn parse(&self, what: &str) -> Result<(Option<i64>, i64), ApiError> {
        let after = self
            .after
            .as_deref()
            .map(|text| match text.trim().parse::<i64>() {
                Ok(n) if n >= 0 => Ok(n),
                _ => Err(ApiError::BadRequest(format!(
                    "after must be {what} (a whole number, 0 or more), not {:?}",
                    clipped(text)
                ))),
            })
            .transpose()?;
        Ok((after, parse_limit(self.limit.as_deref())?))
    }
}

/// A page of the inbox: after a cursor (opaque: what a `Link` header gave).
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CursorQuery {
    /// Only requests after this cursor, as the previous page's `Link`
    /// header gave it; default: from the oldest.
    #[param(
        nullable = false,
        pattern = r"^-?[0-9]{1,16}\.[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\.([0-9a-fA-F]{2}){1,1024}$"
    )]
    after: Option<String>,
    /// At most this many (1 to 1000, the default). A page also stops before
    /// 4 MiB of JSON; while more may follow, the answer's `Link` header
    /// (`rel="next"`) names the next page.
    #[param(value_type = Option<i64>, minimum = 1, maximum = 1000, nullable = false)]
    limit: Option<String>,
}

impl CursorQuery {
    pub(crate) fn parse(&self) -> Result<(Option<InboxPosition>, i64), ApiError> {
        let after = self.after.as_deref().map(parse_cursor).transpose()?;
        Ok((after, parse_limit(self.limit.as_deref())?))
    }
}

/// A page's `limit`: 1 to [`MAX_PAGE_ITEMS`], default the maximum.
pub fn parse_limit(text: Option<&str>) -> Result<i64, ApiError> {
    let Some(text) = text else {
        return Ok(MAX_PAGE_ITEMS);
    };
    match text.trim().parse::<i64>() {
        Ok(n) if (1..=MAX_PAGE_ITEMS).contains(&n) => Ok(n),
        _ => Err(ApiError::BadRequest(format!(
            "limit must be a whole number from 1 to {MAX_PAGE_ITEMS}, not {:?}",
            clipped(text)
        ))),
    }
}

/// One page of a list, answered as a JSON array and, while more may follow,
/// a `Link` header naming the next page.
pub struct Page<T> {
    items: Vec<T>,
    next: Option<String>,
}

/// What a page's read is bounded by: `limit` items and about
/// [`MAX_PAGE_BYTES`] (the store stops reading once it has that much).
pub fn bound(limit: i64) -> ReadBound {
    ReadBound::new(limit, MAX_PAGE_BYTES)
}

impl<T: Serialize> Page<T> {
    /// A page of `fetched`, which the store read within [`bound`]`(limit)`:
    /// cut to [`MAX_PAGE_BYTES`]; when the read stopped at its bound or the
    /// page was cut, the next page is at `path` after the last item kept,
    /// as `cursor` names it.
    pub fn of(
        fetched: ReadPage<T>,
        limit: i64,
        path: &str,
        cursor: impl Fn(&T) -> String,
    ) -> Page<T> {
        let count = fetched.items.len();
        let items = within_bytes(fetched.items, MAX_PAGE_BYTES);
        let next = (fetched.more || items.len() < count)
            .then(|| items.last().map(&cursor))
            .flatten()
            .map(|after| format!("<{path}?after={after}&limit={limit}>; rel=\"next\""));
        Page { items, next }
    }
}

impl<T: Serialize> IntoResponse for Page<T> {
    fn into_response(self) -> Response {
        let mut response = Json(self.items).into_response();
        if let Some(link) = self.next.and_then(|link| link.parse().ok()) {
            response.headers_mut().insert(LINK, link);
        }
        response
    }
}

/// `items` up to the first whose JSON would take the page past `max_bytes`
/// (the first item always stays): a client pages on from the last one.
pub fn within_bytes<T: Serialize>(items: Vec<T>, max_bytes: usize) -> Vec<T> {
    let mut total = 0usize;
    let mut kept = Vec::with_capacity(items.len());
    for item in items {
        total += serde_json::to_vec(&item).map_or(0, |bytes| bytes.len() + 1);
        if total > max_bytes && !kept.is_empty() {
            break;
        }
        kept.push(item);
    }
    kept
}

/// An inbox request's place in the inbox's order, as a cursor:
/// `<microseconds>.<run id>.<call id in hex>` (nothing in it needs
/// escaping in a URL). Clients pass it back as they got it.
pub fn cursor(position: &InboxPosition) -> String {
    let call: String = position
        .tool_call_id
        .bytes()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!(
        "{}.{}.{call}",
        position.created_at.timestamp_micros(),
        position.run_id
    )
}

/// Reads a cursor of [`cursor`]'s making, exactly as `CursorQuery`'s
/// pattern describes it. A call id that is no text (bytes that are not
/// UTF-8, a NUL) still names a place in the order, of a call that cannot
/// exist: it is read as text with U+FFFD in their stead.
fn parse_cursor(text: &str) -> Result<InboxPosition, ApiError> {
    let bad = || {
        ApiError::BadRequest(format!(
            "after must be a cursor from a Link header of GET /agent/inbox, not {:?}",
            clipped(text)
        ))
    };
    let mut parts = text.splitn(3, '.');
    let (Some(micros), Some(run), Some(call)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    let digits = micros.strip_prefix('-').unwrap_or(micros);
    if !(1..=16).contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let created_at = micros
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_micros)
        .ok_or_else(bad)?;
    // Only the hyphenated form (the one `cursor` writes), as the pattern says.
    let hyphens = [8, 13, 18, 23];
    let hyphenated = run.len() == 36
        && run.char_indices().all(|(i, c)| {
            if hyphens.contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    let run_id: RunId = run.parse().ok().filter(|_| hyphenated).ok_or_else(bad)?;
    if call.is_empty()
        || call.len() % 2 != 0
        || call.len() > 2 * 1024
        || !call.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Err(bad());
    }
    let bytes = (0..call.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&call[i..i + 2], 16).map_err(|_| bad()))
        .collect::<Result<Vec<u8>, ApiError>>()?;
    let tool_call_id = String::from_utf8_lossy(&bytes).replace('\0', "\u{FFFD}");
    Ok(InboxPosition {
        created_at,
        run_id,
        tool_call_id,
    })
}

/// What of a client's text an error message repeats.
fn clipped(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_page_stops_before_the_item_past_its_bytes_and_keeps_one_at_least() {
        let items: Vec<String> = (0..10).map(|i| format!("{i:0>98}")).collect();
        // each item is 100 bytes of JSON and a separator
        assert_eq!(within_bytes(items.clone(), 10_000).len(), 10);
        assert_eq!(within_bytes(items.clone(), 505).len(), 5);
        assert_eq!(within_bytes(items.clone(), 10).len(), 1, "one at least");
        assert!(within_bytes(Vec::<String>::new(), 10).is_empty());
    }

    #[test]
    fn a_limit_is_from_1_to_the_page_maximum() {
        assert_eq!(parse_limit(None).unwrap(), MAX_PAGE_ITEMS);
        assert_eq!(parse_limit(Some("7")).unwrap(), 7);
        for bad in ["0", "-1", "1001", "x", ""] {
            assert!(parse_limit(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_full_or_cut_page_links_the_next_and_a_short_one_does_not() {
        let link = |page: Page<i64>| page.next;
        let id = |n: &i64| n.to_string();
        let read = |items, more| ReadPage { items, more };
        assert_eq!(
            link(Page::of(read(vec![1, 2], true), 2, "/x", id)).as_deref(),
            Some("</x?after=2&limit=2>; rel=\"next\"")
        );
        assert_eq!(link(Page::of(read(vec![1], false), 2, "/x", id)), None);
        assert_eq!(link(Page::of(read(vec![], false), 2, "/x", id)), None);
        // The store stopped at its byte bound after one large item.
        assert_eq!(
            link(Page::of(read(vec![7], true), 1000, "/x", id)).as_deref(),
            Some("</x?after=7&limit=1000>; rel=\"next\"")
        );
        let big: Vec<String> = (0..3).map(|_| "x".repeat(3 << 20)).collect();
        let page = Page::of(
            ReadPage {
                items: big,
                more: false,
            },
            10,
            "/y",
            |_| "c".into(),
        );
        assert_eq!(page.items.len(), 1, "cut at 4 MiB");
        assert_eq!(
            page.next.as_deref(),
            Some("</y?after=c&limit=10>; rel=\"next\"")
        );
    }

    #[test]
    fn a_bad_cursor_is_refused() {
        let run = RunId::new();
        for bad in [
            "",
            "x",
            "1.2",
            "x.00000000-0000-0000-0000-000000000000.61",
            &format!("1.{run}.6"),
            &format!("1.{run}.zz"),
            &format!("1.{run}."),
            &format!("1.{run}.+1"),
            &format!("1.{}.61", run.0.simple()),
            &format!("1.{{{run}}}.61"),
            "1.not-a-run.61",
            &format!("12345678901234567.{run}.61"),
            &format!("+1.{run}.61"),
            &format!("1.{run}.{}", "61".repeat(1025)),
        ] {
            assert!(parse_cursor(bad).is_err(), "{bad:?}");
        }
        // Bytes that are no text still name a place in the order.
        let odd = parse_cursor(&format!("-1.{run}.ff00")).unwrap();
        assert_eq!(odd.tool_call_id, "\u{FFFD}\u{FFFD}");
    }

    proptest! {
        #[test]
        fn a_cursor_reads_back_as_the_position_it_names(
            micros in -9_999_999_999_999_999i64..=9_999_999_999_999_999,
            call in "\\PC{1,64}",
        ) {
            let position = InboxPosition {
                created_at: DateTime::from_timestamp_micros(micros).unwrap(),
                run_id: RunId::new(),
                tool_call_id: call,
            };
            let text = cursor(&position);
            prop_assert!(text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-'));
            prop_assert_eq!(parse_cursor(&text).unwrap(), position);
        }
    }
}
