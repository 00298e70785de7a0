//! A question's link: a page the person opens before answering.

/// The longest [`Question::link`](super::Question::link).
pub const MAX_LINK_BYTES: usize = 2048;

/// Why `link` cannot be a question's link, if it cannot: an absolute
/// `http`/`https` URL with a host, of printable ASCII only (no spaces,
/// controls, bidi marks or look-alike letters), no backslash (which browsers
/// read as `/`) and no user info (`https://bank.example@evil.example`
/// goes to evil.example): what a person reads is where it goes, and never
/// a `javascript:` URL.
pub fn link_issue(link: &str) -> Option<String> {
    if link.len() > MAX_LINK_BYTES {
        return Some(format!("longer than {MAX_LINK_BYTES} bytes"));
    }
    if !link.chars().all(|c| c.is_ascii_graphic()) || link.contains('\\') {
        return Some("has characters other than printable ASCII, or a backslash".into());
    }
    let lower = link.to_ascii_lowercase();
    let rest = ["https://", "http://"]
        .iter()
        .find_map(|scheme| lower.strip_prefix(scheme));
    let Some(rest) = rest else {
        return Some("must be an http:// or https:// URL".into());
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some("has user info before its host".into());
    }
    let host = match authority.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').map_or("", |(ip, _)| ip),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() {
        return Some("has no host".into());
    }
    None
}
