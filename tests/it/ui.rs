//! The inbox page served at /ui (SPEC §13): embedded, the right content
//! types, hashed assets cached for good, the page answering for its own
//! routes, and a missing asset a 404 rather than HTML.

use agentenkit_tests::*;
use axum::http::StatusCode;

struct Served {
    status: StatusCode,
    content_type: String,
    cache_control: String,
    body: String,
}

async fn fetch(env: &TestEnv, path: &str) -> Served {
    let response = env.http.get(env.url(path)).send().await.expect("request");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (content_type, cache_control) = (header("content-type"), header("cache-control"));
    Served {
        status: StatusCode::from_u16(response.status().as_u16()).expect("status"),
        content_type,
        cache_control,
        body: response.text().await.expect("body"),
    }
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_without_a_key() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9")).await;

    for path in ["/ui", "/ui/", "/ui/threads", "/ui/threads/4f0c8f2e"] {
        let page = fetch(&env, path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        assert_eq!(page.content_type, "text/html; charset=utf-8", "{path}");
        assert_eq!(page.cache_control, "no-cache", "{path}");
        assert!(
            page.body.contains(r#"<div id="root">"#),
            "{path}: {}",
            page.body
        );
    }

    let page = fetch(&env, "/ui/").await;
    let assets: Vec<&str> = page
        .body
        .split('"')
        .filter(|part| part.starts_with("/ui/assets/"))
        .collect();
    assert!(assets.iter().any(|a| a.ends_with(".js")), "{assets:?}");
    assert!(assets.iter().any(|a| a.ends_with(".css")), "{assets:?}");
    for asset in assets {
        let served = fetch(&env, asset).await;
        assert_eq!(served.status, StatusCode::OK, "{asset}");
        let expected = if asset.ends_with(".js") {
            "text/javascript; charset=utf-8"
        } else {
            "text/css; charset=utf-8"
        };
        assert_eq!(served.content_type, expected, "{asset}");
        assert_eq!(
            served.cache_control, "public, max-age=31536000, immutable",
            "{asset}"
        );
        assert!(!served.body.is_empty());
    }

    for missing in ["/ui/assets/index-gone.js", "/ui/favicon.ico"] {
        let served = fetch(&env, missing).await;
        assert_eq!(served.status, StatusCode::NOT_FOUND, "{missing}");
        assert!(
            served.body.contains("NotFound"),
            "{missing}: {}",
            served.body
        );
    }
    env.finish().await;
}

/// Every file of the page carries its security headers: a policy that
/// loads nothing from elsewhere, runs no inline script and is framed by
/// nobody; no sniffing of content types; no referrer sent.
#[tokio::test]
async fn the_page_and_its_assets_carry_their_security_headers() {
    let env = TestEnv::start(registry(CALL_THEN_DONE, "http://127.0.0.1:9")).await;
    let page = env.http.get(env.url("/ui/")).send().await.unwrap();
    let body = page.text().await.unwrap();
    let asset = body
        .split('"')
        .find(|part| part.starts_with("/ui/assets/") && part.ends_with(".js"))
        .expect("a script")
        .to_owned();
    for path in ["/ui/", "/ui/threads/x", asset.as_str()] {
        let response = env.http.get(env.url(path)).send().await.unwrap();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let policy = header("content-security-policy");
        for directive in [
            "default-src 'self'",
            "script-src 'self'",
            "frame-ancestors 'none'",
            "base-uri 'self'",
        ] {
            assert!(policy.contains(directive), "{path}: {policy}");
        }
        assert!(!policy.contains("unsafe"), "{path}: {policy}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
    }
    env.finish().await;
}
