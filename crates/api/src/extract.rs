//! A JSON body extractor whose every rejection is an [`ApiError`]: 413 over
//! the size limit, 400 with a message for malformed or mistyped JSON, for a
//! body that is not a JSON object, and for text Postgres cannot store.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::ApiError;

pub struct JsonBody<T>(pub T);

impl<T> FromRequest<crate::AppState> for JsonBody<T>
where
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    /// The body whole within the API's `body_read_timeout`: a client that
    /// sends its body a byte at a time cannot hold a connection and a
    /// handler for long.
    async fn from_request(req: Request, state: &crate::AppState) -> Result<Self, ApiError> {
        let deadline = state.body_read_timeout;
        let read = tokio::time::timeout(deadline, Bytes::from_request(req, state))
            .await
            .map_err(|_| ApiError::RequestTimeout(deadline))?;
        let bytes = read.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge
            } else {
                ApiError::BadRequest(rejection.body_text())
            }
        })?;
        parse_body(&bytes).map(JsonBody)
    }
}

/// Every body of the API is a JSON object; serde alone would read a struct
/// from an array too (`["mailer"]` as `{agent}`), so the shape is checked
/// first, then every string (keys included) for a NUL character, which a
/// Postgres `text` or `jsonb` cannot hold.
///
/// The body is read into `T` straight from its text: no `Value` of the
/// whole body is built on the way (JSON text is up to sixteen times its
/// size as one), and free-form fields are capped before they are parsed
/// (`free_form`). Only a body with the escape of a NUL is read as a
/// `Value` too, to name where it is.
pub fn parse_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let invalid = |e: serde_json::Error| {
        ApiError::BadRequest(
            crate::free_form::refusal(&e).unwrap_or_else(|| format!("invalid JSON body: {e}")),
        )
    };
    if first_token(bytes) != Some(b'{') {
        // Not an object, or not JSON: which, read without keeping it.
        serde_json::from_slice::<serde::de::IgnoredAny>(bytes).map_err(invalid)?;
        return Err(ApiError::BadRequest(format!(
            "invalid JSON body: expected an object, found {}",
            kind_of(first_token(bytes))
        )));
    }
    // Valid JSON holds a NUL only as the escape `\u0000` (a raw control
    // character is a syntax error), so a body without one is not walked.
    if may_hold_nul(bytes) {
        let value: Value = serde_json::from_slice(bytes).map_err(invalid)?;
        if let Some(path) = nul_at(&value) {
            return Err(ApiError::BadRequest(format!(
                "invalid JSON body: text at {} contains a NUL character (\\u0000), which cannot be stored",
                if path.is_empty() { "/" } else { &path }
            )));
        }
    }
    serde_json::from_slice(bytes).map_err(invalid)
}

/// The first byte of `bytes` that is not JSON white space.
fn first_token(bytes: &[u8]) -> Option<u8> {
    bytes
        .iter()
        .copied()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// Whether the JSON text `bytes` has the escape of a NUL (`\u0000`,
/// hex digits in either case are all zeros here) anywhere; `\\u0000`
/// (an escaped backslash, then text) may answer yes too, which only costs
/// the walk that settles it.
fn may_hold_nul(bytes: &[u8]) -> bool {
    bytes.windows(6).any(|w| w == br"\u0000")
}

/// What a valid JSON text that starts with `first` is.
fn kind_of(first: Option<u8>) -> &'static str {
    match first {
        Some(b'n') => "null",
        Some(b't' | b'f') => "a boolean",
        Some(b'"') => "a string",
        Some(b'[') => "an array",
        Some(b'{') => "an object",
        _ => "a number",
    }
}

/// The JSON pointer of the first string or key holding a NUL, if any. The
/// pointer is built only for the hit, on the way back up: building one for
/// every element on the way down costs the length of the path times the
/// number of elements (a 512 KiB key over an array of zeros).
fn nul_at(value: &Value) -> Option<String> {
    let mut segments = Vec::new();
    if !find_nul(value, &mut segments) {
        return None;
    }
    Some(
        segments
            .iter()
            .rev()
            .map(|segment| format!("/{}", segment.replace('~', "~0").replace('/', "~1")))
            .collect(),
    )
}

