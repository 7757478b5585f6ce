//! Geneva's materialized view queries. Geneva 0.17's remote `create_materialized_view` sends
//! `source_query` as its own JSON rather than SQL: a lancedb query (`base`: filter, columns,
//! limit, ...) plus Geneva's fields (`column_udfs`, `shuffle`, ...) and the source's identity
//! (`source_table`, `source_db_uri`). The plain-query part maps onto a view [`Definition`];
//! anything else it may carry is refused by name.

use serde_json::{Map, Value};

use super::definition::{Definition, Projection};
use crate::error::{ApiError, ApiResult};

/// Geneva's view-bookkeeping columns, which its `output_schema` puts first (the source row's id,
/// whether the row is computed): Lancet's views are rebuilt whole, so they hold neither.
pub const BOOKKEEPING_COLUMNS: [&str; 2] = ["__source_row_id", "__is_set"];

/// Whether a view query is Geneva's JSON rather than SQL.
pub fn is_geneva_query(query: &str) -> bool {
    query.trim_start().starts_with('{')
}

fn unsupported(field: &str) -> ApiError {
    ApiError::invalid(format!(
        "source_query: '{field}' is not supported in a materialized view (Lancet maintains \
         views of a filter, columns and a limit over one table)"
    ))
}

/// Set: neither null nor false nor an empty list.
fn is_set(v: &Value) -> bool {
    !matches!(v, Value::Null | Value::Bool(false)) && v.as_array().is_none_or(|a| !a.is_empty())
}

/// The view definition of a Geneva query.
pub fn parse(text: &str) -> ApiResult<Definition> {
    let query: Map<String, Value> = serde_json::from_str(text)
        .map_err(|e| ApiError::invalid(format!("source_query is not Geneva's query JSON: {e}")))?;
    let mut source = None;
    let mut base = Map::new();
    for (k, v) in &query {
        match k.as_str() {
            "base" => {
                base = v.as_object().cloned().ok_or_else(|| {
                    ApiError::invalid("source_query: 'base' must be a lancedb query object")
                })?
            }
            "source_table" => source = v.as_str().map(str::to_string),
            // The database the client connected to: the view's own, where its source is.
            "source_db_uri" => {}
            other if is_set(v) => return Err(unsupported(other)),
            _ => {}
        }
    }
    let source = source.filter(|s| !s.is_empty()).ok_or_else(|| {
        ApiError::invalid("source_query: 'source_table' must name the view's source table")
    })?;
    let mut def = Definition {
        query: text.to_string(),
        source: vec![source],
        projections: Vec::new(),
        filter: None,
        limit: None,
    };
    for (k, v) in &base {
        match (k.as_str(), v) {
            (_, Value::Null) => {}
            ("filter", Value::String(f)) => {
                crate::sql_guard::check(f, "source_query filter")?;
                def.filter = Some(f.clone());
            }
            ("limit", v) => {
                def.limit = Some(v.as_u64().ok_or_else(|| {
                    ApiError::invalid(format!(
                        "source_query: limit must be an integer >= 0, got {v}"
                    ))
                })?)
            }
            ("columns", Value::Array(names)) => {
                for n in names {
                    let n = n.as_str().ok_or_else(|| {
                        ApiError::invalid(
                            "source_query: columns must be names or {name: expression}",
                        )
                    })?;
                    def.projections.push(Projection {
                        output_column: n.to_string(),
                        expression: format!("`{}`", n.replace('`', "``")),
                    });
                }
            }
            ("columns", Value::Object(exprs)) => {
                for (name, e) in exprs {
                    let e = e.as_str().ok_or_else(|| {
                        ApiError::invalid(format!(
                            "source_query: column '{name}' needs a SQL expression"
                        ))
                    })?;
                    crate::sql_guard::check(e, &format!("source_query column '{name}'"))?;
                    def.projections.push(Projection {
                        output_column: name.clone(),
                        expression: e.to_string(),
                    });
                }
            }
            (other, v) if is_set(v) => return Err(unsupported(&format!("base.{other}"))),
            _ => {}
        }
    }
    Ok(def)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_geneva_query_becomes_a_view_definition() {
        let d = parse(
            r#"{"base": {"filter": "x > 5", "columns": {"id": "id", "x2": "x * 2"},
                "limit": 10, "vector": null, "with_row_id": null}, "shuffle": null,
                "column_udfs": null, "source_table": "src", "source_db_uri": "db://mv"}"#,
        )
        .unwrap();
        assert_eq!(d.source, ["src"]);
        assert_eq!(d.filter.as_deref(), Some("x > 5"));
        assert_eq!(d.limit, Some(10));
        let p: Vec<_> = d
            .projections
            .iter()
            .map(|p| (p.output_column.as_str(), p.expression.as_str()))
            .collect();
        assert_eq!(p, [("id", "id"), ("x2", "x * 2")]);
        let d = parse(r#"{"base": {"columns": ["id"]}, "source_table": "src"}"#).unwrap();
        assert_eq!(d.projections[0].expression, "`id`");
    }

    #[test]
    fn what_a_view_cannot_maintain_is_refused_by_name() {
        for (q, named) in [
            (
                r#"{"base": {}, "column_udfs": [{"output_name": "d"}], "source_table": "s"}"#,
                "column_udfs",
            ),
            (
                r#"{"base": {"vector": [1.0]}, "source_table": "s"}"#,
                "base.vector",
            ),
            (
                r#"{"base": {}, "shuffle": true, "source_table": "s"}"#,
                "shuffle",
            ),
            (r#"{"base": {}}"#, "source_table"),
            (r#"{"base": {"limit": -1}, "source_table": "s"}"#, "limit"),
        ] {
            let err = parse(q).unwrap_err();
            assert!(err.message.contains(named), "{q}: {}", err.message);
        }
    }
}
