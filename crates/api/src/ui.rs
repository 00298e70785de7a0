//! The inbox page (SPEC §13) at `/ui`: the build of crates/web embedded at
//! compile time (see build.rs). Files under `assets/` carry a content hash in
//! their names, so they are cached for good; `index.html` is revalidated on
//! every load, and it answers for the page's own routes (`/ui/threads/…`).

use axum::extract::Path;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::{ApiError, AppState};

/// `(path under ui/, bytes)`, sorted by path.
static FILES: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/ui_files.rs"));

/// The page talks to this API only; nothing inline, no frames.
const POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                      connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'";

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(file))
}

async fn index() -> Response {
    match embedded("index.html") {
        Some(bytes) => page_response("index.html", bytes),
        None => ApiError::NotFound(
            "this build has no inbox page (crates/api/ui is empty: run `make ui`)".into(),
        )
        .into_response(),
    }
}

async fn file(Path(path): Path<String>) -> Response {
    match embedded(&path) {
        Some(bytes) => page_response(&path, bytes),
        // A missing asset is a 404, not the page: a stale tab asking for an
        // old hash must not get HTML as JavaScript.
        None if path.starts_with("assets/") || path.contains('.') => {
            ApiError::NotFound(format!("no file /ui/{path}")).into_response()
        }
        None => index().await,
    }
}

fn embedded(path: &str) -> Option<&'static [u8]> {
    FILES
        .binary_search_by(|(name, _)| (*name).cmp(path))
        .ok()
        .map(|at| FILES[at].1)
}

fn page_response(path: &str, bytes: &'static [u8]) -> Response {
    let cache = if path.starts_with("assets/") {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type(path))),
            (CACHE_CONTROL, HeaderValue::from_static(cache)),
            (CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
            (
                HeaderName::from_static("x-content-type-options"),
                HeaderValue::from_static("nosniff"),
            ),
            (
                HeaderName::from_static("referrer-policy"),
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        bytes,
    )
        .into_response()
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit_once('.').map(|(_, extension)| extension) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json" | "map") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("woff2") => "font/woff2",
        Some("txt") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_files_are_sorted_for_lookup_and_hold_the_page() {
        assert!(FILES.windows(2).all(|pair| pair[0].0 < pair[1].0));
        let index = embedded("index.html").expect("crates/api/ui/index.html is committed");
        let html = std::str::from_utf8(index).expect("utf-8");
        // Every asset the page names is embedded.
        for reference in html
            .split('"')
            .filter(|part| part.starts_with("/ui/assets/"))
        {
            let path = reference.trim_start_matches("/ui/");
            assert!(
                embedded(path).is_some(),
                "{path} is named by index.html but not embedded"
            );
        }
    }

    #[test]
    fn content_types_follow_the_extension() {
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
        assert_eq!(
            content_type("assets/index-abc.js"),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(
            content_type("assets/index-abc.css"),
            "text/css; charset=utf-8"
        );
        assert_eq!(content_type("assets/x"), "application/octet-stream");
    }
}
