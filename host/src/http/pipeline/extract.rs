//! Request extractors: the table/namespace id from the path, query parameters (including
//! repeated ones such as merge_insert's `on`), and forgiving JSON bodies (an empty body is `{}`,
//! as the lancedb SDK sends describe and count_rows without one).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use bytes::Bytes;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::auth::Caller;
use super::body::bytes_error;
use crate::catalog::Catalog;
use crate::error::{ApiError, ApiResult};

/// Query parameters in order, repeated keys kept.
#[derive(Debug, Default, Clone)]
pub struct Params(Vec<(String, String)>);

impl Params {
    pub fn parse(raw: Option<&str>) -> Self {
        Self(
            url::form_urlencoded::parse(raw.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
    pub fn all(&self, key: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    }
    pub fn string(&self, key: &str) -> Option<String> {
        self.get(key).filter(|v| !v.is_empty()).map(str::to_string)
    }
    pub fn bool(&self, key: &str) -> ApiResult<Option<bool>> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) if v.eq_ignore_ascii_case("true") || v == "1" => Ok(Some(true)),
            Some(v) if v.eq_ignore_ascii_case("false") || v == "0" => Ok(Some(false)),
            Some(v) => Err(ApiError::invalid(format!(
                "query parameter '{key}' must be true or false, got '{v}'"
            ))),
        }
    }
    pub fn int(&self, key: &str) -> ApiResult<Option<i64>> {
        match self.get(key) {
            None | Some("") | Some("null") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                ApiError::invalid(format!(
                    "query parameter '{key}' must be an integer, got '{v}'"
                ))
            }),
        }
    }
}

/// Split a path id by the delimiter; the delimiter alone is the root namespace.
pub fn split_id(raw: &str, delimiter: &str) -> Vec<String> {
    if raw == delimiter || raw.is_empty() {
        return Vec::new();
    }
    raw.split(delimiter).map(str::to_string).collect()
}

/// The object a request addresses: `{id}` split by `delimiter` and resolved against the
/// caller (database namespace, credential subtree), the query parameters, and the caller's
/// catalog.
#[derive(Clone)]
pub struct Target {
    /// The id in the caller's catalog.
    pub id: Vec<String>,
    /// The id as the client wrote it.
    pub path_id: Vec<String>,
    pub params: Params,
    pub catalog: Arc<Catalog>,
    pub caller: Caller,
}

impl Target {
    pub fn name(&self) -> String {
        self.id.join(".")
    }
    /// A body `id` must agree with the path.
    pub fn check_body_id(&self, body_id: &Option<Vec<String>>) -> ApiResult<()> {
        match body_id {
            Some(b) if !b.is_empty() && *b != self.path_id => Err(ApiError::invalid(format!(
                "body id {:?} does not match the id in the path {:?}",
                b, self.path_id
            ))),
            _ => Ok(()),
        }
    }
    /// `branch` from the body if given, else from the query.
    pub fn branch(&self, body_branch: &Option<String>) -> Option<String> {
        crate::store::normalize_branch(body_branch.clone().or_else(|| self.params.string("branch")))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Target {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let params = Params::parse(parts.uri.query());
        let path = Path::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map_err(|e| ApiError::invalid(e.body_text()))?;
        let delimiter = params
            .get("delimiter")
            .filter(|d| !d.is_empty())
            .unwrap_or("$")
            .to_string();
        let raw = path.get("id").map(String::as_str).unwrap_or("");
        let caller = Caller::from_request_parts(parts, state).await?;
        let path_id = split_id(raw, &delimiter);
        Ok(Target {
            id: caller.resolve(&path_id)?,
            path_id,
            params,
            catalog: caller.catalog.clone(),
            caller,
        })
    }
}

/// JSON body; empty (or `null`) means `{}`. Malformed JSON is a 400 in the spec's shape.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(bytes_error)?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| ApiError::invalid("request body is not UTF-8"))?
            .trim();
        let text = if text.is_empty() || text == "null" {
            "{}"
        } else {
            text
        };
        serde_json::from_str(text)
            .map(JsonBody)
            .map_err(|e| ApiError::invalid(format!("malformed JSON body: {e}")))
    }
}

/// A JSON body, or the raw bytes of an Arrow IPC body when its content type says so
/// (`add_columns` takes either: the lancedb client sends new all-null columns as an Arrow
/// schema).
pub enum JsonOrArrow<T> {
    Json(T),
    Arrow(Bytes),
}

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonOrArrow<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let arrow = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("application/vnd.apache.arrow"));
        if arrow {
            let bytes = Bytes::from_request(req, state).await.map_err(bytes_error)?;
            return Ok(Self::Arrow(bytes));
        }
        let JsonBody(body) = JsonBody::from_request(req, state).await?;
        Ok(Self::Json(body))
    }
}

