//! `/ui`: the web inspector, one page of plain HTML, CSS and JavaScript compiled into the binary
//! (no build step, nothing fetched from elsewhere) that reads the HTTP API under
//! `/loom/v1/inspect` and `/loom/v1/sessions` with the caller's own key.
//!
//! The page holds no data, so serving it needs no key: under `--auth keys` it asks for one and
//! the API answers with that tenant's sessions only. Under `--auth none` every session of the
//! store is visible to whoever reaches the port, so the page is served only when the server
//! listens on a loopback address (which the configuration already demands; checked again here
//! since a page that shows everything should not depend on a check made elsewhere).
//!
//! Every answer carries a Content-Security-Policy that allows only this origin's own script and
//! style and no framing; the script writes what the store holds as text, never as HTML.
//!
//! The page names its script and style with their content's hash (`app.js?v=HASH`), so a
//! browser keeps them between views (each view is a new document) and fetches them again only
//! when the binary changes them; the page itself is never cached.

use std::sync::{Arc, LazyLock};

use axum::extract::{Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use crate::config::AuthMode;
use crate::error::ApiError;
use crate::state::AppState;

const INDEX: &str = include_str!("index.html");
const SCRIPT: &str = include_str!("app.js");
const STYLE: &str = include_str!("app.css");

/// Only this origin's script, style and API; no inline script, no plugins, no framing.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// The inspector's routes.
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(|| async { Redirect::permanent("/ui") }))
        .route("/ui/app.js", get(script))
        .route("/ui/app.css", get(style))
}

/// The start of a SHA-256 of `text`, in hex: a version that changes with the text.
fn version(text: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(text.as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

static SCRIPT_VERSION: LazyLock<String> = LazyLock::new(|| version(SCRIPT));
static STYLE_VERSION: LazyLock<String> = LazyLock::new(|| version(STYLE));

/// The page, naming the script and style by their versions.
static PAGE: LazyLock<String> = LazyLock::new(|| {
    INDEX
        .replace(
            "/ui/app.js\"",
            &format!("/ui/app.js?v={}\"", SCRIPT_VERSION.as_str()),
        )
        .replace(
            "/ui/app.css\"",
            &format!("/ui/app.css?v={}\"", STYLE_VERSION.as_str()),
        )
});

#[derive(Debug, serde::Deserialize)]
struct Versioned {
    v: Option<String>,
}

async fn index(State(state): State<Arc<AppState>>) -> Response {
    page(&state, "text/html; charset=utf-8", PAGE.as_str(), false)
}

async fn script(State(state): State<Arc<AppState>>, Query(query): Query<Versioned>) -> Response {
    let current = query.v.as_deref() == Some(SCRIPT_VERSION.as_str());
    page(&state, "text/javascript; charset=utf-8", SCRIPT, current)
}

async fn style(State(state): State<Arc<AppState>>, Query(query): Query<Versioned>) -> Response {
    let current = query.v.as_deref() == Some(STYLE_VERSION.as_str());
    page(&state, "text/css; charset=utf-8", STYLE, current)
}

/// An answer of the inspector's; `immutable` when its URL names its content's version.
fn page(
    state: &AppState,
    content_type: &'static str,
    body: &'static str,
    immutable: bool,
) -> Response {
    if state.config.auth == AuthMode::None && !state.config.listen.ip().is_loopback() {
        return ApiError::not_found(format!(
            "the inspector (/ui) is served under --auth none only on a loopback address, and \
             this server listens on {}: use --auth keys, or listen on 127.0.0.1",
            state.config.listen
        ))
        .into_response();
    }
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
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
    // The page changes with the binary; a stale copy after an upgrade would call a changed API.
    // A versioned script or style is that version for good.
    let cache = if immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    r
}
