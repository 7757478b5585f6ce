//! `GET /v1/openapi.json`: an OpenAPI 3.1 description of every `/v1` route, built at run time
//! from the route table ([`super::route_table`]) and the Rust types the handlers decode, so it
//! cannot list a route the server lacks or a body field the server does not read.
//!
//! Where each part comes from:
//! - methods, paths and roles: the route table's rows;
//! - path parameters: the `{name}` segments of each path;
//! - the request body: the handler's own extractor types, through [`Describe`] (implemented for
//!   every handler fn whose arguments are all [`Documented`], so a handler taking an extractor
//!   nobody described does not compile). `JsonBody<T>` is a JSON body with `T`'s `schemars`
//!   schema (Lancet's own request structs derive `JsonSchema`); `Model<T>`, an upstream
//!   lance-namespace model, is a JSON body with [`Upstream<T>`]'s schema; `ArrowBody` and a raw
//!   `Bytes` body (table creation) are Arrow IPC; the other extractors add nothing but
//!   `delimiter` (every extractor that resolves `{id}`);
//! - query parameters and the success answer's shape: declared with the route in `build()`
//!   (`.params(..)`, `.answers(..)`), since handlers read the query by name through `Params`;
//! - errors: the spec's JSON error shape (part 7: `type`, `title`, `status`, `detail`,
//!   `instance`, plus upstream's `code` and `error`) for every 4xx and 5xx, which is what
//!   `errors::render_errors` guarantees.
//!
//! **Upstream models.** `lance-namespace-reqwest-client`'s models derive only serde. Deriving
//! `JsonSchema` for them remotely would restate every struct by hand (and drift from the crate
//! version in the lock file); a permissive object would hide the fields. Instead
//! [`Upstream<T>`] reads a model's shape from its own `Deserialize` impl: a tracing
//! deserializer ([`trace`]) answers each call the derive makes with a placeholder and records
//! what was asked for: the struct's name and every field name (renames applied), options
//! (nullable, not required), sequences, string maps, strings, integer widths, booleans, unit
//! enums' variants and nested structs (as shared component schemas). Field descriptions are
//! not visible that way. A model whose `Deserialize` asks for "any" value (none of the request
//! models does) gets a permissive object naming the model.
//!
//! **Dynamic bodies.** `query`, `explain_plan` and `analyze_plan` read their JSON field by field
//! (both dialects, see `query_body`); their schema is the `QueryFields` struct next to that
//! parser, which lists the fields it reads, with the permissive types the lancedb dialect
//! needs.
//!
//! The document needs a credential with role `read`, like every `/v1` route (only `/healthz`
//! and the loopback `/metrics` are open, and both stay outside the document, which describes
//! the route table).

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::OnceLock;

use axum::response::{IntoResponse, Response};
use schemars::{JsonSchema, Schema, SchemaGenerator, generate::SchemaSettings};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::RouteInfo;
use super::arrow_body::ArrowBody;
use super::pipeline::auth::Caller;
use super::pipeline::extract::{Dialect, JsonBody, Model, Target};

/// The media type of Arrow IPC stream bodies (requests and answers).
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";
/// The media type of Arrow IPC file answers (the default of `query`).
pub const ARROW_FILE: &str = "application/vnd.apache.arrow.file";

/// What the route table records about a route beyond method, path and role.
#[derive(Debug, Clone, Default)]
pub struct Operation {
    pub body: Body,
    /// Query parameters (path parameters come from the path).
    pub params: Vec<Param>,
    pub answer: Answer,
}

impl Operation {
    /// The description of a handler from its extractor types.
    pub fn of<H: Describe<T>, T>() -> Self {
        let mut op = Operation::default();
        H::describe(&mut op);
        op
    }

    pub fn add_param(&mut self, param: Param) {
        if !self.params.iter().any(|p| p.name == param.name) {
            self.params.push(param);
        }
    }
}

/// A JSON Schema maker for a request body type.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// A request body's kind.
#[derive(Debug, Clone, Copy, Default)]
pub enum Body {
    #[default]
    None,
    /// `application/json`, optional (an empty body is `{}`).
    Json(SchemaFn),
    /// An Arrow IPC stream (or file), required.
    Arrow,
    /// Any bytes (`application/octet-stream`), required: a model file.
    Octets,
}