/// Whether `value` holds a NUL; on a hit `segments` ends with the path to
/// it, innermost first.
fn find_nul(value: &Value, segments: &mut Vec<String>) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
            let hit = find_nul(item, segments);
            if hit {
                segments.push(i.to_string());
            }
            hit
        }),
        Value::Object(map) => map.iter().any(|(key, item)| {
            let hit = key.contains('\0') || find_nul(item, segments);
            if hit {
                segments.push(key.clone());
            }
            hit
        }),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// A query string read into `T`; a malformed one (a repeated parameter, a
/// value of the wrong type) is a 400 with a JSON body like every error.
pub struct QueryParams<T>(pub T);

impl<S, T> axum::extract::FromRequestParts<S> for QueryParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| QueryParams(q.0))
            .map_err(|rejection| {
                ApiError::BadRequest(format!("invalid query string: {}", rejection.body_text()))
            })
    }
}

/// The `{id}` segment of a path, as text; one that cannot be read (bad
/// percent-encoding) names nothing, so it is a 404 with a JSON body.
pub struct PathText(pub String);

impl<S> axum::extract::FromRequestParts<S> for PathText
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|path| PathText(path.0))
            .map_err(|_| ApiError::NotFound(format!("no resource at {}", parts.uri.path())))
    }
}

/// A path's two parameters, as text (see [`PathText`]).
pub struct PathPair(pub String, pub String);

impl<S> axum::extract::FromRequestParts<S> for PathPair
where
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map(|path| PathPair(path.0 .0, path.0 .1))
            .map_err(|_| ApiError::NotFound(format!("no resource at {}", parts.uri.path())))
    }
}

/// An event id a client sends back (`after`, `Last-Event-ID`): a
/// non-negative integer; anything else is a 400 naming `what`.
pub fn parse_event_id(text: &str, what: &str) -> Result<i64, ApiError> {
    match text.trim().parse::<i64>() {
        Ok(id) if id >= 0 => Ok(id),
        _ => Err(ApiError::BadRequest(format!(
            "{what} must be an event id (a whole number, 0 or more), not {:?}",
            text.chars().take(64).collect::<String>()
        ))),
    }
}

/// Parses a path id; a malformed id names nothing, so it is a 404 like an
/// unknown one.
pub fn parse_id<T: std::str::FromStr>(text: &str, what: &str) -> Result<T, ApiError> {
    text.parse()
        .map_err(|_| ApiError::NotFound(format!("{what} not found")))
}

