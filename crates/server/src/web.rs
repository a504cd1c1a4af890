//! `plumb serve --web`: the chat page's files (web/dist), served beside the API.
//!
//! Every file goes out with the headers that make the page cross-origin isolated (COOP
//! `same-origin`, COEP `require-corp`), which a browser requires before it shares memory
//! between Workers, and with its content type (`application/wasm` for the module, which
//! `WebAssembly.instantiateStreaming` insists on). A path is looked up only inside the
//! directory: `..`, absolute and backslashed components are refused, and so is a file whose
//! real path (symbolic links resolved) lies outside it.

use std::path::{Component, Path, PathBuf};

use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// The cross-origin isolation headers, on every file.
const ISOLATION: [(&str, &str); 2] = [
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-embedder-policy", "require-corp"),
];

/// The content type of a file, by its extension.
pub fn content_type(path: &Path) -> &'static str {
    let extension = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    match extension.to_ascii_lowercase().as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "wasm" => "application/wasm",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The file a request path names under `root`, if it may name one: percent-escapes decoded,
/// `/` (and any directory) meaning its `index.html`.
pub fn resolve(root: &Path, uri_path: &str) -> Option<PathBuf> {
    let decoded = percent_decode(uri_path)?;
    let mut path = root.to_path_buf();
    for part in decoded.split('/') {
        let component = Path::new(part).components().next();
        match component {
            None => continue,
            Some(Component::Normal(name)) if name == part && !part.contains('\\') => {
                path.push(part);
            }
            // `..`, `.`, a drive or root: nothing a page links to.
            Some(_) => return None,
        }
    }
    if path.is_dir() {
        path.push("index.html");
    }
    let real = path.canonicalize().ok()?;
    let real_root = root.canonicalize().ok()?;
    real.starts_with(&real_root).then_some(real)
}

/// Decodes `%XX` escapes; `None` for a bad escape, text that is not UTF-8, or a NUL.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let text = String::from_utf8(out).ok()?;
    (!text.contains('\0')).then_some(text)
}

/// Answers a GET or HEAD for a file of the page; `None` for another method (the API's own
/// answer applies).
pub async fn serve_file(root: PathBuf, method: &Method, uri: &Uri) -> Option<Response> {
    if method != Method::GET && method != Method::HEAD {
        return None;
    }
    let head = method == Method::HEAD;
    let path = uri.path().to_owned();
    let read = tokio::task::spawn_blocking(move || {
        let file = resolve(&root, &path)?;
        let bytes = std::fs::read(&file).ok()?;
        Some((content_type(&file), bytes))
    })
    .await
    .ok()
    .flatten();
    let mut response = match read {
        Some((kind, bytes)) => {
            let len = bytes.len();
            let body = if head {
                Body::empty()
            } else {
                Body::from(bytes)
            };
            let mut response = Response::new(body);
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            response
        }
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("not found: {}\n", uri.path()),
        )
            .into_response(),
    };
    for (name, value) in ISOLATION {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_directory() {
        let root = std::env::temp_dir().join(format!("plumb-web-resolve-{}", std::process::id()));
        std::fs::create_dir_all(root.join("assets")).unwrap();
        std::fs::write(root.join("index.html"), "page").unwrap();
        std::fs::write(root.join("assets/a b.js"), "js").unwrap();
        let real = root.canonicalize().unwrap();
        assert_eq!(resolve(&root, "/"), Some(real.join("index.html")));
        assert_eq!(
            resolve(&root, "/assets/a%20b.js"),
            Some(real.join("assets/a b.js"))
        );
        assert_eq!(resolve(&root, "/assets/"), None, "no index.html there");
        for bad in [
            "/../Cargo.toml",
            "/assets/../../x",
            "/%2e%2e/x",
            "/..%2fx",
            "/assets/%2e%2e/index.html",
            "/a%5c..%5cx",
            "/%00",
            "/%zz",
        ] {
            assert_eq!(resolve(&root, bad), None, "{bad}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn content_types_by_extension() {
        assert_eq!(
            content_type(Path::new("x/plumb_web_bg.wasm")),
            "application/wasm"
        );
        assert_eq!(
            content_type(Path::new("index.html")),
            "text/html; charset=utf-8"
        );
        assert_eq!(
            content_type(Path::new("a.JS")),
            "text/javascript; charset=utf-8"
        );
        assert_eq!(
            content_type(Path::new("model.gguf")),
            "application/octet-stream"
        );
    }
}
