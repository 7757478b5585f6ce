//! Parsing of query bodies in both dialects: the spec's model (`vector: {single_vector}`,
//! `columns: {column_names}`, `full_text_query: {string_query}`) and the lancedb SDK's (bare
//! vector arrays, `columns` as a list or a map, `full_text_query: {query, columns}`, explicit
//! nulls, extra fields). Only what is truly invalid is rejected.

use lance::dataset::scanner::ColumnOrdering;
use lance_index::scalar::FullTextSearchQuery;
use lance_index::scalar::inverted::query::FtsQuery;
use lance_index::vector::ApproxMode;
use lance_linalg::distance::DistanceType;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::store::{Projection, QuerySpec, VectorQuery};

fn field<'a>(body: &'a Value, key: &str) -> Option<&'a Value> {
    body.get(key).filter(|v| !v.is_null())
}

fn uint(body: &Value, key: &str) -> ApiResult<Option<usize>> {
    match field(body, key) {
        None => Ok(None),
        Some(v) => match v.as_i64() {
            Some(n) if n < 0 => Err(ApiError::invalid(format!("'{key}' must be >= 0, got {n}"))),
            Some(n) => Ok(Some(n as usize)),
            // lancedb sends an unbounded k as a very large number.
            None if v.as_u64().is_some()
                || v.as_f64().is_some_and(|f| f >= 0.0 && f.fract() == 0.0) =>
            {
                Ok(Some(usize::MAX / 2))
            }
            None => Err(ApiError::invalid(format!(
                "'{key}' must be a non-negative integer"
            ))),
        },
    }
}

fn boolean(body: &Value, key: &str) -> ApiResult<Option<bool>> {
    match field(body, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::invalid(format!("'{key}' must be a boolean"))),
    }
}

fn float(body: &Value, key: &str) -> ApiResult<Option<f32>> {
    match field(body, key) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(|f| Some(f as f32))
            .ok_or_else(|| ApiError::invalid(format!("'{key}' must be a number"))),
    }
}

fn string(body: &Value, key: &str) -> ApiResult<Option<String>> {
    match field(body, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(format!("'{key}' must be a string"))),
    }
}

fn numbers(v: &Value, what: &str) -> ApiResult<Vec<f32>> {
    let arr = v
        .as_array()
        .ok_or_else(|| ApiError::invalid(format!("{what} must be an array of numbers")))?;
    arr.iter()
        .map(|x| {
            x.as_f64()
                .map(|f| f as f32)
                .ok_or_else(|| ApiError::invalid(format!("{what} must contain only numbers")))
        })
        .collect()
}

fn vectors(v: &Value, what: &str) -> ApiResult<Vec<Vec<f32>>> {
    let arr = v.as_array().ok_or_else(|| {
        ApiError::invalid(format!("{what} must be an array of arrays of numbers"))
    })?;
    arr.iter().map(|x| numbers(x, what)).collect()
}

/// `(vectors, multi)`; None when there is no vector search.
fn parse_vector(v: &Value) -> ApiResult<Option<(Vec<Vec<f32>>, bool)>> {
    match v {
        Value::Null => Ok(None),
        Value::Object(map) => {
            let single = map.get("single_vector").filter(|v| !v.is_null());
            let multi = map.get("multi_vector").filter(|v| !v.is_null());
            match (single, multi) {
                (Some(_), Some(_)) => Err(ApiError::invalid(
                    "give either vector.single_vector or vector.multi_vector, not both",
                )),
                // An empty vector is a plain scan, as upstream's namespace reads it (Geneva reads
                // its tables with `{"single_vector": []}`).
                (Some(Value::Array(a)), None) | (None, Some(Value::Array(a))) if a.is_empty() => {
                    Ok(None)
                }
                (Some(s), None) => Ok(Some((vec![numbers(s, "vector.single_vector")?], false))),
                (None, Some(m)) => Ok(Some((vectors(m, "vector.multi_vector")?, true))),
                (None, None) => Ok(None),
            }
        }
        Value::Array(items) if items.is_empty() => Ok(None),
        Value::Array(items) if items[0].is_array() => Ok(Some((vectors(v, "vector")?, true))),
        Value::Array(_) => Ok(Some((vec![numbers(v, "vector")?], false))),
        _ => Err(ApiError::invalid(
            "vector must be an object with single_vector or multi_vector, or an array",
        )),
    }
}