/// Fields every JSON request may carry (spec 2.2).
#[derive(Debug, Default, Deserialize, Clone, schemars::JsonSchema)]
#[serde(default)]
pub struct Common {
    pub id: Option<Vec<String>>,
    pub branch: Option<String>,
    pub identity: Option<serde_json::Value>,
    pub context: Option<HashMap<String, serde_json::Value>>,
}

/// Pagination fields a list request may carry in its body or its query.
pub fn page(
    params: &Params,
    body_limit: Option<i64>,
    body_token: Option<String>,
) -> ApiResult<(Option<usize>, Option<String>)> {
    let limit = match body_limit.or(params.int("limit")?) {
        Some(l) if l < 0 => return Err(ApiError::invalid(format!("limit must be >= 0, got {l}"))),
        Some(l) => Some(l as usize),
        None => None,
    };
    let token = body_token
        .or_else(|| params.string("page_token"))
        .filter(|t| !t.is_empty());
    Ok((limit, token))
}

/// Sorted pagination over names: the token is the last name of the previous page.
pub fn paginate<T>(
    mut items: Vec<(String, T)>,
    limit: Option<usize>,
    token: Option<&str>,
) -> (Vec<(String, T)>, Option<String>) {
    items.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(t) = token {
        items.retain(|(name, _)| name.as_str() > t);
    }
    match limit {
        Some(l) if items.len() > l => {
            items.truncate(l);
            let next = items.last().map(|(n, _)| n.clone());
            (items, next)
        }
        _ => (items, None),
    }
}

/// Which client dialect to answer in where real clients disagree on a response's shape. The
/// lancedb SDK's remote client always sends `x-lancedb-database`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Namespace,
    LanceDb,
}

impl<S: Send + Sync> FromRequestParts<S> for Dialect {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(if parts.headers.contains_key("x-lancedb-database") {
            Dialect::LanceDb
        } else {
            Dialect::Namespace
        })
    }
}

/// A JSON body decoded into an upstream request model, with the path's id in its `id` (a body
/// `id` that disagrees is a 400). `context` and `identity` are the HTTP layer's business and
/// are not passed down.
pub struct Model<T>(pub Target, pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Model<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let target = Target::from_request_parts(&mut parts, state).await?;
        let JsonBody(mut value) =
            JsonBody::<serde_json::Value>::from_request(Request::from_parts(parts, body), state)
                .await?;
        let map = value
            .as_object_mut()
            .ok_or_else(|| ApiError::invalid("the request body must be a JSON object"))?;
        let body_id: Option<Vec<String>> = map
            .get("id")
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        target.check_body_id(&body_id)?;
        map.insert("id".into(), serde_json::json!(target.id));
        map.remove("context");
        map.remove("identity");
        let model = serde_json::from_value(value)
            .map_err(|e| ApiError::invalid(format!("invalid request body: {e}")))?;
        Ok(Model(target, model))
    }
}

/// Property tests: ids split by any delimiter, and any query string, never panic; every
/// refusal is a 400. Cases: proptest's default (256) or `PROPTEST_CASES`.
#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::*;

    /// Query strings from the characters that matter to form decoding.
    fn querylike() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop::sample::select(vec![
                "k",
                "limit",
                "on",
                "=",
                "&",
                "%",
                "%2",
                "%FF",
                "%e2%82",
                "+",
                "1",
                "-",
                "true",
                "null",
                "9223372036854775808",
                "",
            ]),
            0..16,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn split_id_rejoins_to_the_raw_id(raw in any::<String>(), delimiter in prop_oneof![Just("$".to_string()), Just(".".to_string()), "[^\\x00]{1,3}"]) {
            let parts = split_id(&raw, &delimiter);
            if raw.is_empty() || raw == delimiter {
                prop_assert!(parts.is_empty());
            } else {
                prop_assert_eq!(parts.join(&delimiter), raw);
            }
        }

        #[test]
        fn split_id_takes_any_delimiter(raw in any::<String>(), delimiter in any::<String>()) {
            let _ = split_id(&raw, &delimiter);
        }

        #[test]
        fn params_never_panic_and_refuse_with_400(raw in prop_oneof![any::<String>(), querylike()], key in prop_oneof![Just("k".to_string()), Just("limit".to_string()), any::<String>()]) {
            let params = Params::parse(Some(&raw));
            let _ = (params.get(&key), params.all(&key), params.string(&key));
            for e in [params.bool(&key).err(), params.int(&key).err()].into_iter().flatten() {
                prop_assert_eq!(e.status.as_u16(), 400, "{}", e.message);
            }
            if let Err(e) = page(&params, None, None) {
                prop_assert_eq!(e.status.as_u16(), 400, "{}", e.message);
            }
        }
    }
}
