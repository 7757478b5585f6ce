//! A bound on how deeply nested a client's SQL text may be, checked before any parser or
//! planner sees it (recursive parsers included: so it must come first).
//!
//! The SQL engines under Lancet (sqlparser, DataFusion's planner and optimizer, lance's
//! expression handling) walk expression trees recursively. A chain like `a + a + ... + a`
//! parses without recursion limits into a tree as deep as it is long, and a few hundred
//! levels overflowed a worker thread's stack in those walks: the process aborts, for every
//! tenant. So every filter, expression and query a request carries goes through [`check`]
//! first, which estimates the tree depth from the tokens alone (no recursion of its own) and
//! refuses text deeper than [`MAX_DEPTH`] with a 400.

use sqlparser::dialect::GenericDialect;
use sqlparser::keywords::Keyword;
use sqlparser::tokenizer::{Token, Tokenizer};

use crate::error::{ApiError, ApiResult};

/// Deepest expression nesting accepted: far beyond hand-written SQL (a thousand `OR`ed
/// alternatives pass), and well below what overflows the server's 16 MiB worker stacks (a
/// 2 MiB stack overflowed at about 600 levels in a debug build).
pub const MAX_DEPTH: usize = 1024;

/// The precedence class of a binary or unary operator token (None: no operator). Within one
/// bracket level a tree is about as deep as its longest run of one class (the operators of
/// other classes sit beside that spine, one level each).
fn class(token: &Token) -> Option<usize> {
    Some(match token {
        Token::Word(w) => match w.keyword {
            Keyword::OR => 0,
            Keyword::AND => 1,
            Keyword::NOT => 2,
            Keyword::IS | Keyword::LIKE | Keyword::ILIKE | Keyword::BETWEEN => 3,
            Keyword::CASE | Keyword::WHEN => 6,
            _ => return None,
        },
        Token::Eq
        | Token::DoubleEq
        | Token::Neq
        | Token::Lt
        | Token::Gt
        | Token::LtEq
        | Token::GtEq
        | Token::Spaceship => 3,
        Token::Plus
        | Token::Minus
        | Token::StringConcat
        | Token::Ampersand
        | Token::Pipe
        | Token::ShiftLeft
        | Token::ShiftRight => 4,
        Token::Mul | Token::Div | Token::DuckIntDiv | Token::Mod => 5,
        Token::Caret | Token::DoubleColon | Token::Arrow | Token::LongArrow => 6,
        _ => return None,
    })
}

const CLASSES: usize = 7;

/// One bracket level: operators seen per class since it opened (or since its last comma).
#[derive(Default)]
struct Level([usize; CLASSES]);

impl Level {
    fn depth(&self) -> usize {
        let longest = self.0.iter().copied().max().unwrap_or(0);
        let others = self.0.iter().filter(|n| **n > 0).count().saturating_sub(1);
        longest + others
    }
}

/// The nesting depth `sql`'s expressions could reach: one level per open bracket, plus each
/// open level's own depth (a comma starts a new list item).
pub fn depth(sql: &str) -> Result<usize, String> {
    let tokens = Tokenizer::new(&GenericDialect {}, sql)
        .tokenize()
        .map_err(|e| e.to_string())?;
    let mut levels: Vec<Level> = vec![Level::default()];
    // The depth of every level but the innermost, plus the brackets: kept as levels open and
    // close, so the whole walk stays linear.
    let mut outer = 0usize;
    let mut deepest = 0usize;
    for token in &tokens {
        match token {
            Token::LParen | Token::LBracket | Token::LBrace => {
                outer += levels.last().map_or(0, Level::depth) + 1;
                levels.push(Level::default());
            }
            Token::RParen | Token::RBracket | Token::RBrace if levels.len() > 1 => {
                levels.pop();
                outer -= levels.last().map_or(0, Level::depth) + 1;
            }
            Token::Comma => *levels.last_mut().expect("the outer level stays") = Level::default(),
            t => {
                if let Some(c) = class(t) {
                    levels.last_mut().expect("the outer level stays").0[c] += 1;
                }
            }
        }
        deepest = deepest.max(outer + levels.last().map_or(0, Level::depth));
    }
    Ok(deepest)
}

/// Refuse `sql` (what the request calls `field`) if its expressions nest deeper than
/// [`MAX_DEPTH`]. Text the tokenizer cannot read is left to the parser's own error.
pub fn check(sql: &str, field: &str) -> ApiResult<()> {
    match depth(sql) {
        Ok(d) if d > MAX_DEPTH => Err(ApiError::invalid(format!(
            "{field}: the expression nests about {d} levels deep; at most {MAX_DEPTH} are accepted \
             (a long chain of operators: split it, or use IN (...) for many alternatives)"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_and_brackets_count_lists_do_not() {
        assert_eq!(depth("id > 3").unwrap(), 1);
        assert_eq!(depth("(a + b) * c").unwrap(), 2);
        assert_eq!(depth("f(a + b, c + d)").unwrap(), 2);
        let long_in = format!(
            "id IN ({})",
            (0..20_000)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(depth(&long_in).unwrap() <= 2);
        assert!(check(&long_in, "filter").is_ok());
        let chain = vec!["id"; 1026].join(" + ");
        assert_eq!(depth(&chain).unwrap(), 1025);
        let err = check(&chain, "filter").unwrap_err();
        assert!(err.message.starts_with("filter: "), "{}", err.message);
        assert!(check(&vec!["id"; 1025].join(" + "), "filter").is_ok());
        // A thousand alternatives: the ORs are the spine, the comparisons hang off it.
        let ors = vec!["id = 1"; 1000].join(" OR ");
        assert_eq!(depth(&ors).unwrap(), 1001);
        assert!(check(&ors, "filter").is_ok());
        // An estimate from above: the tree is 5 deep.
        assert_eq!(depth("a = 1 AND (b + c * d > 2 OR e)").unwrap(), 7);
        // Depth adds up through brackets.
        let nested = format!("{}x{}", "(x + ".repeat(600), ")".repeat(600));
        assert!(depth(&nested).unwrap() >= 1200);
        // Operators inside strings and quoted names are no operators.
        assert_eq!(depth(&format!("name = '{}'", "+".repeat(5000))).unwrap(), 1);
        assert_eq!(depth(&format!("\"{}\" > 1", "-".repeat(5000))).unwrap(), 1);
        // Unbalanced closing brackets cannot underflow.
        assert_eq!(depth(")))) a + b").unwrap(), 1);
    }
}
