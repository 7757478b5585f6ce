//! Positional `?` placeholders (qmark, what ADBC's Flight SQL driver, JDBC and ODBC tools bind)
//! numbered `$1`, `$2`, ... in the order they are written, which is how DataFusion binds
//! values. A statement mixing `?` with `$n` is refused: which value is which would be a guess.

use std::ops::ControlFlow;

use sqlparser::ast::{Expr, Value, VisitMut, VisitorMut};

use crate::error::{ApiError, ApiResult};

struct Numbering {
    next: usize,
    numbered: bool,
}

impl VisitorMut for Numbering {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Value(v) = expr
            && let Value::Placeholder(name) = &mut v.value
        {
            if name == "?" {
                self.next += 1;
                *name = format!("${}", self.next);
            } else {
                self.numbered = true;
            }
        }
        ControlFlow::Continue(())
    }
}

/// Numbers the `?` placeholders of `statement`.
pub fn number<S: VisitMut>(statement: &mut S) -> ApiResult<()> {
    let mut numbering = Numbering {
        next: 0,
        numbered: false,
    };
    let _ = statement.visit(&mut numbering);
    if numbering.next > 0 && numbering.numbered {
        return Err(ApiError::invalid(
            "SQL: use either ? or $1, $2, ... placeholders in one statement, not both",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use sqlparser::dialect::GenericDialect;
    use sqlparser::parser::Parser;

    use super::*;

    fn numbered(sql: &str) -> ApiResult<String> {
        let mut statements = Parser::parse_sql(&GenericDialect {}, sql).unwrap();
        number(&mut statements[0])?;
        Ok(statements[0].to_string())
    }

    #[test]
    fn question_marks_are_numbered_in_written_order() {
        assert_eq!(
            numbered("SELECT a, ? FROM t WHERE uid = ? AND b IN (?, ?) LIMIT 5").unwrap(),
            "SELECT a, $1 FROM t WHERE uid = $2 AND b IN ($3, $4) LIMIT 5"
        );
        assert_eq!(
            numbered("WITH x AS (SELECT * FROM t WHERE a = ?) SELECT * FROM x WHERE b = ?")
                .unwrap(),
            "WITH x AS (SELECT * FROM t WHERE a = $1) SELECT * FROM x WHERE b = $2"
        );
        assert_eq!(
            numbered("SELECT * FROM t WHERE a = $2 AND b = $1").unwrap(),
            "SELECT * FROM t WHERE a = $2 AND b = $1"
        );
        assert!(numbered("SELECT * FROM t WHERE a = ? AND b = $1").is_err());
    }
}