/// A success answer's shape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Answer {
    /// A JSON object (its `context` added by the context mapping).
    #[default]
    Object,
    /// A bare JSON integer >= 0 (`count_rows`, spec 4.5).
    Count,
    /// Arrow IPC: file format, or stream format when `Accept` asks for it.
    Arrow,
    /// Arrow IPC stream format.
    ArrowStream,
    /// A JSON object; 201 or 202 (with a `job_id`) when work was started in the background.
    Started,
    /// A JSON object with a `job_id`, always 202: the work runs in the background.
    Accepted,
    /// A JSON object, or (to the lancedb SDK, which sends `x-lancedb-database`) a JSON string.
    ObjectOrString,
    /// Raw bytes, whole (200) or a range of them (206); 204 for a null value, 416 for a range
    /// past its end.
    Bytes,
}

/// A query parameter.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    pub name: &'static str,
    /// A header, not a query parameter.
    pub header: bool,
    pub kind: Kind,
    pub required: bool,
    pub description: &'static str,
}

/// A query parameter's type.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Text,
    /// An integer >= 0.
    Count,
    /// `true`/`false` (also `1`/`0`).
    Flag,
    /// One of these words (matched ignoring case).
    Choice(&'static [&'static str]),
    /// A repeatable text parameter (`on=a&on=b`).
    Repeated,
    /// A JSON object of strings, as text.
    JsonObject,
}

impl Param {
    const fn new(name: &'static str, kind: Kind, description: &'static str) -> Self {
        Param {
            name,
            header: false,
            kind,
            required: false,
            description,
        }
    }

