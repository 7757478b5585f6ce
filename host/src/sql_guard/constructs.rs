//! Literals lance's SQL planner cannot take. Lance parses a filter as `SELECT 1 FROM t WHERE
//! <filter>` (an expression as `SELECT <expr> FROM t`) with its own dialect and turns each
//! literal into a value; for any literal form but numbers, '…' and "…" strings, X'…' hex,
//! booleans and NULL it reaches a `todo!()`: a panic, answered 500. So the text is parsed here
//! as lance will parse it, and the first such literal is refused, by name, before lance sees it.
//! Casts to a DECIMAL wider than arrow's 128-bit decimal (precision > 38) are refused too:
//! comparing such a cast panicked in arrow's precision tables (found by `fuzz`). So are the
//! string and list functions that multiply their input by an argument (`repeat`, `lpad`,
//! `rpad`, `array_repeat`) unless it is a literal of at most [`MAX_REPEAT`]: a value from a
//! column (or 2^31) made arrow overflow its offsets (a panic) or allocate gigabytes per row.

use std::any::TypeId;
use std::ops::ControlFlow;

use sqlparser::ast::{
    DataType, ExactNumberInfo, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Statement,
    UnaryOperator, Value, visit_expressions,
};
use sqlparser::dialect::{Dialect, GenericDialect};
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{ApiError, ApiResult};

/// Lance's dialect: the generic one, but only backticks quote identifiers (so "x" is a
/// string). Mirrored here so both parse a text into the same tree.
#[derive(Debug)]
struct LanceDialect(GenericDialect);

impl Dialect for LanceDialect {
    fn dialect(&self) -> TypeId {
        self.0.dialect()
    }
    fn is_identifier_start(&self, ch: char) -> bool {
        self.0.is_identifier_start(ch)
    }
    fn is_identifier_part(&self, ch: char) -> bool {
        self.0.is_identifier_part(ch)
    }
    fn is_delimited_identifier_start(&self, ch: char) -> bool {
        ch == '`'
    }
    fn supports_bitwise_shift_operators(&self) -> bool {
        self.0.supports_bitwise_shift_operators()
    }
}

/// `statement` parsed as lance parses it (it also reads `==` as `=`); None where lance's own
/// parse fails too (and says why).
fn parse_as_lance(statement: &str) -> Option<Statement> {
    let dialect = LanceDialect(GenericDialect {});
    let mut tokens = Tokenizer::new(&dialect, statement).tokenize().ok()?;
    tokens.dedup_by(|next, prev| matches!((prev, next), (Token::Eq, Token::Eq)));
    Parser::new(&dialect)
        .with_tokens(tokens)
        .parse_statement()
        .ok()
}

/// What a literal lance cannot plan is called, for the error message.
fn unsupported(value: &Value) -> Option<&'static str> {
    Some(match value {
        Value::Number(..)
        | Value::SingleQuotedString(_)
        | Value::DoubleQuotedString(_)
        | Value::HexStringLiteral(_)
        | Value::Boolean(_)
        | Value::Null => return None,
        Value::Placeholder(_) => "a parameter placeholder ($1, ?, :name)",
        Value::NationalStringLiteral(_) | Value::NationalQuoteDelimitedStringLiteral(_) => {
            "a national string literal (N'...')"
        }
        Value::DollarQuotedString(_) => "a dollar-quoted string ($$...$$)",
        Value::SingleQuotedByteStringLiteral(_)
        | Value::DoubleQuotedByteStringLiteral(_)
        | Value::TripleSingleQuotedByteStringLiteral(_)
        | Value::TripleDoubleQuotedByteStringLiteral(_) => {
            "a byte string literal (B'...'; use X'<hex>' for bytes)"
        }
        Value::SingleQuotedRawStringLiteral(_)
        | Value::DoubleQuotedRawStringLiteral(_)
        | Value::TripleSingleQuotedRawStringLiteral(_)
        | Value::TripleDoubleQuotedRawStringLiteral(_) => "a raw string literal (R'...')",
        Value::EscapedStringLiteral(_) => "an escaped string literal (E'...')",
        Value::UnicodeStringLiteral(_) => "a unicode string literal (U&'...')",
        Value::TripleSingleQuotedString(_) | Value::TripleDoubleQuotedString(_) => {
            "a triple-quoted string"
        }
        Value::QuoteDelimitedStringLiteral(_) => "a quote-delimited string literal (Q'...')",
    })
}

/// Arrow's widest decimal lance plans casts to without panicking.
const MAX_DECIMAL_PRECISION: u64 = 38;

/// A cast's target type lance cannot plan, named.
fn unsupported_cast(data_type: &DataType) -> Option<&'static str> {
    match data_type {
        DataType::Decimal(
            ExactNumberInfo::Precision(p) | ExactNumberInfo::PrecisionAndScale(p, _),
        )
        | DataType::Numeric(
            ExactNumberInfo::Precision(p) | ExactNumberInfo::PrecisionAndScale(p, _),
        )
        | DataType::Dec(ExactNumberInfo::Precision(p) | ExactNumberInfo::PrecisionAndScale(p, _))
            if *p > MAX_DECIMAL_PRECISION =>
        {
            Some("a DECIMAL precision above 38")
        }
        _ => None,
    }
}

