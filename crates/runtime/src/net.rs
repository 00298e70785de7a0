//! Where a URL points, as the settings that send to one judge it: only
//! this machine is trusted with plain http.

/// Whether `url` names this machine: `localhost` or a loopback address.
pub fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.to_ascii_lowercase().ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether what is sent to `url` crosses another machine's network in
/// clear text: plain http anywhere but this machine.
pub fn clear_text_elsewhere(url: &reqwest::Url) -> bool {
    url.scheme() == "http" && !is_loopback(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> reqwest::Url {
        reqwest::Url::parse(text).unwrap()
    }

    #[test]
    fn only_this_machine_counts_as_loopback() {
        let loopback = |text: &str| is_loopback(&url(text));
        assert!(loopback("http://127.0.0.1:1/"));
        assert!(loopback("http://127.9.9.9/"));
        assert!(loopback("http://[::1]:8080/"));
        assert!(loopback("http://localhost/"));
        assert!(loopback("http://api.localhost/"));
        assert!(!loopback("http://gpu-box:11434/"));
        assert!(!loopback("http://10.0.0.1/"));
        assert!(!loopback("http://localhost.example/"));
    }

    #[test]
    fn only_plain_http_to_another_machine_is_clear_text_elsewhere() {
        assert!(clear_text_elsewhere(&url("http://mcp.example/")));
        assert!(!clear_text_elsewhere(&url("http://127.0.0.1:8000/")));
        assert!(!clear_text_elsewhere(&url("https://mcp.example/")));
    }
}
