//! The canonical form of a JSON value (RFC 8785, the JSON Canonicalization
//! Scheme) and the `argumentsHash` built on it: SHA-256 of a call's
//! arguments in that form, as lowercase hex. A person approves what they
//! saw; an answer that names the hash it was shown is refused when the
//! call's arguments are no longer those (SPEC-level: docs/approvals.md, "Decisions").
//!
//! JCS because anyone can compute it again: keys sorted by their UTF-16
//! code units, no whitespace, strings escaped minimally, numbers as
//! ECMAScript prints them (`1e+21`, `0.000001`, `1e-7`).

use serde_json::Value;
use sha2::{Digest, Sha256};

/// SHA-256 of `arguments` in canonical form, lowercase hex.
pub fn arguments_hash(arguments: &Value) -> String {
    sha256_hex(canonical(arguments).as_bytes())
}

/// SHA-256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `value` in canonical form (RFC 8785).
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A number as ECMAScript's `Number.prototype.toString` prints it (JCS
/// §3.2.2.3): integers within 2^53 exactly, every other value from its
/// shortest round-trip digits.
fn write_number(out: &mut String, n: &serde_json::Number) {
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= 1 << 53 {
            out.push_str(&i.to_string());
            return;
        }
    } else if let Some(u) = n.as_u64() {
        if u <= 1 << 53 {
            out.push_str(&u.to_string());
            return;
        }
    }
    out.push_str(&ecmascript_number(n.as_f64().unwrap_or(0.0)));
}

fn ecmascript_number(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        // JSON has no NaN or infinities; -0 prints as 0.
        return "0".into();
    }
    let sign = if x < 0.0 { "-" } else { "" };
    // Rust's `{:e}` gives the shortest digits that round-trip: `d.ddde±x`.
    let exp_form = format!("{:e}", x.abs());
    let (mantissa, exponent) = exp_form.split_once('e').unwrap_or((&exp_form, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i32;
    // The value is 0.digits × 10^n.
    let n = exponent.parse::<i32>().unwrap_or(0) + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat((n - k) as usize))
    } else if 0 < n && n <= 21 {
        format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat((-n) as usize))
    } else {
        let e = n - 1;
        let e = if e >= 0 {
            format!("+{e}")
        } else {
            e.to_string()
        };
        if k == 1 {
            format!("{digits}e{e}")
        } else {
            format!("{}.{}e{e}", &digits[..1], &digits[1..])
        }
    };
    format!("{sign}{body}")
}