fn parse_columns(v: &Value) -> ApiResult<Option<Projection>> {
    let names = |v: &Value| -> ApiResult<Vec<String>> {
        v.as_array()
            .ok_or_else(|| ApiError::invalid("column_names must be an array of strings"))?
            .iter()
            .map(|s| {
                s.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ApiError::invalid("column names must be strings"))
            })
            .collect()
    };
    let aliases = |v: &Value| -> ApiResult<Vec<(String, String)>> {
        v.as_object()
            .ok_or_else(|| {
                ApiError::invalid("column_aliases must be an object of alias -> expression")
            })?
            .iter()
            .map(|(k, e)| {
                let e = e
                    .as_str()
                    .ok_or_else(|| ApiError::invalid("column expressions must be strings"))?;
                crate::sql_guard::check(e, &format!("columns[{k}]"))?;
                Ok((k.clone(), e.to_string()))
            })
            .collect()
    };
    match v {
        Value::Null => Ok(None),
        Value::Array(_) => Ok(Some(Projection::Names(names(v)?))),
        Value::Object(map)
            if map.contains_key("column_names") || map.contains_key("column_aliases") =>
        {
            let n = map.get("column_names").filter(|v| !v.is_null());
            let a = map.get("column_aliases").filter(|v| !v.is_null());
            match (n, a) {
                (Some(_), Some(_)) => Err(ApiError::invalid(
                    "give either columns.column_names or columns.column_aliases, not both",
                )),
                (Some(n), None) => Ok(Some(Projection::Names(names(n)?))),
                (None, Some(a)) => Ok(Some(Projection::Aliases(aliases(a)?))),
                (None, None) => Ok(None),
            }
        }
        Value::Object(_) => Ok(Some(Projection::Aliases(aliases(v)?))),
        _ => Err(ApiError::invalid(
            "columns must be an object, an array of names, or a map of alias -> expression",
        )),
    }
}

fn structured(v: &Value) -> ApiResult<FtsQuery> {
    let inner = v.get("query").filter(|q| q.is_object()).unwrap_or(v);
    serde_json::from_value(inner.clone())
        .map_err(|e| ApiError::invalid(format!("invalid structured full-text query: {e}")))
}

