//! `/console`: the web console's page files, compiled into the binary (`host/console/`).
//!
//! The pages are plain HTML, CSS and ES modules with no build step, so a fresh clone builds the
//! binary with no extra toolchain. They need no credential: they hold no data. Every data call
//! the page makes goes through `/v1` with the user's key, like any other client. Answers carry
//! a strong ETag (a hash of the file) and a strict Content-Security-Policy: nothing is loaded
//! or sent anywhere but this server.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use sha2::{Digest, Sha256};

/// Every file under `host/console/`; `tests::every_file_is_embedded` keeps the list complete.
const FILES: &[(&str, &[u8])] = &[
    ("index.html", include_bytes!("../../console/index.html")),
    ("style.css", include_bytes!("../../console/style.css")),
    ("favicon.svg", include_bytes!("../../console/favicon.svg")),
    ("app.js", include_bytes!("../../console/app.js")),
    ("api.js", include_bytes!("../../console/api.js")),
    ("ui.js", include_bytes!("../../console/ui.js")),
    (
        "pages/tables.js",
        include_bytes!("../../console/pages/tables.js"),
    ),
    (
        "pages/table.js",
        include_bytes!("../../console/pages/table.js"),
    ),
    (
        "pages/data.js",
        include_bytes!("../../console/pages/data.js"),
    ),
    (
        "pages/history.js",
        include_bytes!("../../console/pages/history.js"),
    ),
    (
        "pages/jobs.js",
        include_bytes!("../../console/pages/jobs.js"),
    ),
    (
        "pages/operator.js",
        include_bytes!("../../console/pages/operator.js"),
    ),
    (
        "pages/server.js",
        include_bytes!("../../console/pages/server.js"),
    ),
];

/// Images may be `blob:` URLs the page makes from blob-column bytes it fetched with the key.
const CSP: &str = "default-src 'self'; img-src 'self' blob: data:; object-src 'none'; \
                   base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct File {
    bytes: &'static [u8],
    etag: HeaderValue,
    content_type: &'static str,
}

fn files() -> &'static HashMap<&'static str, File> {
    static FILES_BY_PATH: OnceLock<HashMap<&'static str, File>> = OnceLock::new();
    FILES_BY_PATH.get_or_init(|| {
        FILES
            .iter()
            .map(|&(path, bytes)| {
                let file = File {
                    bytes,
                    etag: etag_of(bytes),
                    content_type: content_type(path),
                };
                (path, file)
            })
            .collect()
    })
}

fn content_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// `GET /`: to the console.
pub async fn root() -> Redirect {
    Redirect::to("/console")
}

/// `GET /console`: the page itself (the app routes with `#/...` fragments).
pub async fn index(headers: HeaderMap) -> Response {
    serve("index.html", &headers)
}

/// `GET /console/{*path}`: a page file; unknown paths are the page (so a reload of any
/// console address works), files that look like assets but do not exist are 404.
pub async fn file(Path(path): Path<String>, headers: HeaderMap) -> Response {
    if files().contains_key(path.as_str()) {
        serve(&path, &headers)
    } else if path.contains('.') {
        (StatusCode::NOT_FOUND, "no such console file").into_response()
    } else {
        serve("index.html", &headers)
    }
}

/// `LANCET_CONSOLE_DIR`: serve the page files from this directory instead (read on every
/// request), to work on the pages without rebuilding the binary.
fn dev_dir() -> Option<&'static std::path::Path> {
    static DIR: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| std::env::var_os("LANCET_CONSOLE_DIR").map(Into::into))
        .as_deref()
}

fn etag_of(bytes: &[u8]) -> HeaderValue {
    let hash = hex::encode(&Sha256::digest(bytes)[..12]);
    HeaderValue::from_str(&format!("\"{hash}\"")).expect("hex is ASCII")
}

fn serve(path: &str, headers: &HeaderMap) -> Response {
    let file = &files()[path];
    let (bytes, etag) = match dev_dir().and_then(|d| std::fs::read(d.join(path)).ok()) {
        Some(bytes) => {
            let etag = etag_of(&bytes);
            (axum::body::Body::from(bytes), etag)
        }
        None => (axum::body::Body::from(file.bytes), file.etag.clone()),
    };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        bytes.into_response()
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(file.content_type),
    );
    h.insert(header::ETAG, etag);
    // Revalidated on every load (a 304 costs nothing), so a new binary's pages show at once.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_embedded() {
        // At run time (cargo sets it for tests): a binary built in another checkout sharing
        // the target directory still reads this one.
        let manifest = std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
        let dir = std::path::Path::new(&manifest).join("console");
        let mut on_disk = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path.strip_prefix(&dir).unwrap().to_string_lossy();
                    on_disk.push(rel.replace('\\', "/"));
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = FILES.iter().map(|(p, _)| p.to_string()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
    }

    #[test]
    fn modules_import_only_embedded_files() {
        // A relative import of a file that is not embedded would fail only in the browser.
        for (path, bytes) in FILES.iter().filter(|(p, _)| p.ends_with(".js")) {
            let text = std::str::from_utf8(bytes).unwrap();
            let base = path.rsplit_once('/').map_or("", |(d, _)| d);
            for line in text.lines().filter(|l| l.starts_with("import ")) {
                let spec = line.split(['"', '\'']).nth(1).unwrap();
                let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
                for seg in spec.split('/') {
                    match seg {
                        "." => {}
                        ".." => {
                            parts.pop();
                        }
                        s => parts.push(s),
                    }
                }
                let target = parts.join("/");
                assert!(
                    FILES.iter().any(|(p, _)| *p == target),
                    "{path} imports {spec}, which is not embedded"
                );
            }
        }
    }
}
