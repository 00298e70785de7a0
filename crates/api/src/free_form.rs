//! Free-form JSON in a body (a payload, answers, edited arguments, a
//! thread's metadata), capped while it is read: JSON text becomes up to
//! sixteen times its size as a `serde_json::Value` (a 1 MiB `[0,0,…]` is
//! 16 MiB), so a field is built with a budget of its JSON length and
//! refused, with a 400 that names it, as soon as it passes its cap, before
//! the rest is built. Read from the body's text, from a `Value`, or from
//! what a tagged enum buffered (`POST /agent/decisions`), alike.
//!
//! Each is `#[serde(deserialize_with = …)]` on an `Option<Value>` (or a
//! `Value`) field of a request body.

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;
use serde_json::{Map, Number, Value};

pub use agentenkit_core::reply::{MAX_EDITED_ARGUMENTS_BYTES, MAX_FREE_FORM_BYTES};

/// The most bytes of JSON a thread's metadata may hold.
pub const MAX_METADATA_BYTES: usize = 64 * 1024;

/// A `Value` built within a budget of bytes of JSON (its compact length,
/// as `canonical::json_len` counts it, near enough).
#[derive(Clone, Copy)]
struct Capped<'a> {
    left: &'a Cell<usize>,
    max: usize,
    what: &'static str,
}

impl Capped<'_> {
    fn spend<E: serde::de::Error>(&self, bytes: usize) -> Result<(), E> {
        match self.left.get().checked_sub(bytes) {
            Some(left) => {
                self.left.set(left);
                Ok(())
            }
            None => Err(E::custom(format!(
                "{}: at most {} bytes of JSON",
                self.what, self.max
            ))),
        }
    }

    fn number<E: serde::de::Error>(self, number: Number) -> Result<Value, E> {
        self.spend(number.to_string().len())?;
        Ok(Value::Number(number))
    }
}

impl<'de> DeserializeSeed<'de> for Capped<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Capped<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.spend(4)?;
        Ok(Value::Null)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.spend(if v { 4 } else { 5 })?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.number(v.into())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.number(v.into())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        // JSON text has no NaN nor infinities.
        self.number(Number::from_f64(v).ok_or_else(|| E::custom("not a JSON number"))?)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.spend(v.len().saturating_add(2))?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.spend(v.len().saturating_add(2))?;
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.spend(2)?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            if !items.is_empty() {
                self.spend(1)?;
            }
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.spend(2)?;
        let mut entries = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // `"key":` and the comma before all but the first.
            self.spend(key.len() + 3 + usize::from(!entries.is_empty()))?;
            let value = map.next_value_seed(self)?;
            entries.insert(key, value);
        }
        Ok(Value::Object(entries))
    }
}

/// Reads an optional value within `max` bytes of JSON.
struct Optional(usize, &'static str);

impl<'de> Visitor<'de> for Optional {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value or null")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Option<Value>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Option<Value>, D::Error> {
        within(deserializer, self.0, self.1).map(Some)
    }
}

/// A value read within `max` bytes of JSON, or an error naming `what`.
fn within<'de, D: Deserializer<'de>>(
    deserializer: D,
    max: usize,
    what: &'static str,
) -> Result<Value, D::Error> {
    let left = Cell::new(max);
    Capped {
        left: &left,
        max,
        what,
    }
    .deserialize(deserializer)
}

/// A job's result or an approval's payload.
pub fn payload<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    deserializer.deserialize_option(Optional(MAX_FREE_FORM_BYTES, "payload"))
}

/// Edited arguments.
pub fn arguments<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    deserializer.deserialize_option(Optional(MAX_EDITED_ARGUMENTS_BYTES, "arguments"))
}

/// A thread's metadata.
pub fn metadata<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    deserializer.deserialize_option(Optional(MAX_METADATA_BYTES, "metadata"))
}

/// The message of a body refused for a field past its cap (`payload: at
/// most 262144 bytes of JSON`), when `error` is one: said as the other
/// bounds are, naming the field first, without serde's position.
pub fn refusal(error: &serde_json::Error) -> Option<String> {
    let text = error.to_string();
    let text = match text.rfind(" at line ") {
        Some(at) => &text[..at],
        None => &text,
    };
    let named = ["payload", "arguments", "metadata", "answers"]
        .iter()
        .any(|field| text.starts_with(&format!("{field}: at most ")));
    (named && text.ends_with(" bytes of JSON")).then(|| text.to_owned())
}

/// Answers to a question set.
pub fn answers<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Value, D::Error> {
    within(deserializer, MAX_FREE_FORM_BYTES, "answers")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(default, deserialize_with = "payload")]
        payload: Option<Value>,
        #[serde(default, deserialize_with = "metadata")]
        metadata: Option<Value>,
    }

    fn zeros(bytes: usize) -> String {
        format!("[{}0]", "0,".repeat(bytes / 2))
    }

    #[test]
    fn a_field_within_its_cap_reads_as_before_from_text_and_from_a_value() {
        let text = r#"{"payload":{"a":[1,"x",null]},"metadata":null}"#;
        for body in [
            serde_json::from_str::<Body>(text).unwrap(),
            serde_json::from_value::<Body>(serde_json::from_str(text).unwrap()).unwrap(),
        ] {
            assert_eq!(body.payload, Some(json!({"a": [1, "x", null]})));
            assert_eq!(body.metadata, None);
        }
    }

    /// The budget is the value's compact JSON length: a value of exactly
    /// the cap is taken, one byte more is not.
    #[test]
    fn the_cap_is_the_compact_json_length() {
        let value = json!({ "a": [1, -2.5, "x", null, true, false, {}], "b": {"c": []} });
        let len = agentenkit_core::canonical::json_len(&value);
        let text = value.to_string();
        let read = |max: usize| {
            let mut de = serde_json::Deserializer::from_str(&text);
            within(&mut de, max, "it").map_err(|e| e.to_string())
        };
        assert_eq!(read(len), Ok(value));
        assert!(read(len - 1).unwrap_err().contains("it: at most"));
    }

    #[test]
    fn a_field_past_its_cap_is_refused_naming_it() {
        let payload = zeros(MAX_FREE_FORM_BYTES);
        let refused =
            serde_json::from_str::<Body>(&format!(r#"{{"payload":{payload}}}"#)).unwrap_err();
        assert_eq!(
            refusal(&refused).as_deref(),
            Some("payload: at most 262144 bytes of JSON")
        );
        let metadata = format!(r#"{{"k":"{}"}}"#, "m".repeat(MAX_METADATA_BYTES));
        let refused =
            serde_json::from_str::<Body>(&format!(r#"{{"metadata":{metadata}}}"#)).unwrap_err();
        assert_eq!(
            refusal(&refused).as_deref(),
            Some("metadata: at most 65536 bytes of JSON")
        );
        // Any other error is no refusal of a cap.
        let other = serde_json::from_str::<Body>(r#"{"payload":[1,}"#).unwrap_err();
        assert_eq!(refusal(&other), None);
    }
}