fn parse_fts(v: &Value) -> ApiResult<Option<FullTextSearchQuery>> {
    let Some(map) = v.as_object() else {
        return if v.is_null() {
            Ok(None)
        } else {
            Err(ApiError::invalid("full_text_query must be an object"))
        };
    };
    let string_q = map.get("string_query").filter(|v| !v.is_null());
    let structured_q = map.get("structured_query").filter(|v| !v.is_null());
    let (query, columns) = match (string_q, structured_q) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "give either string_query or structured_query, not both",
            ));
        }
        (Some(s), None) => {
            let text = s
                .get("query")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::invalid("string_query.query must be a string"))?;
            (
                FullTextSearchQuery::new(text.to_string()),
                s.get("columns").cloned(),
            )
        }
        (None, Some(q)) => (FullTextSearchQuery::new_query(structured(q)?), None),
        // lancedb dialect: {"query": "text", "columns": [...]} or {"query": <structured>}
        (None, None) => match map.get("query") {
            Some(Value::String(text)) => (
                FullTextSearchQuery::new(text.clone()),
                map.get("columns").cloned(),
            ),
            Some(q @ Value::Object(_)) => (FullTextSearchQuery::new_query(structured(q)?), None),
            _ => return Ok(None),
        },
    };
    let columns: Vec<String> = match columns {
        Some(Value::Array(cols)) => cols
            .iter()
            .filter_map(|c| c.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    if columns.is_empty() {
        Ok(Some(query))
    } else {
        query
            .with_columns(&columns)
            .map(Some)
            .map_err(ApiError::from)
    }
}

/// lancedb's `order_by`: `[{"column_name", "ascending", "nulls_first"}]` (`ascending` defaults
/// to true, `nulls_first` to false, as lancedb's own defaults).
fn parse_order_by(v: &Value) -> ApiResult<Option<Vec<ColumnOrdering>>> {
    let items = v.as_array().ok_or_else(|| {
        ApiError::invalid("order_by must be an array of {column_name, ascending, nulls_first}")
    })?;
    let order = items
        .iter()
        .map(|item| {
            let Some(obj) = item.as_object() else {
                return Err(ApiError::invalid(
                    "order_by entries must be objects {column_name, ascending, nulls_first}",
                ));
            };
            if let Some(k) = obj
                .keys()
                .find(|k| !["column_name", "ascending", "nulls_first"].contains(&k.as_str()))
            {
                return Err(ApiError::invalid(format!(
                    "order_by: unknown field '{k}' (use column_name, ascending, nulls_first)"
                )));
            }
            let column_name = match string(item, "column_name")? {
                Some(c) if !c.is_empty() => c,
                _ => return Err(ApiError::invalid("order_by: column_name is required")),
            };
            Ok(ColumnOrdering {
                column_name,
                ascending: boolean(item, "ascending")?.unwrap_or(true),
                nulls_first: boolean(item, "nulls_first")?.unwrap_or(false),
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok((!order.is_empty()).then_some(order))
}

fn parse_approx_mode(name: &str) -> ApiResult<ApproxMode> {
    match name.to_ascii_lowercase().as_str() {
        "fast" => Ok(ApproxMode::Fast),
        "normal" => Ok(ApproxMode::Normal),
        "accurate" => Ok(ApproxMode::Accurate),
        _ => Err(ApiError::invalid(format!(
            "unknown approx_mode '{name}': use fast, normal or accurate"
        ))),
    }
}

/// Every field a query body may carry: the spec's model, the lancedb remote clients' (Python
/// and TypeScript) and Lancet's own. Any other is refused by name, so that nothing a client
/// asks for is silently dropped.
const QUERY_FIELDS: &[&str] = &[
    "identity",
    "context",
    "id",
    "branch",
    "version",
    "vector",
    "vector_column",
    "query_text",
    "distance_type",
    "nprobes",
    "minimum_nprobes",
    "maximum_nprobes",
    "ef",
    "refine_factor",
    "lower_bound",
    "upper_bound",
    "bypass_vector_index",
    "approx_mode",
    "full_text_query",
    "filter",
    "prefilter",
    "k",
    "limit",
    "offset",
    "order_by",
    "columns",
    "with_row_id",
    "fast_search",
    "use_lsm",
];

pub fn parse_distance(name: &str) -> ApiResult<DistanceType> {
    DistanceType::try_from(name.to_ascii_lowercase().as_str()).map_err(|_| {
        ApiError::invalid(format!(
            "unknown distance_type '{name}': use l2, cosine, dot or hamming"
        ))
    })
}

/// A query body as received: [`parse`] reads it field by field (both dialects). Its JSON Schema
/// (for `/v1/openapi.json`) is [`QueryFields`]'s.
#[derive(serde::Deserialize)]
#[serde(transparent)]
pub struct QueryBody(pub Value);

/// An `explain_plan` / `analyze_plan` body: the query in `query`, or inline. Schema:
/// [`PlanFields`].
#[derive(serde::Deserialize)]
#[serde(transparent)]
pub struct PlanBody(pub Value);

impl schemars::JsonSchema for QueryBody {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "QueryRequest".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        QueryFields::json_schema(generator)
    }
}

impl schemars::JsonSchema for PlanBody {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "QueryPlanRequest".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        PlanFields::json_schema(generator)
    }
}

/// The fields [`parse`] (and the handlers' table lookup) read from a query body, with the
/// types both dialects may send. Only a schema: the body is read as JSON.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
pub struct QueryFields {
    #[schemars(flatten)]
    common: super::pipeline::extract::Common,
    /// Table version to read (default: the latest).
    #[schemars(range(min = 0))]
    version: Option<i64>,
    vector: Option<VectorField>,
    /// The vector column (default: the only one).
    #[schemars(length(min = 1))]
    vector_column: Option<String>,
    /// Lancet: text to search an embedding column with, embedded by the model that computed
    /// the column (`vector_column`, or the table's only embedding column); instead of `vector`.
    query_text: Option<String>,
    /// l2, cosine, dot or hamming.
    distance_type: Option<String>,
    nprobes: Option<u64>,
    minimum_nprobes: Option<u64>,
    maximum_nprobes: Option<u64>,
    ef: Option<u64>,
    refine_factor: Option<u64>,
    lower_bound: Option<f32>,
    upper_bound: Option<f32>,
    bypass_vector_index: Option<bool>,
    full_text_query: Option<FullTextField>,
    /// SQL filter.
    filter: Option<String>,
    prefilter: Option<bool>,
    /// Most rows returned.
    k: Option<u64>,
    /// Another name for `k` (it must agree with `k` when both are given).
    limit: Option<u64>,
    offset: Option<u64>,
    columns: Option<ColumnsField>,
    with_row_id: Option<bool>,
    fast_search: Option<bool>,
    /// Sort the answer by these columns before `k` and `offset` (lancedb's `order_by`).
    order_by: Option<Vec<OrderField>>,
    /// fast, normal or accurate: lance's speed / recall trade-off for a vector search.
    approx_mode: Option<String>,
    /// Read the LSM tiers (memtables, flushed generations) of a table with an LSM write
    /// spec: the default for such a table; `false` reads its base table only.
    use_lsm: Option<bool>,
}

/// One `order_by` entry.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct OrderField {
    column_name: String,
    /// Default true.
    ascending: Option<bool>,
    /// Default false.
    nulls_first: Option<bool>,
}

/// `vector`: the spec's object (one of the two), or a bare array (lancedb).
#[derive(schemars::JsonSchema)]
#[schemars(untagged)]
#[allow(dead_code)]
enum VectorField {
    Spec {
        single_vector: Option<Vec<f32>>,
        multi_vector: Option<Vec<Vec<f32>>>,
    },
    Single(Vec<f32>),
    Multi(Vec<Vec<f32>>),
}

/// `columns`: the spec's object (one of the two), a list of names, or alias -> expression.
#[derive(schemars::JsonSchema)]
#[schemars(untagged)]
#[allow(dead_code)]
enum ColumnsField {
    Spec {
        column_names: Option<Vec<String>>,
        column_aliases: Option<std::collections::HashMap<String, String>>,
    },
    Names(Vec<String>),
    Aliases(std::collections::HashMap<String, String>),
}

/// `full_text_query`: `string_query` or `structured_query` (a lance FTS query object), or the
/// lancedb dialect's `query` (text or structured) with `columns`.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct FullTextField {
    string_query: Option<StringQuery>,
    structured_query: Option<serde_json::Map<String, Value>>,
    query: Option<Value>,
    columns: Option<Vec<String>>,
}

#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
struct StringQuery {
    query: String,
    columns: Option<Vec<String>>,
}

/// The fields `explain_plan` and `analyze_plan` read: a query inline or in `query`.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
pub struct PlanFields {
    #[schemars(flatten)]
    inline: QueryFields,
    query: Option<QueryBody>,
    verbose: Option<bool>,
}

/// `k`, or `limit` as clients that think of a query as a scan send it; never silently one of
/// two that disagree.
fn row_limit(body: &Value) -> ApiResult<Option<usize>> {
    match (uint(body, "k")?, uint(body, "limit")?) {
        (Some(k), Some(limit)) if k != limit => Err(ApiError::invalid(format!(
            "k ({k}) and limit ({limit}) disagree; send one of them"
        ))),
        (k, limit) => Ok(k.or(limit)),
    }
}

pub fn parse(body: &Value) -> ApiResult<QuerySpec> {
    let Some(fields) = body.as_object() else {
        return Err(ApiError::invalid("the query body must be a JSON object"));
    };
    if let Some(unknown) = fields.keys().find(|k| !QUERY_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!(
            "'{unknown}' is not a query field this server supports"
        )));
    }
    // The query route embeds it before parsing; elsewhere (plans) it is not read.
    if fields.get("query_text").is_some_and(|t| !t.is_null()) {
        return Err(ApiError::invalid(
            "query_text is read by /query only: send the vector here",
        ));
    }
    let vector = match field(body, "vector") {
        Some(v) => parse_vector(v)?,
        None => None,
    };
    let vector = match vector {
        None => None,
        Some((vectors, multi)) => Some(VectorQuery {
            vectors,
            multi,
            column: match string(body, "vector_column")? {
                Some(c) if c.is_empty() => {
                    return Err(ApiError::invalid("vector_column must not be empty"));
                }
                c => c,
            },
            distance_type: string(body, "distance_type")?
                .map(|d| parse_distance(&d))
                .transpose()?,
            nprobes: uint(body, "nprobes")?,
            minimum_nprobes: uint(body, "minimum_nprobes")?,
            maximum_nprobes: uint(body, "maximum_nprobes")?,
            ef: uint(body, "ef")?,
            refine_factor: uint(body, "refine_factor")?.map(|r| r.min(u32::MAX as usize) as u32),
            lower_bound: float(body, "lower_bound")?,
            upper_bound: float(body, "upper_bound")?,
            bypass_vector_index: boolean(body, "bypass_vector_index")?.unwrap_or(false),
            approx_mode: string(body, "approx_mode")?
                .map(|m| parse_approx_mode(&m))
                .transpose()?,
        }),
    };
    if vector.is_none() {
        // Validate these even without a vector, so a typo is not silently ignored.
        if let Some(d) = string(body, "distance_type")? {
            parse_distance(&d)?;
        }
        if let Some(m) = string(body, "approx_mode")? {
            parse_approx_mode(&m)?;
        }
        uint(body, "nprobes")?;
    }
    Ok(QuerySpec {
        vector,
        fts: field(body, "full_text_query")
            .map(parse_fts)
            .transpose()?
            .flatten(),
        filter: match string(body, "filter")?.filter(|f| !f.trim().is_empty()) {
            Some(f) => {
                crate::sql_guard::check(&f, "filter")?;
                Some(f)
            }
            None => None,
        },
        prefilter: boolean(body, "prefilter")?,
        k: row_limit(body)?,
        offset: uint(body, "offset")?,
        projection: field(body, "columns")
            .map(parse_columns)
            .transpose()?
            .flatten(),
        with_row_id: boolean(body, "with_row_id")?.unwrap_or(false),
        fast_search: boolean(body, "fast_search")?.unwrap_or(false),
        order_by: field(body, "order_by")
            .map(parse_order_by)
            .transpose()?
            .flatten(),
        use_lsm: boolean(body, "use_lsm")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_both_dialects() {
        let spec = parse(&json!({"vector": {"single_vector": [1.0, 2.0]}, "k": 3})).unwrap();
        assert_eq!(spec.vector.unwrap().vectors, vec![vec![1.0, 2.0]]);
        let spec =
            parse(&json!({"vector": [1.0, 2.0], "k": 3, "ef": null, "columns": ["a"]})).unwrap();
        assert!(!spec.vector.unwrap().multi);
        let spec = parse(&json!({"vector": {}, "k": 3})).unwrap();
        assert!(spec.vector.is_none());
        // Geneva's plain read: an empty vector is no vector search.
        let spec = parse(&json!({"vector": {"single_vector": []}, "k": 3})).unwrap();
        assert!(spec.vector.is_none());
        let spec = parse(&json!({"vector": [], "k": 3})).unwrap();
        assert!(spec.vector.is_none());
        let spec = parse(&json!({
            "order_by": [{"column_name": "id", "ascending": false, "nulls_first": true}],
            "vector": [1.0], "approx_mode": "accurate",
        }))
        .unwrap();
        let order = spec.order_by.unwrap().remove(0);
        assert_eq!(
            (
                order.column_name.as_str(),
                order.ascending,
                order.nulls_first
            ),
            ("id", false, true)
        );
        assert_eq!(spec.vector.unwrap().approx_mode, Some(ApproxMode::Accurate));
        let spec =
            parse(&json!({"full_text_query": {"columns": ["t"], "query": "hello"}})).unwrap();
        assert!(spec.fts.is_some());
    }

    #[test]
    fn rejects_ambiguous_or_negative() {
        assert!(
            parse(&json!({"vector": {"single_vector": [1.0], "multi_vector": [[1.0]]}})).is_err()
        );
        assert!(
            parse(&json!({"columns": {"column_names": ["a"], "column_aliases": {"b": "a"}}}))
                .is_err()
        );
        assert!(parse(&json!({"k": -1})).is_err());
        assert_eq!(parse(&json!({"limit": 7})).unwrap().k, Some(7));
        assert_eq!(parse(&json!({"k": 7, "limit": 7})).unwrap().k, Some(7));
        assert!(parse(&json!({"k": 7, "limit": 8})).is_err());
        assert!(parse(&json!({"limit": -1})).is_err());
        assert_eq!(
            parse(&json!({"use_lsm": true})).unwrap().use_lsm,
            Some(true)
        );
        assert!(parse(&json!({"use_lsm": 1})).is_err());
        assert!(parse(&json!({"vector": [1.0], "distance_type": "manhattan"})).is_err());
        // Nothing a client sends is silently dropped.
        let err = parse(&json!({"k": 3, "postfilter": true})).unwrap_err();
        assert!(err.message.contains("'postfilter'"), "{}", err.message);
        assert!(parse(&json!({"order_by": [{"column": "id"}]})).is_err());
        assert!(parse(&json!({"order_by": "id"})).is_err());
        assert!(parse(&json!({"approx_mode": "sloppy"})).is_err());
        assert!(parse(&json!({"full_text_query": {"string_query": {"query": "a"}, "structured_query": {"query": {"match": {"terms": "a"}}}}})).is_err());
    }
}

/// Property tests: any JSON value, and objects built from the fields a query body has with
/// plausible and hostile values, parse or are refused with a 4xx (400/404), never a panic.
/// Cases: proptest's default (256) or `PROPTEST_CASES`.
#[cfg(test)]
mod props {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            Just(json!(1e39)),
            Just(json!(-0.0)),
            any::<String>().prop_map(Value::from),
            prop::sample::select(vec![
                "l2", "cosine", "dot", "hamming", "", "text", "a AND b", "\"\"", "*"
            ])
            .prop_map(Value::from),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        scalar().prop_recursive(4, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Keys a query body (and its nested vector, columns and full-text objects) reads, and others.
    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(vec![
                "vector", "single_vector", "multi_vector", "vector_column", "distance_type",
                "nprobes", "minimum_nprobes", "maximum_nprobes", "ef", "refine_factor",
                "lower_bound", "upper_bound", "bypass_vector_index", "full_text_query",
                "string_query", "structured_query", "query", "columns", "column_names",
                "column_aliases", "filter", "prefilter", "k", "limit", "offset", "with_row_id",
                "fast_search", "match", "terms", "column", "boost", "fuzziness", "phrase",
                "multi_match", "boolean", "must", "should", "must_not", "operator",
            ])
            .prop_map(str::to_string),
            1 => any::<String>(),
        ]
    }

    proptest! {
        #[test]
        fn any_json_parses_or_is_a_4xx(body in value()) {
            if let Err(e) = parse(&body) {
                prop_assert!(matches!(e.status.as_u16(), 400 | 404), "{}: {}", e.status, e.message);
            }
        }

        #[test]
        fn query_objects_parse_or_are_a_4xx(fields in prop::collection::btree_map(key(), value(), 0..8)) {
            let body = Value::Object(fields.into_iter().collect());
            if let Err(e) = parse(&body) {
                prop_assert!(matches!(e.status.as_u16(), 400 | 404), "{}: {}", e.status, e.message);
            }
        }
    }
}
