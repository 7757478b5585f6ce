//! A package index's project page (PEP 503 "simple" HTML, as PyPI and every mirror serve it):
//! the files of one project, with their hashes, `Requires-Python` and yanked marks.

use std::sync::OnceLock;

use regex::Regex;
use url::Url;

/// One file a project page lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub filename: String,
    pub url: Url,
    pub sha256: Option<String>,
    pub requires_python: Option<String>,
    pub yanked: bool,
}

/// The anchors of a project page, their `href`s resolved against the page's own URL.
pub fn parse(page_url: &Url, html: &str) -> Vec<Listed> {
    static ANCHOR: OnceLock<Regex> = OnceLock::new();
    static ATTR: OnceLock<Regex> = OnceLock::new();
    let anchor = ANCHOR.get_or_init(|| Regex::new(r"(?is)<a\s([^>]*)>(.*?)</a>").unwrap());
    let attr = ATTR.get_or_init(|| {
        Regex::new(r#"(?is)([a-z][a-z0-9-]*)\s*(?:=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+)))?"#)
            .unwrap()
    });
    let mut out = Vec::new();
    for a in anchor.captures_iter(html) {
        let mut href = None;
        let mut requires_python = None;
        let mut yanked = false;
        for m in attr.captures_iter(&a[1]) {
            let value = m
                .get(2)
                .or(m.get(3))
                .or(m.get(4))
                .map(|v| unescape(v.as_str()));
            match m[1].to_ascii_lowercase().as_str() {
                "href" => href = value,
                "data-requires-python" => requires_python = value,
                "data-yanked" => yanked = true,
                _ => {}
            }
        }
        let Some(href) = href else { continue };
        let Ok(mut url) = page_url.join(&href) else {
            continue;
        };
        let sha256 = url
            .fragment()
            .and_then(|f| f.strip_prefix("sha256="))
            .map(str::to_string);
        url.set_fragment(None);
        let filename = unescape(a[2].trim());
        out.push(Listed {
            filename,
            url,
            sha256,
            requires_python,
            yanked,
        });
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pep503_page_gives_files_hashes_and_marks() {
        let page = Url::parse("http://index.test/simple/tiny/").unwrap();
        let html = r#"<!DOCTYPE html><html><body>
<a href="../../files/tiny-1.0-py3-none-any.whl#sha256=ab12" data-requires-python="&gt;=3.8">tiny-1.0-py3-none-any.whl</a><br/>
<a href='https://cdn.test/tiny-0.9.tar.gz' data-yanked="">tiny-0.9.tar.gz</a>
<a>no href</a>
</body></html>"#;
        let got = parse(&page, html);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].filename, "tiny-1.0-py3-none-any.whl");
        assert_eq!(
            got[0].url.as_str(),
            "http://index.test/files/tiny-1.0-py3-none-any.whl"
        );
        assert_eq!(got[0].sha256.as_deref(), Some("ab12"));
        assert_eq!(got[0].requires_python.as_deref(), Some(">=3.8"));
        assert!(!got[0].yanked && got[1].yanked);
        assert_eq!(got[1].url.as_str(), "https://cdn.test/tiny-0.9.tar.gz");
    }
}