    fn to_json(self) -> Value {
        let (schema, extra) = match self.kind {
            Kind::Text => (json!({"type": "string"}), json!({})),
            Kind::Count => (json!({"type": "integer", "minimum": 0}), json!({})),
            Kind::Flag => (json!({"type": "boolean"}), json!({})),
            Kind::Choice(words) => (json!({"type": "string", "enum": words}), json!({})),
            Kind::Repeated => (
                json!({"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}),
                json!({"style": "form", "explode": true}),
            ),
            Kind::JsonObject => (
                json!({"type": "string", "contentMediaType": "application/json",
                       "contentSchema": {"type": "object", "additionalProperties": {"type": "string"}}}),
                json!({}),
            ),
        };
        let mut out = json!({
            "name": self.name,
            "in": if self.header { "header" } else { "query" },
            "required": self.required,
            "description": self.description,
            "schema": schema,
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            out[k] = v.clone();
        }
        out
    }
}

pub mod params;

/// What an extractor contributes to its route's description.
pub trait Documented {
    fn document(_op: &mut Operation) {}
}

/// The description of a handler fn, from its argument types: implemented for every fn whose
/// arguments are all [`Documented`] (`T` is axum's `Handler` marker tuple).
pub trait Describe<T> {
    fn describe(op: &mut Operation);
}

impl<F, Fut> Describe<((),)> for F
where
    F: FnOnce() -> Fut,
{
    fn describe(_op: &mut Operation) {}
}

macro_rules! describe_fn {
    ($($ty:ident),+) => {
        impl<F, Fut, M, $($ty: Documented),+> Describe<(M, $($ty,)+)> for F
        where
            F: FnOnce($($ty),+) -> Fut,
        {
            fn describe(op: &mut Operation) {
                $($ty::document(op);)+
            }
        }
    };
}
describe_fn!(T1);
describe_fn!(T1, T2);
describe_fn!(T1, T2, T3);
describe_fn!(T1, T2, T3, T4);
describe_fn!(T1, T2, T3, T4, T5);
describe_fn!(T1, T2, T3, T4, T5, T6);
describe_fn!(T1, T2, T3, T4, T5, T6, T7);
describe_fn!(T1, T2, T3, T4, T5, T6, T7, T8);

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

impl<S> Documented for axum::extract::State<S> {}
impl<T> Documented for axum::extract::Path<T> {}
impl Documented for axum::extract::RawQuery {}
impl Documented for axum::http::HeaderMap {}
impl Documented for Caller {}
impl Documented for super::pipeline::auth::OperatorCaller {}
impl Documented for Dialect {}

impl Documented for Target {
    fn document(op: &mut Operation) {
        op.add_param(params::DELIMITER);
    }
}

impl<T: JsonSchema> Documented for JsonBody<T> {
    fn document(op: &mut Operation) {
        op.body = Body::Json(schema_of::<T>);
    }
}

/// Documented as its JSON form; the Arrow form is the lancedb client's (see the README).
impl<T: JsonSchema> Documented for super::pipeline::extract::JsonOrArrow<T> {
    fn document(op: &mut Operation) {
        op.body = Body::Json(schema_of::<T>);
    }
}

impl<T: DeserializeOwned> Documented for Model<T> {
    fn document(op: &mut Operation) {
        op.add_param(params::DELIMITER);
        op.body = Body::Json(schema_of::<Upstream<T>>);
    }
}

impl Documented for ArrowBody {
    fn document(op: &mut Operation) {
        op.body = Body::Arrow;
    }
}

/// A raw body: the one handler taking it (table creation) decodes it as Arrow IPC.
impl Documented for bytes::Bytes {
    fn document(op: &mut Operation) {
        op.body = Body::Arrow;
    }
}

/// The JSON Schema of an upstream lance-namespace model `T`, read from its `Deserialize` impl
/// (see the module doc).
pub struct Upstream<T>(PhantomData<T>);

impl<T: DeserializeOwned> Upstream<T> {
    /// The model's name and schema, with the schemas of the structs it nests.
    fn traced() -> Result<(String, Value, Map<String, Value>), trace::Untraceable> {
        let mut defs = Map::new();
        let mut top = Value::Null;
        T::deserialize(trace::Tracer::new(&mut top, &mut defs))?;
        let name = top["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix(trace::REF_PREFIX))
            .map(str::to_string)
            .ok_or_else(|| trace::Untraceable("the model is not a struct".into()))?;
        let schema = defs.remove(&name).unwrap_or_default();
        Ok((name, schema, defs))
    }

    fn fallback_name() -> String {
        std::any::type_name::<T>()
            .rsplit("::")
            .next()
            .unwrap_or("Model")
            .to_string()
    }
}

impl<T: DeserializeOwned> JsonSchema for Upstream<T> {
    fn schema_name() -> Cow<'static, str> {
        Cow::Owned(Self::traced().map_or_else(|_| Self::fallback_name(), |(name, ..)| name))
    }

    fn schema_id() -> Cow<'static, str> {
        Cow::Owned(format!("lancet::Upstream<{}>", std::any::type_name::<T>()))
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let mut schema = match Self::traced() {
            Ok((_, schema, nested)) => {
                for (name, def) in nested {
                    generator.definitions_mut().insert(name, def);
                }
                schema
            }
            Err(e) => json!({
                "type": "object",
                "title": Self::fallback_name(),
                "description": format!("fields not traceable: {e}"),
            }),
        };
        schema["description"] = json!(format!(
            "lance-namespace model `{}` (fields and types read from its serde Deserialize impl)",
            std::any::type_name::<T>()
        ));
        Schema::try_from(schema).unwrap_or_default()
    }
}

/// One element of batch-commit's `operations`: an object with exactly one of these keys (as
/// `batch::parse_op` reads it).
#[derive(JsonSchema)]
#[allow(dead_code)]
pub struct BatchOperation {
    declare_table: Option<Upstream<lance_namespace::models::DeclareTableRequest>>,
    deregister_table: Option<Upstream<lance_namespace::models::DeregisterTableRequest>>,
    create_table_version: Option<Upstream<lance_namespace::models::CreateTableVersionRequest>>,
    delete_table_versions:
        Option<Upstream<lance_namespace::models::BatchDeleteTableVersionsRequest>>,
}

pub mod trace;

/// The spec's JSON error shape (part 7) plus upstream's `code` and `error`.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "title": "Error",
        "description": "Every non-2xx answer (spec part 7).",
        "required": ["type", "title", "status", "detail", "instance", "code", "error"],
        "properties": {
            "type": {"type": "string", "pattern": "^/errors/", "description": "Error type path."},
            "title": {"type": "string", "description": "Short summary."},
            "status": {"type": "integer", "minimum": 400, "maximum": 599, "description": "HTTP status code."},
            "detail": {"type": "string", "description": "Detail text; may be empty."},
            "instance": {"type": "string", "description": "Path of the request."},
            "code": {"type": "integer", "minimum": 0, "description": "lance-namespace error code."},
            "error": {"type": "string", "description": "Same as detail (upstream clients read it)."},
        },
    })
}

