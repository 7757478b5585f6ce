//! The query a materialized view is defined by, as the lancedb client writes it:
//!
//! ```sql
//! SELECT <* | column | expr AS name>, ... FROM [ns.]table [WHERE predicate] [LIMIT n]
//! ```
//!
//! Parsed once at creation (anything else is refused, naming what is not maintained) into
//! the pieces a refresh hands to lance's scanner: projections, filter, limit.

use serde::{Deserialize, Serialize};
use sqlparser::ast::{
    Expr, GroupByExpr, LimitClause, SelectItem, SetExpr, Statement, TableFactor, Value,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use crate::error::{ApiError, ApiResult};

const SHAPE: &str = "a materialized view is defined by `SELECT <* | column | expr AS name>, ... \
    FROM [namespace.]table [WHERE predicate] [LIMIT n]`";

/// One output column: its name and the SQL expression (over the source's columns) it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Projection {
    pub output_column: String,
    pub expression: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Definition {
    /// The defining query as the client sent it.
    pub query: String,
    /// The source table's id as written (namespace parts, then the table).
    pub source: Vec<String>,
    /// Empty: every source column (`SELECT *`).
    pub projections: Vec<Projection>,
    pub filter: Option<String>,
    pub limit: Option<u64>,
}

fn refuse(what: &str) -> ApiError {
    ApiError::invalid(format!(
        "materialized view query: {what} is not supported; {SHAPE}"
    ))
}

impl Definition {
    /// A view's query: SQL as above, or Geneva's query JSON (`super::geneva`).
    pub fn parse(sql: &str) -> ApiResult<Definition> {
        if super::geneva::is_geneva_query(sql) {
            return super::geneva::parse(sql);
        }
        if sql.trim().is_empty() {
            return Err(ApiError::invalid(format!(
                "a materialized view needs a 'query'; {SHAPE}"
            )));
        }
        crate::sql_guard::check(sql, "query")?;
        let mut statements = Parser::parse_sql(&GenericDialect {}, sql)
            .map_err(|e| ApiError::invalid(format!("materialized view query: {e}")))?;
        if statements.len() != 1 {
            return Err(refuse("more than one statement"));
        }
        let Statement::Query(query) = statements.remove(0) else {
            return Err(refuse("a statement other than SELECT"));
        };
        if query.with.is_some() {
            return Err(refuse("WITH"));
        }
        if query.order_by.is_some() {
            return Err(refuse("ORDER BY"));
        }
        let limit = match &query.limit_clause {
            None => None,
            Some(LimitClause::LimitOffset {
                limit,
                offset: None,
                limit_by,
            }) if limit_by.is_empty() => match limit {
                None => None,
                Some(Expr::Value(v)) => match &v.value {
                    Value::Number(n, _) => Some(n.parse::<u64>().map_err(|_| {
                        ApiError::invalid(format!(
                            "materialized view query: LIMIT must be an integer >= 0, got {n}"
                        ))
                    })?),
                    _ => return Err(refuse("a LIMIT that is not a number")),
                },
                Some(_) => return Err(refuse("a LIMIT that is not a number")),
            },
            Some(_) => return Err(refuse("OFFSET")),
        };
        let SetExpr::Select(select) = query.body.as_ref() else {
            return Err(refuse("UNION, VALUES or a nested query"));
        };
        if select.distinct.is_some() {
            return Err(refuse("DISTINCT"));
        }
        if !matches!(&select.group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty())
        {
            return Err(refuse("GROUP BY"));
        }
        if select.having.is_some() {
            return Err(refuse("HAVING"));
        }
        let [from] = select.from.as_slice() else {
            return Err(refuse(if select.from.is_empty() {
                "a query without FROM"
            } else {
                "more than one table in FROM (functions and UNNEST in FROM included)"
            }));
        };
        if !from.joins.is_empty() {
            return Err(refuse("JOIN"));
        }
        let TableFactor::Table {
            name, args: None, ..
        } = &from.relation
        else {
            return Err(refuse("a FROM item that is not a table"));
        };
        let source: Vec<String> = name
            .0
            .iter()
            .map(|p| {
                p.as_ident()
                    .map(|i| i.value.clone())
                    .ok_or_else(|| refuse("a table name that is not a plain identifier"))
            })
            .collect::<ApiResult<_>>()?;
        let mut projections = Vec::new();
        let mut wildcard = false;
        for item in &select.projection {
            match item {
                SelectItem::Wildcard(opts) if opts.to_string().is_empty() => wildcard = true,
                SelectItem::UnnamedExpr(Expr::Identifier(ident)) => projections.push(Projection {
                    output_column: ident.value.clone(),
                    expression: ident.to_string(),
                }),
                SelectItem::ExprWithAlias { expr, alias } => projections.push(Projection {
                    output_column: alias.value.clone(),
                    expression: expr.to_string(),
                }),
                SelectItem::UnnamedExpr(e) => {
                    return Err(ApiError::invalid(format!(
                        "materialized view query: the expression `{e}` needs a name (`{e} AS name`)"
                    )));
                }
                other => return Err(refuse(&format!("the select item `{other}`"))),
            }
        }
        if wildcard && !projections.is_empty() {
            return Err(refuse("`*` together with other columns"));
        }
        let mut seen = std::collections::HashSet::new();
        for p in &projections {
            if !seen.insert(p.output_column.as_str()) {
                return Err(ApiError::invalid(format!(
                    "materialized view query: the column '{}' is selected twice",
                    p.output_column
                )));
            }
        }
        // Whatever the checks above did not name (QUALIFY, window clauses, INTO...) still
        // must not be dropped: the query must be exactly the pieces kept.
        let def = Definition {
            query: sql.to_string(),
            source,
            projections,
            filter: select.selection.as_ref().map(|e| e.to_string()),
            limit,
        };
        let items: Vec<String> = select.projection.iter().map(|i| i.to_string()).collect();
        let mut kept = format!("SELECT {} FROM {name}", items.join(", "));
        if let Some(f) = &select.selection {
            kept.push_str(&format!(" WHERE {f}"));
        }
        if let Some(l) = &query.limit_clause {
            kept.push_str(&format!("{l}"));
        }
        let canonical = Parser::parse_sql(&GenericDialect {}, &kept)
            .map_err(|e| ApiError::internal(format!("re-rendered view query: {e}")))?;
        if canonical[0].to_string() != Statement::Query(query).to_string() {
            return Err(refuse("a clause other than SELECT, FROM, WHERE and LIMIT"));
        }
        Ok(def)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shapes_a_view_may_have_parse_into_their_pieces() {
        let d = Definition::parse("SELECT * FROM src").unwrap();
        assert_eq!(
            (d.source.clone(), d.projections.len()),
            (vec!["src".into()], 0)
        );
        let d = Definition::parse(
            "SELECT id, \"Text\", x * 2 AS doubled FROM ns.src WHERE x > 1 AND id < 10 LIMIT 5",
        )
        .unwrap();
        assert_eq!(d.source, vec!["ns".to_string(), "src".to_string()]);
        let names: Vec<_> = d
            .projections
            .iter()
            .map(|p| p.output_column.as_str())
            .collect();
        assert_eq!(names, ["id", "Text", "doubled"]);
        assert_eq!(d.projections[2].expression, "x * 2");
        assert_eq!(d.filter.as_deref(), Some("x > 1 AND id < 10"));
        assert_eq!(d.limit, Some(5));
    }

    #[test]
    fn anything_a_refresh_would_not_maintain_is_refused_by_name() {
        for (sql, named) in [
            ("SELECT a FROM t GROUP BY a", "GROUP BY"),
            ("SELECT a FROM t ORDER BY a", "ORDER BY"),
            ("SELECT DISTINCT a FROM t", "DISTINCT"),
            ("SELECT a FROM t JOIN u ON t.a = u.a", "JOIN"),
            ("SELECT a FROM t, UNNEST(t.b) AS x", "more than one table"),
            ("SELECT a FROM t LIMIT 3 OFFSET 2", "OFFSET"),
            ("SELECT a + 1 FROM t", "needs a name"),
            ("SELECT a, a FROM t", "selected twice"),
            ("SELECT *, a FROM t", "together with"),
            ("DELETE FROM t", "other than SELECT"),
            (
                "SELECT a FROM t; SELECT b FROM t",
                "more than one statement",
            ),
            ("SELECT a FROM (SELECT a FROM t) s", "not a table"),
            ("WITH s AS (SELECT 1) SELECT a FROM t", "WITH"),
            ("", "needs a 'query'"),
            ("SELEC a FROM t", "materialized view query"),
        ] {
            let err = Definition::parse(sql).unwrap_err();
            assert!(err.message.contains(named), "{sql}: {}", err.message);
            assert_eq!(err.status.as_u16(), 400, "{sql}");
        }
    }
}