/// The largest count or length `repeat`, `lpad`, `rpad` and `array_repeat` take: a mebibyte
/// of output per row and input byte at most.
pub const MAX_REPEAT: i64 = 1 << 20;

/// Functions whose output grows with their second argument.
const AMPLIFYING: &[&str] = &["repeat", "lpad", "rpad", "array_repeat", "list_repeat"];

/// A literal integer, maybe negated.
fn literal_int(e: &Expr) -> Option<i64> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => n.parse().ok(),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => literal_int(expr).map(|n| -n),
        Expr::Nested(inner) => literal_int(inner),
        _ => None,
    }
}

/// An amplifying function whose count is not a small literal.
fn unbounded_amplifier(e: &Expr) -> Option<String> {
    let Expr::Function(f) = e else { return None };
    let name = f.name.to_string().to_ascii_lowercase();
    if !AMPLIFYING.contains(&name.as_str()) {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let count = match list.args.get(1) {
        Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => literal_int(e),
        // Too few arguments: the planner says so itself.
        None => return None,
        Some(_) => None,
    };
    match count {
        Some(n) if n <= MAX_REPEAT => None,
        _ => Some(name),
    }
}

/// The first literal, cast or call lance cannot plan or run safely in the statement, with its
/// text.
fn first_unsupported(statement: &Statement) -> Option<(&'static str, String)> {
    let mut found = None;
    let _ = visit_expressions(statement, |e: &Expr| {
        let kind = match e {
            Expr::Value(v) => unsupported(&v.value).map(|k| (k, v.value.to_string())),
            Expr::Cast { data_type, .. } => {
                unsupported_cast(data_type).map(|k| (k, data_type.to_string()))
            }
            Expr::Function(_) => unbounded_amplifier(e).map(|name| {
                (
                    "a repeat/pad count that is not a literal up to 1048576",
                    format!("{name}(...)"),
                )
            }),
            _ => None,
        };
        if kind.is_some() {
            found = kind;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    found
}

/// Refuse `sql` (the request's `field`) if, read as a filter, as an expression or as a whole
/// query (a materialized view's, whose parts lance plans) the way lance reads them, it holds a
/// literal, cast or call lance cannot plan or run safely. Text that parses no way is left to lance's own error.
pub fn check(sql: &str, field: &str) -> ApiResult<()> {
    for wrapped in [
        format!("SELECT 1 FROM t WHERE {sql}"),
        format!("SELECT {sql} FROM t"),
        sql.to_string(),
    ] {
        if let Some(statement) = parse_as_lance(&wrapped)
            && let Some((kind, text)) = first_unsupported(&statement)
        {
            return Err(ApiError::invalid(format!(
                "{field}: {kind} is not supported here: {text}; write the value as a plain \
                 literal ('text', 42, X'00ff', TRUE, NULL)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_literals_lance_cannot_plan_are_refused_by_name() {
        for (sql, named) in [
            ("id = $1", "placeholder"),
            ("id = ?", "placeholder"),
            ("name = N'x'", "national"),
            ("name = $$x$$", "dollar-quoted"),
            ("name = B'x'", "byte string"),
            ("name = R'x'", "raw string"),
            ("lower(name) IN ('a', N'b')", "national"),
            (
                "CASE WHEN id > 1 THEN $$a$$ ELSE 'b' END = 'a'",
                "dollar-quoted",
            ),
            ("SELECT id FROM t WHERE name = N'x'", "national"),
            ("CAST(id AS DECIMAL(76, 2)) > 1", "DECIMAL precision"),
            ("id::NUMERIC(39) > 1", "DECIMAL precision"),
            ("lpad(name, id) = 'a'", "repeat/pad count"),
            ("repeat(name, 2000000000) = 'a'", "repeat/pad count"),
            ("upper(RPAD(name, 1048577, 'x')) = 'a'", "repeat/pad count"),
        ] {
            let err = check(sql, "filter").expect_err(sql);
            assert!(err.message.starts_with("filter: "), "{}", err.message);
            assert!(err.message.contains(named), "{sql}: {}", err.message);
        }
    }

    #[test]
    fn plain_literals_pass() {
        for sql in [
            "id = 1",
            "id == 1",
            "name = 'x' AND note = \"y\"",
            "payload = X'00ff'",
            "flag IS TRUE OR flag IS NULL",
            "CAST(score AS DECIMAL(38, 2)) > 1",
            "lpad(name, 8, '0') = '0000000a' AND repeat(name, -1) = ''",
            "id * 2 + 1",
            "not even sql ((",
        ] {
            check(sql, "filter").unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }
}