fn success(answer: Answer) -> Value {
    match answer {
        Answer::ObjectOrString => json!({
            "description": "A JSON object; a JSON string when `x-lancedb-database` is sent.",
            "content": {"application/json": {"schema": {"type": ["object", "string"]}}},
        }),
        Answer::Object | Answer::Started | Answer::Accepted => json!({
            "description": "A JSON object.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }),
        Answer::Count => json!({
            "description": "A bare JSON integer.",
            "content": {"application/json": {"schema": {"type": "integer", "minimum": 0}}},
        }),
        Answer::Arrow => json!({
            "description": "Arrow IPC: file format, or stream format when `Accept` names it.",
            "content": {ARROW_FILE: {}, ARROW_STREAM: {}},
        }),
        Answer::ArrowStream => json!({
            "description": "Arrow IPC stream format.",
            "content": {ARROW_STREAM: {}},
        }),
        Answer::Bytes => json!({
            "description": "The value's bytes.",
            "content": {"application/octet-stream": {}},
        }),
    }
}

fn responses(answer: Answer) -> Value {
    let error = json!({"$ref": "#/components/responses/Error"});
    let ok = if answer == Answer::Accepted {
        "202"
    } else {
        "200"
    };
    let mut all = json!({
        ok: success(answer),
        "400": error, "401": error, "403": error, "404": error, "409": error, "503": error,
        "4XX": error, "5XX": error,
    });
    if answer == Answer::Started {
        all["201"] = success(answer);
        all["202"] = success(answer);
    }
    if answer == Answer::Bytes {
        all["206"] = json!({
            "description": "The range asked for (`Content-Range` says which).",
            "content": {"application/octet-stream": {}},
        });
        all["204"] = json!({"description": "The value is null."});
        all["416"] = json!({"description": "The range starts past the value's end (`Content-Range: bytes */<size>`)."});
    }
    all
}

fn path_params(path: &str) -> Vec<Value> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| {
            let description = match name {
                "id" => "Object id: its parts joined by `delimiter`; the delimiter alone is the root namespace.",
                "index_name" => "Index name.",
                _ => "",
            };
            json!({
                "name": name, "in": "path", "required": true, "description": description,
                "schema": {"type": "string", "minLength": 1},
            })
        })
        .collect()
}

fn operation_id(method: &str, path: &str) -> String {
    let words: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty() && *s != "v1")
        .map(|s| {
            s.trim_matches(|c| c == '{' || c == '}')
                .replace(['.', '-'], "_")
        })
        .collect();
    format!("{}_{}", method.to_ascii_lowercase(), words.join("_"))
}

fn operation(route: &RouteInfo, generator: &mut SchemaGenerator) -> Value {
    let doc = &route.doc;
    let mut parameters = path_params(route.path);
    parameters.extend(doc.params.iter().map(|p| p.to_json()));
    parameters.extend([params::DATABASE, params::LANCEDB_DATABASE].map(Param::to_json));
    let tag = route
        .path
        .split('/')
        .nth(2)
        .unwrap_or("v1")
        .trim_end_matches(".json");
    let mut out = json!({
        "operationId": operation_id(route.method, route.path),
        "tags": [tag],
        "description": format!("Needs a credential with role `{}` or above.", route.role),
        "x-lancet-role": route.role.to_string(),
        "parameters": parameters,
        "responses": responses(doc.answer),
    });
    // GET routes take their arguments from the query; a body is ignored.
    if route.method == "POST" {
        match doc.body {
            Body::None => {}
            Body::Json(schema) => {
                out["requestBody"] = json!({
                    "required": false,
                    "description": "JSON; an empty body is `{}`.",
                    "content": {"application/json": {"schema": schema(generator).to_value()}},
                })
            }
            Body::Octets => {
                out["requestBody"] = json!({
                    "required": true,
                    "description": "The file's bytes.",
                    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                })
            }
            Body::Arrow => {
                out["requestBody"] = json!({
                    "required": true,
                    "description": "Arrow IPC stream (LZ4/ZSTD-compressed buffers accepted) or file.",
                    "content": {ARROW_STREAM: {"schema": {"type": "string", "contentMediaType": ARROW_STREAM}}},
                })
            }
        }
    }
    out
}

