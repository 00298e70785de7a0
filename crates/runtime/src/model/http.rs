//! What the HTTP providers share: the key (never shown), a client with its
//! timeouts, and retries inside the call with exponential backoff and full
//! jitter that honour the provider's `Retry-After`.

use std::fmt;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::ModelError;

/// A provider's key. Its `Debug` and `Display` hide it, and every message
/// that leaves a provider call has it blanked out, so it never reaches an
/// error, an event or a log line.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// `None` for an empty key: local servers need none, and then no
    /// header is sent.
    pub fn new(key: impl Into<String>) -> Option<ApiKey> {
        let key = key.into();
        (!key.trim().is_empty()).then(|| ApiKey(key.trim().to_owned()))
    }

    /// The key in the environment variable `name`, if it holds one.
    pub fn from_env(name: &str) -> Option<ApiKey> {
        std::env::var(name).ok().and_then(ApiKey::new)
    }

    pub(super) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// How a provider is reached (SPEC §12).
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    pub base_url: String,
    pub api_key: Option<ApiKey>,
    /// The whole of one HTTP request.
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries inside one call, after the first attempt.
    pub max_retries: u32,
    /// The first backoff; it doubles per retry up to `backoff_cap`.
    pub backoff: Duration,
    pub backoff_cap: Duration,
    /// Certificates (PEM) trusted besides the platform's roots: a private
    /// CA of a gateway or of a local server.
    pub extra_roots_pem: Vec<Vec<u8>>,
    /// The largest answer read: a successful one past it fails the run
    /// (retrying would read the same); of an error answer only this much
    /// is read for its message.
    pub max_response_bytes: u64,
}

impl ProviderSettings {
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
    pub const DEFAULT_MAX_RETRIES: u32 = 4;
    /// 4 MiB: a chat completion is a few KiB; this is far past any.
    pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 4 << 20;

