//! Local model providers that speak the OpenAI Chat Completions and the
//! Anthropic Messages wire formats, answer from a script, record every
//! request, and, like the real services, refuse with 400 a history the
//! real ones refuse (a dangling tool call; for Anthropic also roles that do
//! not alternate, results not in the next user message, or no
//! `anthropic-version`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Value,
}

impl Reply {
    pub fn ok(body: Value) -> Reply {
        Reply {
            status: 200,
            headers: vec![],
            body,
        }
    }

    /// An error answer in the provider's own shape.
    pub fn error(status: u16, message: &str) -> Reply {
        Reply {
            status,
            headers: vec![],
            body: json!({ "type": "error", "error": { "type": "error", "message": message } }),
        }
    }

    pub fn with_header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((name, value.to_owned()));
        self
    }
}

/// An OpenAI answer calling tools: `(id, name, arguments as JSON text)`.
pub fn openai_calls(calls: &[(&str, &str, &str)]) -> Reply {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({ "id": id, "type": "function", "function": { "name": name, "arguments": arguments } })
        })
        .collect();
    Reply::ok(json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{ "index": 0, "finish_reason": "tool_calls",
            "message": { "role": "assistant", "content": null, "tool_calls": tool_calls } }],
        "usage": { "prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40 },
    }))
}

pub fn openai_text(text: &str) -> Reply {
    Reply::ok(json!({
        "choices": [{ "index": 0, "finish_reason": "stop",
            "message": { "role": "assistant", "content": text } }],
        "usage": { "prompt_tokens": 52, "completion_tokens": 3, "total_tokens": 55 },
    }))
}

/// An Anthropic answer calling tools: `(id, name, input)`.
pub fn anthropic_calls(calls: &[(&str, &str, Value)]) -> Reply {
    let mut content = vec![json!({ "type": "text", "text": "On it." })];
    content.extend(calls.iter().map(
        |(id, name, input)| json!({ "type": "tool_use", "id": id, "name": name, "input": input }),
    ));
    Reply::ok(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "content": content,
        "stop_reason": "tool_use", "usage": { "input_tokens": 41, "output_tokens": 12 },
    }))
}

pub fn anthropic_text(text: &str) -> Reply {
    Reply::ok(json!({
        "id": "msg_2", "type": "message", "role": "assistant",
        "content": [{ "type": "text", "text": text }],
        "stop_reason": "end_turn", "usage": { "input_tokens": 77, "output_tokens": 4 },
    }))
}

/// A CA made for one test and a certificate it issued for `localhost`.
pub struct TestCertificates {
    pub ca_pem: String,
    pub server_pem: String,
    pub server_key_pem: String,
}

impl TestCertificates {
    pub fn issue() -> TestCertificates {
        agentenkit_runtime::tls::install_crypto_provider();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "agentenkit test CA");
        let ca_key = rcgen::KeyPair::generate().expect("ca key");
        let ca = ca_params.self_signed(&ca_key).expect("ca cert");
        let server_key = rcgen::KeyPair::generate().expect("server key");
        let server = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("server params")
            .signed_by(&server_key, &ca, &ca_key)
            .expect("server cert");
        TestCertificates {
            ca_pem: ca.pem(),
            server_pem: server.pem(),
            server_key_pem: server_key.serialize_pem(),
        }
    }

    /// A rustls server configuration presenting the `localhost` certificate.
    pub fn server_config(&self) -> rustls::ServerConfig {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(self.server_pem.as_bytes())
                .collect::<Result<_, _>>()
                .expect("server certificate");
        let key = PrivateKeyDer::from_pem_slice(self.server_key_pem.as_bytes()).expect("key");
        rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .expect("server config")
    }
}

/// A request as the fake saw it, and why it refused it, if it did.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub headers: HashMap<String, String>,
    pub body: Value,
    pub refused: Option<String>,
}

struct State {
    wire: Wire,
    script: Mutex<VecDeque<Reply>>,
    last: Mutex<Option<Reply>>,
    requests: Mutex<Vec<Recorded>>,
}

pub struct FakeProvider {
    /// The `base_url` to configure.
    pub url: String,
    state: Arc<State>,
}

impl FakeProvider {
    /// Answers the n-th request it accepts with `script[n]` (the last one
    /// again past the end).
    pub async fn start(wire: Wire, script: Vec<Reply>) -> FakeProvider {
        Self::serve(wire, script, None).await
    }

    /// Like `start`, over HTTPS with a certificate for `localhost` issued
    /// by a CA made for this call; returns the CA's certificate (PEM) to
    /// trust.
    pub async fn start_tls(wire: Wire, script: Vec<Reply>) -> (FakeProvider, Vec<u8>) {
        let issued = TestCertificates::issue();
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem(
            issued.server_pem.clone().into_bytes(),
            issued.server_key_pem.clone().into_bytes(),
        )
        .await
        .expect("tls config");
        let fake = Self::serve(wire, script, Some(tls)).await;
        (fake, issued.ca_pem.into_bytes())
    }

