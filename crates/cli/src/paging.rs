//! Following a paged list of the API: each answer's `Link` header
//! (`<…?after=…&limit=…>; rel="next"`, RFC 8288) names the next page while
//! more may follow.

/// The `after` and `limit` of the page a `Link` header names as `next`,
/// as they stand in its URL (still percent-encoded, to send back as they
/// came); `None` when it names no next page.
pub fn next_page(link: &str) -> Option<(String, Option<String>)> {
    link.split(',').find_map(|entry| {
        let (target, params) = entry.trim().split_once(';')?;
        let is_next = params.split(';').any(|param| {
            let param = param.trim().replace(' ', "");
            param == "rel=\"next\"" || param == "rel=next"
        });
        let url = target.trim().strip_prefix('<')?.strip_suffix('>')?;
        let (_, query) = url.split_once('?')?;
        let value = |name: &str| {
            query
                .split('&')
                .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_owned)
        };
        is_next.then(|| value("after").map(|after| (after, value("limit"))))?
    })
}

#[cfg(test)]
mod tests {
    use super::next_page;

    #[test]
    fn the_next_page_is_read_from_its_link() {
        assert_eq!(
            next_page("</agent/inbox?after=1.a.62&limit=2>; rel=\"next\""),
            Some(("1.a.62".into(), Some("2".into())))
        );
        assert_eq!(
            next_page(
                "<https://x/y?limit=5&after=7>; rel=\"prev\", <https://x/y?after=9>; rel=next"
            ),
            Some(("9".into(), None))
        );
        for none in [
            "",
            "garbage",
            "</y?after=3>; rel=\"prev\"",
            "</y?limit=3>; rel=\"next\"",
            "</y>; rel=\"next\"",
        ] {
            assert_eq!(next_page(none), None, "{none}");
        }
    }
}