    pub fn new(base_url: impl Into<String>, api_key: Option<ApiKey>) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key,
            timeout: Self::DEFAULT_TIMEOUT,
            connect_timeout: Duration::from_secs(10),
            max_retries: Self::DEFAULT_MAX_RETRIES,
            backoff: Duration::from_millis(500),
            backoff_cap: Duration::from_secs(30),
            extra_roots_pem: Vec::new(),
            max_response_bytes: Self::DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// The longest `Retry-After` waited inside a call; a longer one ends the
/// call as transient, and the run's own backoff takes over.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);
/// How much of a provider's error message (or of its body, when it is not
/// the usual `{"error": {"message": …}}`) is quoted: the message goes into
/// the run's failure, its event and logs.
const ERROR_MESSAGE_CHARS: usize = 512;

pub(super) struct ProviderClient {
    provider: &'static str,
    settings: ProviderSettings,
    client: reqwest::Client,
}

impl ProviderClient {
    pub(super) fn new(provider: &'static str, settings: ProviderSettings) -> Result<Self, String> {
        let url = reqwest::Url::parse(&settings.base_url)
            .map_err(|e| format!("{provider}: base_url {:?}: {e}", settings.base_url))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!(
                "{provider}: base_url {:?} is neither http nor https",
                settings.base_url
            ));
        }
        // A key sent in clear text can be read by anyone on the way; only
        // this machine is trusted with one over plain http.
        if settings.api_key.is_some() && crate::net::clear_text_elsewhere(&url) {
            return Err(format!(
                "{provider}: base_url {:?} is plain http to another machine, and a key would \
                 travel in clear text: use https, or send no key (a base_url of the agent file \
                 sends one only when api_key_env names it)",
                settings.base_url
            ));
        }
        // A key no header can carry would otherwise be dropped silently and
        // every call refused as unauthenticated.
        if let Some(key) = &settings.api_key {
            if HeaderValue::from_str(key.expose()).is_err() {
                return Err(format!(
                    "{provider}: the API key holds characters an HTTP header cannot carry"
                ));
            }
        }
        let mut extra_roots = Vec::new();
        for pem in &settings.extra_roots_pem {
            extra_roots.extend(
                reqwest::Certificate::from_pem_bundle(pem)
                    .map_err(|e| format!("{provider} client: a trusted certificate: {e}"))?,
            );
        }
        let client = crate::tls::http_client()
            .tls_certs_merge(extra_roots)
            .timeout(settings.timeout)
            .connect_timeout(settings.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("{provider} client: {e}"))?;
        Ok(Self {
            provider,
            settings,
            client,
        })
    }

    pub(super) fn key(&self) -> Option<&ApiKey> {
        self.settings.api_key.as_ref()
    }

    /// POSTs `body` to `base_url + path` with `headers`, retrying what may
    /// pass; the JSON answer of the first success.
    pub(super) async fn post(
        &self,
        path: &str,
        headers: HeaderMap,
        body: &Value,
    ) -> Result<Value, ModelError> {
        let url = format!("{}{path}", self.settings.base_url);
        let mut attempt = 0u32;
        loop {
            let (error, retry_after) = match self.send(&url, headers.clone(), body).await {
                Attempt::Answered(value) => return Ok(value),
                Attempt::Unusable(message) => return Err(ModelError::Unusable(message)),
                Attempt::Refused { status, message } => {
                    return Err(ModelError::Refused { status, message })
                }
                Attempt::RateLimited { error, wait } => {
                    return Err(ModelError::RateLimited {
                        provider: self.provider,
                        message: error,
                        wait,
                    })
                }
                Attempt::Failed { error, retry_after } => (error, retry_after),
            };
            if attempt >= self.settings.max_retries {
                return Err(ModelError::Transient(format!(
                    "{error} (after {} attempts)",
                    attempt + 1
                )));
            }
            let wait = match retry_after {
                Some(wait) if wait > MAX_RETRY_AFTER => {
                    return Err(ModelError::Transient(format!(
                        "{error}; the provider asks to wait {}s",
                        wait.as_secs()
                    )))
                }
                Some(wait) => wait,
                None => full_jitter(self.settings.backoff, self.settings.backoff_cap, attempt),
            };
            tracing::warn!(provider = self.provider, %error, attempt, ?wait, "model call failed; retrying");
            tokio::time::sleep(wait).await;
            attempt += 1;
        }
    }

    async fn send(&self, url: &str, headers: HeaderMap, body: &Value) -> Attempt {
        let response = match self
            .client
            .post(url)
            .headers(headers)
            .json(body)
            .send()
            .await
        {
            Ok(response) => response,
            Err(e) => {
                return Attempt::Failed {
                    error: self.describe(&e),
                    retry_after: None,
                }
            }
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let cap = self.settings.max_response_bytes;
        let (body, whole) = match read_at_most(response, cap).await {
            Ok(read) => read,
            Err(e) => {
                return Attempt::Failed {
                    error: self.describe(&e),
                    retry_after: None,
                }
            }
        };
        if status.is_success() && !whole {
            return Attempt::Unusable(format!(
                "{} answered {status} with a body over max_response_bytes ({cap} bytes)",
                self.provider
            ));
        }
        let text = String::from_utf8_lossy(&body);
        if status.is_success() {
            return match serde_json::from_str(&text) {
                Ok(value) => Attempt::Answered(value),
                Err(e) => Attempt::Failed {
                    error: format!(
                        "{} answered {status} with a body that is not JSON: {e}",
                        self.provider
                    ),
                    retry_after: None,
                },
            };
        }
        let message = self.provider_message(&text);
        let code = status.as_u16();
        // A rate limit that says when to come back is waited out of the
        // worker (a delayed message), not inside the call.
        if let (429, Some(wait)) = (code, retry_after.filter(|w| *w <= MAX_RETRY_AFTER)) {
            return Attempt::RateLimited {
                error: format!("{} answered 429: {message}", self.provider),
                wait,
            };
        }
        if matches!(code, 408 | 409 | 429) || status.is_server_error() {
            Attempt::Failed {
                error: format!("{} answered {code}: {message}", self.provider),
                retry_after,
            }
        } else {
            Attempt::Refused {
                status: code,
                message,
            }
        }
    }

    /// A transport error without the URL's query or anything secret.
    fn describe(&self, e: &reqwest::Error) -> String {
        let what = if e.is_timeout() {
            format!("timed out after {:?}", self.settings.timeout)
        } else if e.is_connect() {
            "could not connect".to_owned()
        } else {
            "the request failed".to_owned()
        };
        let mut cause = String::new();
        let mut source = std::error::Error::source(e);
        while let Some(inner) = source {
            cause = inner.to_string();
            source = inner.source();
        }
        let host = e
            .url()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default();
        self.redact(&format!("{} at {host}: {what} ({cause})", self.provider))
    }

    /// The provider's message in `body`, the key redacted from all of it
    /// before it is cut to what is quoted: a key across the cut would
    /// otherwise be quoted in part.
    fn provider_message(&self, body: &str) -> String {
        quoted(self.redact(&whole_error_message(body)))
    }

    fn redact(&self, text: &str) -> String {
        match &self.settings.api_key {
            Some(key) => text.replace(key.expose(), "[redacted]"),
            None => text.to_owned(),
        }
    }
}