#[cfg(test)]
mod peak;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_is_a_whole_number_of_zero_or_more() {
        assert_eq!(super::parse_event_id("0", "after").unwrap(), 0);
        assert_eq!(super::parse_event_id(" 42 ", "after").unwrap(), 42);
        for bad in ["-1", "x", "", "1.5", "null", "9223372036854775808"] {
            assert!(super::parse_event_id(bad, "after").is_err(), "{bad}");
        }
    }

    use proptest::prelude::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Start {
        agent: String,
        #[serde(default)]
        #[allow(dead_code)]
        metadata: Option<Value>,
    }

    fn message(e: ApiError) -> String {
        match e {
            ApiError::BadRequest(m) => m,
            other => panic!("expected a 400, got {other:?}"),
        }
    }

    #[test]
    fn an_array_is_not_read_as_a_struct() {
        let e = parse_body::<Start>(br#"["mailer"]"#).unwrap_err();
        assert!(message(e).contains("expected an object, found an array"));
        assert!(parse_body::<Start>(br#"{"agent":"mailer"}"#).is_ok());
    }

    #[test]
    fn a_nul_anywhere_is_a_400_naming_where() {
        let e = parse_body::<Start>(br#"{"agent":"mailer","metadata":{"a":["x","y\u0000"]}}"#)
            .unwrap_err();
        assert!(message(e).contains("/metadata/a/1"));
        let e =
            parse_body::<Start>(br#"{"agent":"mailer","metadata":{"k\u0000/":1}}"#).unwrap_err();
        assert!(message(e).contains("/metadata/k\0~1"));
        let e = parse_body::<Start>(br#"{"agent":"a\u0000"}"#).unwrap_err();
        assert!(message(e).contains("/agent"));
    }

    #[test]
    fn an_escaped_backslash_before_u0000_is_text_not_a_nul() {
        let start: Start = parse_body(br#"{"agent":"a\\u0000"}"#).unwrap();
        assert_eq!(start.agent, "a\\u0000");
    }

    /// A long key over a long array: the pointer is built once, for the
    /// hit, so this is a linear walk (it used to format the key once per
    /// element, some 10^11 bytes here).
    #[test]
    fn a_nul_after_a_long_key_and_many_elements_is_found_in_one_walk() {
        let key = "k".repeat(512 * 1024);
        let zeros = vec!["0"; 250_000].join(",");
        let body = format!(r#"{{"agent":"a","metadata":{{"{key}":[{zeros},"\u0000"]}}}}"#);
        let started = std::time::Instant::now();
        let e = parse_body::<Start>(body.as_bytes()).unwrap_err();
        assert!(message(e).ends_with(&format!(
            "/metadata/{key}/250000 contains a NUL character (\\u0000), which cannot be stored"
        )));
        // A guard, not a speed claim: this takes milliseconds, the
        // quadratic walk minutes.
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }

    proptest! {
        /// Whatever the bytes, the parser answers Ok or a 400, never panics.
        #[test]
        fn arbitrary_bytes_are_parsed_or_refused_with_a_400(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            match parse_body::<Start>(&bytes) {
                Ok(_) | Err(ApiError::BadRequest(_)) => {}
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }

        /// Any JSON value: accepted only when it is an object with an agent
        /// and no NUL.
        #[test]
        fn arbitrary_json_is_accepted_only_when_storable(value in arb_json()) {
            let bytes = serde_json::to_vec(&value).unwrap();
            let parsed = parse_body::<Start>(&bytes);
            if parsed.is_ok() {
                prop_assert!(value.is_object());
                prop_assert!(nul_at(&value).is_none());
            }
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            "[a-z\u{0}]{0,4}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("agent".to_string()),
                        Just("metadata".to_string()),
                        "[a-z\u{0}]{1,3}"
                    ],
                    inner,
                    0..4
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Capped {
        #[allow(dead_code)]
        agent: String,
        #[serde(default, deserialize_with = "crate::free_form::metadata")]
        #[allow(dead_code)]
        metadata: Option<Value>,
    }

    /// A body of 1 MiB of zeros was read as a `Value` of the whole body
    /// (16 MiB and more), then again as the request; now the field is
    /// refused once it passes its cap, having held a few MiB.
    #[test]
    fn a_huge_free_form_field_is_refused_before_it_is_built_whole() {
        let zeros = vec!["0"; 500_000].join(",");
        let body = format!(r#"{{"agent":"a","metadata":{{"k":[{zeros}]}}}}"#);
        assert!(body.len() <= 1024 * 1024);
        let (parsed, held) = super::peak::during(|| parse_body::<Capped>(body.as_bytes()));
        let refused = message(parsed.unwrap_err());
        assert_eq!(refused, "metadata: at most 65536 bytes of JSON");
        assert!(held < 4 << 20, "held {held} bytes");
        // Within its cap it reads, holding about its own size as a value.
        let zeros = vec!["0"; 30_000].join(",");
        let body = format!(r#"{{"agent":"a","metadata":{{"k":[{zeros}]}}}}"#);
        let (parsed, held) = super::peak::during(|| parse_body::<Capped>(body.as_bytes()));
        assert!(parsed.is_ok());
        assert!(held < 4 << 20, "held {held} bytes");
    }
}