/// The length of `value` written as compact JSON, counted without writing
/// it anywhere.
pub fn json_len(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 8785 reads numbers as doubles: integers past 2^53 that differ
    /// only below a double's precision hash alike (docs/approvals.md says so).
    #[test]
    fn integers_past_two_to_the_53_hash_as_doubles() {
        let a = serde_json::json!({ "n": 9_007_199_254_740_993_u64 });
        let b = serde_json::json!({ "n": 9_007_199_254_740_992_u64 });
        assert_eq!(arguments_hash(&a), arguments_hash(&b));
        let c = serde_json::json!({ "n": 9_007_199_254_740_991_u64 });
        assert_ne!(arguments_hash(&c), arguments_hash(&b));
    }

    #[test]
    fn json_len_is_the_length_of_the_compact_text() {
        for value in [
            serde_json::json!(null),
            serde_json::json!({ "a": [1, "é\u{1}", { "b": 2.5 }] }),
            serde_json::json!("x".repeat(1000)),
        ] {
            assert_eq!(json_len(&value), serde_json::to_vec(&value).unwrap().len());
        }
    }
    use serde_json::json;

    #[test]
    fn keys_sort_by_utf16_and_nothing_is_spaced() {
        // RFC 8785 §3.2.3's example of UTF-16 order: U+1F600 (a surrogate
        // pair, 0xD83D…) sorts before U+FB33 although its code point is
        // higher.
        let value: Value = serde_json::from_str(
            r#"{"\ufb33": 1, "\ud83d\ude00": 2, "b": [1, {"z": null, "a": true}], "a": "x"}"#,
        )
        .unwrap();
        assert_eq!(
            canonical(&value),
            "{\"a\":\"x\",\"b\":[1,{\"a\":true,\"z\":null}],\"\u{1f600}\":2,\"\u{fb33}\":1}"
        );
    }

    #[test]
    fn strings_escape_only_what_json_requires() {
        let value = json!("a\"b\\c\n\u{1}\u{7f}é\u{2028}");
        assert_eq!(
            canonical(&value),
            "\"a\\\"b\\\\c\\n\\u0001\u{7f}é\u{2028}\""
        );
    }

    /// Numbers as RFC 8785's appendix B prints them.
    #[test]
    fn numbers_print_as_ecmascript_does() {
        for (text, expected) in [
            ("0", "0"),
            ("-0.0", "0"),
            ("1", "1"),
            ("-1", "-1"),
            ("1.0", "1"),
            ("1.5", "1.5"),
            ("100", "100"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345678901", "123456789012345680000"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("5e-324", "5e-324"),
            ("333333333.3333333", "333333333.3333333"),
            ("9007199254740992", "9007199254740992"),
            ("9007199254740993", "9007199254740992"),
            ("-9007199254740993", "-9007199254740992"),
            ("295147905179352830000", "295147905179352830000"),
            ("4.5e-7", "4.5e-7"),
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(canonical(&value), expected, "{text}");
        }
    }

    #[test]
    fn the_hash_is_sha256_of_the_canonical_form() {
        // sha256 of `{"to":"a@b.c"}`.
        assert_eq!(
            arguments_hash(&json!({ "to": "a@b.c" })),
            "5fbae3841fb4f233a3a4775a0edc224f3932dedd801eb3350131879430fbc0c7"
        );
    }

    /// `json` without its string literals: what is left is structure,
    /// where the canonical form has no white space (a string may).
    fn outside_strings(json: &str) -> String {
        let (mut out, mut in_string, mut escaped) = (String::new(), false, false);
        for c in json.chars() {
            match (in_string, escaped, c) {
                (true, true, _) => escaped = false,
                (true, false, '\\') => escaped = true,
                (true, false, '"') => in_string = false,
                (true, false, _) => {}
                (false, _, '"') => in_string = true,
                (false, _, c) => out.push(c),
            }
        }
        out
    }

    #[test]
    fn a_string_may_hold_what_structure_may_not() {
        let text = canonical(&json!({ "": [": ", "a, b"] }));
        assert_eq!(text, r#"{"":[": ","a, b"]}"#);
        assert_eq!(outside_strings(&text), "{:[,]}");
        assert_eq!(outside_strings(r#"{"a\"b": 1}"#), "{: 1}");
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            "\\PC{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// The canonical form is JSON that reads back as the same value
        /// (numbers as f64 may round, so they compare as f64), and is a
        /// fixed point.
        #[test]
        fn the_canonical_form_reads_back_and_is_stable(value in json_value()) {
            let text = canonical(&value);
            let again: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(canonical(&again), text.clone());
            prop_assert!(!outside_strings(&text).contains(char::is_whitespace), "{}", text);
        }

        /// Key order in the input does not change the hash, and keys come
        /// out sorted by their UTF-16 code units (RFC 8785 §3.2.3), which is
        /// not the order of their UTF-8 bytes (nor of a `BTreeMap`) for
        /// keys from the private-use area beside ones past U+FFFF: the
        /// expected text is built here by that sort, so a canonical form
        /// that kept the map's order (whichever order serde_json's
        /// features give it) fails.
        #[test]
        fn key_order_does_not_change_the_hash(
            keys in prop::collection::btree_set("[a-z\u{e000}-\u{e002}\u{10000}-\u{10002}]{1,3}", 1..6),
        ) {
            let forward: serde_json::Map<String, Value> =
                keys.iter().enumerate().map(|(i, k)| (k.clone(), json!(i))).collect();
            let mut backward = serde_json::Map::new();
            for (i, k) in keys.iter().enumerate().rev() {
                backward.insert(k.clone(), json!(i));
            }
            let mut sorted: Vec<(usize, &String)> = keys.iter().enumerate().collect();
            sorted.sort_by(|a, b| a.1.encode_utf16().cmp(b.1.encode_utf16()));
            let expected = format!(
                "{{{}}}",
                sorted
                    .iter()
                    .map(|(i, k)| format!("\"{k}\":{i}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let (forward, backward) = (Value::Object(forward), Value::Object(backward));
            prop_assert_eq!(canonical(&forward), expected.clone());
            prop_assert_eq!(canonical(&backward), expected);
            prop_assert_eq!(arguments_hash(&forward), arguments_hash(&backward));
        }
    }
}