/// The OpenAPI document of [`super::route_table`].
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .into_generator();
    let mut paths = Map::new();
    for route in super::route_table() {
        let entry = paths
            .entry(route.path)
            .or_insert_with(|| Value::Object(Map::new()));
        entry[route.method.to_ascii_lowercase()] = operation(&route, &mut generator);
    }
    let mut schemas = generator.take_definitions(true);
    // A body struct without its own doc takes the description of the fields it flattens in
    // (`Common`'s); drop that borrowed text.
    let common =
        SchemaGenerator::default().into_root_schema_for::<super::pipeline::extract::Common>();
    if let Some(borrowed) = common.get("description") {
        for (name, schema) in schemas.iter_mut() {
            if name != "Common" && schema.get("description") == Some(borrowed) {
                schema.as_object_mut().map(|o| o.remove("description"));
            }
        }
    }
    schemas.insert("Error".into(), error_schema());
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Lancet",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The Lance Namespace REST API as Lancet serves it. Generated from the \
                server's route table and request types.",
        },
        "security": [{"bearer": []}, {"apiKey": []}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "responses": {
                "Error": {
                    "description": "An error in the spec's shape.",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
                },
            },
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key, or an OAuth 2.0 access token in JWT form.",
                },
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
    })
}

/// `GET /v1/openapi.json`. Built once; sent verbatim (no `context` is added).
pub async fn serve() -> Response {
    static DOCUMENT: OnceLock<Value> = OnceLock::new();
    let mut response = axum::Json(DOCUMENT.get_or_init(document)).into_response();
    response
        .extensions_mut()
        .insert(super::pipeline::context::Verbatim);
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use lance_namespace::models::{RegisterTableRequest, RenameTableRequest};

    fn upstream<T: DeserializeOwned>() -> (Value, Map<String, Value>) {
        let mut generator = SchemaSettings::draft2020_12()
            .with(|s| s.definitions_path = "/components/schemas".into())
            .into_generator();
        let schema = generator.subschema_for::<Upstream<T>>().to_value();
        (schema, generator.take_definitions(false))
    }

    #[test]
    fn upstream_models_are_traced_from_their_deserialize_impl() {
        let (schema, defs) = upstream::<RenameTableRequest>();
        assert_eq!(
            schema["$ref"], "#/components/schemas/RenameTableRequest",
            "{defs:?}"
        );
        let model = &defs["RenameTableRequest"];
        assert_eq!(model["required"], json!(["new_table_name"]), "{model:#}");
        assert_eq!(model["properties"]["new_table_name"]["type"], "string");
        assert_eq!(
            model["properties"]["new_namespace_id"],
            json!({"type": ["array", "null"], "items": {"type": "string"}})
        );
        assert_eq!(
            model["properties"]["context"]["additionalProperties"]["type"],
            "string"
        );
        // Nested structs are shared components.
        assert_eq!(
            model["properties"]["identity"]["anyOf"][0]["$ref"],
            "#/components/schemas/Identity"
        );
        assert!(defs["Identity"]["properties"]["api_key"].is_object());
        let (_, defs) = upstream::<RegisterTableRequest>();
        assert_eq!(
            defs["RegisterTableRequest"]["required"],
            json!(["location"])
        );
    }

    #[test]
    fn every_route_is_described() {
        let doc = document();
        let table = super::super::route_table();
        for route in &table {
            let op = &doc["paths"][route.path][route.method.to_ascii_lowercase()];
            assert!(op.is_object(), "{} {} missing", route.method, route.path);
        }
        // Every $ref points at a component.
        let text = doc.to_string();
        for piece in text.split("\"$ref\":\"#/components/schemas/").skip(1) {
            let name = &piece[..piece.find('"').unwrap()];
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "dangling $ref {name}"
            );
        }
    }
}