enum Attempt {
    Answered(Value),
    /// An answer the run cannot use, whatever a retry gets.
    Unusable(String),
    Refused {
        status: u16,
        message: String,
    },
    Failed {
        error: String,
        retry_after: Option<Duration>,
    },
    /// 429 with a `Retry-After` of at most [`MAX_RETRY_AFTER`].
    RateLimited {
        error: String,
        wait: Duration,
    },
}

/// Reads the body of `response`, at most `cap` bytes of it: the bytes read,
/// and whether that is the whole body. A body announced (Content-Length)
/// or found past the cap is not read further.
async fn read_at_most(
    mut response: reqwest::Response,
    cap: u64,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let cap = usize::try_from(cap).unwrap_or(usize::MAX);
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

/// The provider's own message: `error.message` (OpenAI and Anthropic),
/// `error` or `message` as text, else the start of the body; at most
/// [`ERROR_MESSAGE_CHARS`] of it.
#[cfg(test)]
fn error_message(body: &str) -> String {
    quoted(whole_error_message(body))
}

/// At most [`ERROR_MESSAGE_CHARS`] of `message`, an ellipsis after a cut.
fn quoted(message: String) -> String {
    if message.chars().count() <= ERROR_MESSAGE_CHARS {
        return message;
    }
    let mut cut: String = message.chars().take(ERROR_MESSAGE_CHARS).collect();
    cut.push('…');
    cut
}

fn whole_error_message(body: &str) -> String {
    let from_json = serde_json::from_str::<Value>(body).ok().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    from_json.unwrap_or_else(|| {
        if body.trim().is_empty() {
            "(no message)".to_owned()
        } else {
            body.to_owned()
        }
    })
}

/// `retry-after-ms` (milliseconds), else `Retry-After` as seconds or as an
/// HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = text("retry-after-ms").and_then(|t| t.trim().parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            // Past what a Duration holds (1e300 ms): longer than any wait.
            return Some(Duration::try_from_secs_f64(ms / 1000.0).unwrap_or(Duration::MAX));
        }
    }
    let value = text("retry-after")?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// A uniform wait in `[0, min(cap, base · 2^attempt))`: retries of many
/// workers spread out instead of arriving together.
fn full_jitter(base: Duration, cap: Duration, attempt: u32) -> Duration {
    let ceiling = base
        .saturating_mul(2u32.saturating_pow(attempt.min(20)))
        .min(cap);
    let unit = (uuid::Uuid::new_v4().as_u128() >> 64) as f64 / u64::MAX as f64;
    ceiling.mul_f64(unit)
}

