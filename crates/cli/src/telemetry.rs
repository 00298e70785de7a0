//! Logs, and OpenTelemetry traces when the standard variables ask for them.
//!
//! Traces are exported over OTLP (HTTP/protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set, unless `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.
//! The SDK reads the rest itself: `OTEL_SERVICE_NAME` (else the binary's
//! name), `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and its
//! `_ARG`, `OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_HEADERS`, timeouts. Unset, no
//! OpenTelemetry layer is installed and the subscriber is what it was
//! before traces existed.

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::LogFormat;

/// Holds the trace exporter; dropping it flushes what is left (a binary
/// keeps it until `main` returns).
#[must_use = "dropping it stops exporting traces"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            agentenkit_runtime::trace::set_exporting(false);
            if let Err(e) = provider.shutdown() {
                eprintln!("flushing the last traces failed: {e}");
            }
        }
    }
}

/// Whether the environment asks for traces (see the module's comment).
pub fn traces_requested(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let endpoint = set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let no_exporter = var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none");
    endpoint && !disabled && !no_exporter
}

/// The protocol asked for, when this build cannot speak it.
fn unsupported_protocol(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|name| var(name).map(|v| (name, v)))
    .filter(|(_, value)| value.trim() != "http/protobuf")
    .map(|(name, value)| format!("{name}={value}"))
}

/// Installs the subscriber: logs to stderr filtered by `RUST_LOG` (else
/// `default`), as text or JSON; and, when the environment asks, the
/// OpenTelemetry layer exporting this crate's spans as `service`. Asked
/// for a protocol other than http/protobuf, it says so in a warning and
/// exports nothing.
pub fn init(default: &str, format: LogFormat, service: &'static str) -> anyhow::Result<Telemetry> {
    let var = |name: &str| std::env::var(name).ok();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let unsupported = unsupported_protocol(var).filter(|_| traces_requested(var));
    if !traces_requested(var) || unsupported.is_some() {
        // Exactly the subscriber of a build without traces: no layer to
        // consult on the hot path.
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr);
        match format {
            LogFormat::Text => builder.init(),
            LogFormat::Json => builder
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .init(),
        }
        // A protocol this build cannot speak (a platform may set it for
        // every process) leaves traces off rather than the process down.
        if let Some(protocol) = unsupported {
            tracing::warn!(
                "{protocol}: this build exports traces over OTLP http/protobuf only; traces are off"
            );
        }
        return Ok(Telemetry { provider: None });
    }
    let provider = provider(service)?;
    let tracer = provider.tracer(agentenkit_runtime::trace::TRACER);
    opentelemetry::global::set_tracer_provider(provider.clone());
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let traces = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(tracing_subscriber::filter::filter_fn(exported));
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(traces)
        .init();
    agentenkit_runtime::trace::set_exporting(true);
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// What goes into traces: agentenkit's own spans (not every library's),
/// and its warnings and errors as events of the span they happen in.
fn exported(meta: &tracing::Metadata<'_>) -> bool {
    let ours = meta.target().starts_with("agentenkit");
    let level = if meta.is_span() {
        Level::INFO
    } else {
        Level::WARN
    };
    ours && *meta.level() <= level
}

fn provider(service: &'static str) -> anyhow::Result<SdkTracerProvider> {
    // The exporter's HTTP client (rustls, an endpoint may be https) needs
    // the process's crypto provider, installed here before anything else.
    agentenkit_runtime::tls::install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .context("building the OTLP trace exporter")?;
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let mut resource = Resource::builder();
    if !named {
        resource = resource.with_service_name(service);
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn traces_are_exported_only_when_an_endpoint_is_set_and_nothing_turns_them_off() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert!(!traces_requested(env(&[])));
        assert!(!traces_requested(env(&[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            " "
        )])));
        assert!(traces_requested(env(&[endpoint])));
        assert!(traces_requested(env(&[(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://collector:4318/v1/traces"
        )])));
        assert!(!traces_requested(env(&[
            endpoint,
            ("OTEL_SDK_DISABLED", "TRUE")
        ])));
        assert!(!traces_requested(env(&[
            endpoint,
            ("OTEL_TRACES_EXPORTER", "none")
        ])));
        assert!(traces_requested(env(&[
            endpoint,
            ("OTEL_SDK_DISABLED", "false")
        ])));
    }

    #[test]
    fn a_protocol_this_build_cannot_speak_is_named() {
        assert_eq!(unsupported_protocol(env(&[])), None);
        let protobuf = [("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")];
        assert_eq!(unsupported_protocol(env(&protobuf)), None);
        assert_eq!(
            unsupported_protocol(env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])).as_deref(),
            Some("OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
        );
        // The signal's own variable wins.
        let both = [
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ];
        assert_eq!(
            unsupported_protocol(env(&both)).as_deref(),
            Some("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/json")
        );
    }
}