    async fn serve(
        wire: Wire,
        script: Vec<Reply>,
        tls: Option<axum_server::tls_rustls::RustlsConfig>,
    ) -> FakeProvider {
        let state = Arc::new(State {
            wire,
            script: Mutex::new(script.into()),
            last: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
        });
        let path = match wire {
            Wire::OpenAi => "/v1/chat/completions",
            Wire::Anthropic => "/v1/messages",
        };
        let shared = state.clone();
        let app = axum::Router::new().route(
            path,
            axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
                let state = shared.clone();
                async move { answer(&state, &headers, &body) }
            }),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let scheme = match tls {
            Some(tls) => {
                tokio::spawn(async move {
                    let _ = axum_server::from_tcp_rustls(listener, tls)
                        .serve(app.into_make_service())
                        .await;
                });
                "https"
            }
            None => {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app).await;
                });
                "http"
            }
        };
        // `localhost`: the name the test certificate is issued for.
        let url = match wire {
            Wire::OpenAi => format!("{scheme}://localhost:{port}/v1"),
            Wire::Anthropic => format!("{scheme}://localhost:{port}"),
        };
        FakeProvider { url, state }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().expect("requests").clone()
    }

    /// The requests it accepted (answered from the script).
    pub fn accepted(&self) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.refused.is_none())
            .collect()
    }
}

fn answer(state: &State, headers: &HeaderMap, body: &[u8]) -> axum::response::Response {
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let refused = match state.wire {
        Wire::OpenAi => strict_openai(&body),
        Wire::Anthropic => strict_anthropic(&headers, &body),
    };
    state.requests.lock().expect("requests").push(Recorded {
        headers,
        body,
        refused: refused.clone(),
    });
    if let Some(reason) = refused {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({ "error": { "type": "invalid_request_error", "message": reason } })),
        )
            .into_response();
    }
    let reply = {
        let mut script = state.script.lock().expect("script");
        let mut last = state.last.lock().expect("last");
        if let Some(next) = script.pop_front() {
            *last = Some(next);
        }
        last.clone()
            .unwrap_or_else(|| Reply::error(500, "the script is empty"))
    };
    let mut response = (
        StatusCode::from_u16(reply.status).expect("status"),
        axum::Json(reply.body),
    )
        .into_response();
    for (name, value) in reply.headers {
        response
            .headers_mut()
            .insert(name, value.parse().expect("header value"));
    }
    response
}

/// Every assistant tool call is answered by `tool` messages before the next
/// other message; every `tool` message answers an open call.
fn strict_openai(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match m["role"].as_str() {
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                let Some(at) = open.iter().position(|o| o == id) else {
                    return Some(format!(
                        "messages[{i}]: tool message for no open tool call {id:?}"
                    ));
                };
                open.remove(at);
                if !m["content"].is_string() {
                    return Some(format!("messages[{i}].content must be a string"));
                }
            }
            role => {
                if !open.is_empty() {
                    return Some(format!(
                        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. Missing: {open:?} (before messages[{i}], a {role:?} message)"
                    ));
                }
                if role == Some("assistant") {
                    for call in m["tool_calls"].as_array().into_iter().flatten() {
                        open.push(call["id"].as_str().unwrap_or("").to_owned());
                        if !call["function"]["arguments"].is_string() {
                            return Some(format!("messages[{i}]: arguments must be a string"));
                        }
                    }
                }
            }
        }
    }
    (!open.is_empty()).then(|| format!("tool calls without results at the end: {open:?}"))
}

/// `anthropic-version`, alternating roles from `user`, and every `tool_use`
/// answered by a `tool_result` first in the very next `user` message.
fn strict_anthropic(headers: &HashMap<String, String>, body: &Value) -> Option<String> {
    if headers.get("anthropic-version").map(String::as_str) != Some("2023-06-01") {
        return Some("anthropic-version: header is required".into());
    }
    if !body["max_tokens"].is_u64() {
        return Some("max_tokens: Field required".into());
    }
    let messages = body["messages"].as_array()?;
    let mut expected_role = "user";
    let mut open: Vec<String> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role != expected_role {
            return Some(format!(
                "messages: roles must alternate between \"user\" and \"assistant\", starting with \"user\" (messages[{i}] is {role:?})"
            ));
        }
        let blocks = m["content"].as_array().cloned().unwrap_or_default();
        if blocks.is_empty() {
            return Some(format!("messages[{i}]: content must not be empty"));
        }
        if role == "user" {
            let results: Vec<&str> = blocks
                .iter()
                .take_while(|b| b["type"] == "tool_result")
                .filter_map(|b| b["tool_use_id"].as_str())
                .collect();
            let mut wanted = open.clone();
            wanted.sort();
            let mut given: Vec<String> = results.iter().map(|s| (*s).to_owned()).collect();
            given.sort();
            if wanted != given {
                return Some(format!(
                    "messages[{i}]: `tool_use` ids were found without `tool_result` blocks immediately after: expected {wanted:?}, found {given:?}"
                ));
            }
            if blocks
                .iter()
                .skip(results.len())
                .any(|b| b["type"] == "tool_result")
            {
                return Some(format!("messages[{i}]: tool_result blocks must come first"));
            }
            open.clear();
            expected_role = "assistant";
        } else {
            open = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .filter_map(|b| b["id"].as_str().map(str::to_owned))
                .collect();
            expected_role = "user";
        }
    }
    (!open.is_empty()).then(|| "the last message has tool_use blocks without results".into())
}