pub(super) fn header(name: &'static str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    let mut value = HeaderValue::from_str(value).ok()?;
    value.set_sensitive(true);
    Some((HeaderName::from_static(name), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_never_shown() {
        let key = ApiKey::new("sk-secret").unwrap();
        assert_eq!(format!("{key:?}"), "ApiKey(***)");
        let settings = ProviderSettings::new("http://x/", Some(key));
        assert!(!format!("{settings:?}").contains("sk-secret"));
        assert_eq!(settings.base_url, "http://x");
        assert!(ApiKey::new("  ").is_none());
    }

    #[test]
    fn a_key_across_the_cut_of_a_message_is_redacted_whole() {
        let key = "sk-live-0123456789abcdef";
        let settings = ProviderSettings::new("http://127.0.0.1", ApiKey::new(key));
        let client = ProviderClient::new("openai", settings).unwrap();
        // The key starts 6 characters before the cut at 512.
        let body = format!(
            r#"{{"error":{{"message":"{}{key} was refused"}}}}"#,
            "x".repeat(ERROR_MESSAGE_CHARS - 6)
        );
        let quoted = client.provider_message(&body);
        assert!(!quoted.contains("sk-liv"), "{quoted}");
        assert!(quoted.ends_with("[redac…"), "{quoted}");
        assert_eq!(quoted.chars().count(), ERROR_MESSAGE_CHARS + 1);
    }

    #[test]
    fn a_key_no_header_can_carry_is_refused_when_the_agents_load() {
        let settings = ProviderSettings::new("http://127.0.0.1", ApiKey::new("sk-a\u{7f}b"));
        let refused = ProviderClient::new("openai", settings).err().unwrap();
        assert!(refused.contains("cannot carry"), "{refused}");
        assert!(!refused.contains("sk-a"), "{refused}");
    }

    #[test]
    fn retry_after_reads_milliseconds_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("3"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(3)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        let mut dated = HeaderMap::new();
        let soon = (chrono::Utc::now() + chrono::Duration::seconds(5)).to_rfc2822();
        dated.insert("retry-after", HeaderValue::from_str(&soon).unwrap());
        let wait = retry_after(&dated).unwrap();
        assert!(wait <= Duration::from_secs(5) && wait >= Duration::from_secs(3));
        dated.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&dated), Some(Duration::ZERO));
        dated.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&dated), None);
    }

    #[test]
    fn a_retry_after_no_duration_holds_waits_longer_than_any_and_does_not_panic() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after-ms", HeaderValue::from_static("1e300"));
        assert_eq!(retry_after(&headers), Some(Duration::MAX));
        headers.insert("retry-after-ms", HeaderValue::from_static("-1"));
        headers.insert(
            "retry-after",
            HeaderValue::from_static("99999999999999999999"),
        );
        assert_eq!(retry_after(&headers), None, "neither parses");
    }

    #[test]
    fn a_providers_message_is_quoted_at_most_so_long() {
        let long = "x".repeat(100_000);
        let quoted = error_message(&format!(r#"{{"error":{{"message":"{long}"}}}}"#));
        assert_eq!(quoted.chars().count(), ERROR_MESSAGE_CHARS + 1);
        assert!(quoted.ends_with('…'));
        assert_eq!(
            error_message(&long).chars().count(),
            ERROR_MESSAGE_CHARS + 1
        );
    }

    #[test]
    fn full_jitter_stays_under_the_doubling_ceiling_and_the_cap() {
        let base = Duration::from_millis(500);
        let cap = Duration::from_secs(30);
        for attempt in 0..40 {
            let ceiling = (base * 2u32.saturating_pow(attempt.min(20))).min(cap);
            for _ in 0..20 {
                assert!(full_jitter(base, cap, attempt) <= ceiling);
            }
        }
    }

    #[test]
    fn the_providers_own_message_is_quoted() {
        assert_eq!(
            error_message(r#"{"error":{"message":"Incorrect API key","type":"auth"}}"#),
            "Incorrect API key"
        );
        assert_eq!(
            error_message(
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: required"}}"#
            ),
            "max_tokens: required"
        );
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(error_message("Bad Gateway"), "Bad Gateway");
        assert_eq!(error_message(""), "(no message)");
    }
}
