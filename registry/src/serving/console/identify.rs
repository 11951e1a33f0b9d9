//! Who is asking: each request to a page names its viewer by an
//! `Authorization: Bearer` header, a sealed session cookie, or (agents
//! unauthenticated) nothing, as the anonymous caller. The viewer's
//! rights come from the policy's `console` section; a viewer with none is
//! refused. A post from another site is refused by its `Origin`, and by
//! the form token each handler checks ([`Viewer::posted`]).

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Redirect, Response},
};

use super::{Shared, pages, pages::Viewer, session};
use crate::access::auth::{Caller, ConsoleRights};

/// The anonymous viewer's double-submit cookie.
pub(crate) const FORM_COOKIE: &str = "toolmesh_console_form";

/// Puts the [`Caller`] and the [`Viewer`] in the request's extensions, or
/// answers: the sign-in form (a page), 401 (a post), 403 (no console
/// role, or a post from another origin).
pub(crate) async fn identify(
    State(console): State<Shared>,
    mut request: Request,
    next: Next,
) -> Response {
    let is_get = request.method() == http::Method::GET;
    if !is_get && !same_origin(request.headers()) {
        return refused("This form was sent from another site.");
    }
    let identified = who(&console, request.headers());
    let (caller, viewer, new_token) = match identified {
        Ok(found) => found,
        Err(reason) if is_get => {
            tracing::debug!(%reason, "console: not signed in");
            return Redirect::to("/login").into_response();
        }
        Err(reason) => {
            return (
                StatusCode::UNAUTHORIZED,
                pages::message("Not signed in", None, &reason),
            )
                .into_response();
        }
    };
    if !viewer.rights.view {
        return (
            StatusCode::FORBIDDEN,
            pages::message(
                "No console role",
                Some(&viewer),
                "The policy's console section gives this caller no role.",
            ),
        )
            .into_response();
    }
    request.extensions_mut().insert(caller);
    request.extensions_mut().insert(viewer);
    let mut response = next.run(request).await;
    if let Some(token) = new_token {
        let cookie = session::set_cookie(FORM_COOKIE, &token, console.session_ttl, console.tls);
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// The caller and viewer of `headers`, and a form token to set in a
/// cookie when the anonymous viewer had none.
fn who(
    console: &super::Console,
    headers: &HeaderMap,
) -> Result<(Caller, Viewer, Option<String>), String> {
    let rights = |caller: &Caller| {
        console
            .access
            .policy()
            .map_or(ConsoleRights::ALL, |p| p.console_rights(caller))
    };
    if let Some(authorization) = headers.get(header::AUTHORIZATION) {
        let caller = console
            .access
            .caller(&metadata(Some(authorization)))
            .map_err(|e| e.to_string())?;
        let viewer = Viewer {
            id: caller.id.clone(),
            csrf: String::new(),
            signed_in: false,
            by_header: true,
            rights: rights(&caller),
            authorization: Some(sensitive(authorization.clone())),
        };
        return Ok((caller, viewer, None));
    }
    if let Some(sealed) = cookie(headers, session::COOKIE) {
        let session = console.sealer.open(sealed).map_err(|e| e.to_string())?;
        let bearer = HeaderValue::from_str(&format!("Bearer {}", session.credential))
            .map_err(|_| "this sign-in's credential cannot be sent".to_owned())?;
        let caller = console
            .access
            .caller(&metadata(Some(&bearer)))
            .map_err(|e| format!("the credential of this sign-in is no longer accepted: {e}"))?;
        let viewer = Viewer {
            id: caller.id.clone(),
            csrf: session.csrf,
            signed_in: true,
            by_header: false,
            rights: rights(&caller),
            authorization: Some(sensitive(bearer)),
        };
        return Ok((caller, viewer, None));
    }
    // Agents unauthenticated: anyone is the anonymous caller, whose forms
    // carry a double-submit token.
    let caller = console
        .access
        .caller(&metadata(None))
        .map_err(|_| "sign in to see the console".to_owned())?;
    let (csrf, new) = match cookie(headers, FORM_COOKIE).filter(|t| t.len() >= 32) {
        Some(token) => (token.to_owned(), None),
        None => {
            let token = session::random_token();
            (token.clone(), Some(token))
        }
    };
    let viewer = Viewer {
        id: caller.id.clone(),
        csrf,
        signed_in: false,
        by_header: false,
        rights: rights(&caller),
        authorization: None,
    };
    Ok((caller, viewer, new))
}

fn sensitive(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

/// Whether a post comes from the console's own pages: its `Origin` (when
/// the browser sends one) names the host it was sent to. An opaque
/// `Origin: null` passes only when the browser itself vouches, by
/// `Sec-Fetch-Site: same-origin`, that the page was the console's.
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else {
        return true;
    };
    if origin == "null" {
        return headers
            .get("sec-fetch-site")
            .is_some_and(|site| site.as_bytes() == b"same-origin");
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    origin
        .split_once("://")
        .is_some_and(|(_, authority)| !host.is_empty() && authority.eq_ignore_ascii_case(host))
}

/// A refusal page.
pub(crate) fn refused(reason: &str) -> Response {
    (
        StatusCode::FORBIDDEN,
        pages::message("Refused", None, reason),
    )
        .into_response()
}

/// The metadata an agent's call with `authorization` would carry.
pub(crate) fn metadata(authorization: Option<&HeaderValue>) -> tonic::metadata::MetadataMap {
    let mut headers = HeaderMap::new();
    if let Some(value) = authorization {
        headers.insert(header::AUTHORIZATION, value.clone());
    }
    tonic::metadata::MetadataMap::from_headers(headers)
}

/// The value of cookie `name`.
pub(crate) fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| session::cookie(v, name))
}
