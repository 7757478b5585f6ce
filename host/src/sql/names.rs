//! Table names in SQL, and the version of a table a name may ask for.
//!
//! A name is `table`, `namespace.table` or `a.b.table` (each part a namespace level, from the
//! caller's database), as for views. A name may end in `@` and a version: `"items@3"` (version
//! 3), `"items@tag:release"` (the tagged version), `"items@branch:dev"` (the latest version of
//! branch `dev`); `@` makes it a quoted identifier. `lancet.ns.table` is `ns.table`: `lancet`
//! is the one catalog Flight SQL clients see.

use crate::error::{ApiError, ApiResult};

/// The catalog name Flight SQL clients see (a tenant's tables are all in it).
pub const CATALOG: &str = "lancet";

/// Which version of a table a name reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    Latest,
    Version(u64),
    Tag(String),
    Branch(String),
}

/// A table name as written in a statement, split into the catalog id it names and its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableName {
    /// As written (`[table]`, `[schema, table]` or `[catalog, schema, table]`): the name the
    /// statement's planner looks up.
    pub written: Vec<String>,
    /// The table's id from the caller's database root.
    pub id: Vec<String>,
    pub pin: Pin,
}

impl TableName {
    pub fn parse(written: Vec<String>) -> ApiResult<Self> {
        let mut parts = written.clone();
        if parts.len() == 3 && parts[0] == CATALOG {
            parts.remove(0);
        }
        let last = parts.pop().unwrap_or_default();
        let (table, pin) = match last.split_once('@') {
            None => (last.clone(), Pin::Latest),
            Some((table, pin)) => (table.to_string(), parse_pin(pin, &last)?),
        };
        if table.is_empty() {
            return Err(ApiError::invalid(format!(
                "table name '{last}' has no table"
            )));
        }
        // A schema written as one quoted identifier may hold several namespace levels.
        let mut id: Vec<String> = parts
            .iter()
            .flat_map(|p| p.split('.'))
            .map(str::to_string)
            .collect();
        if id.iter().any(String::is_empty) {
            return Err(ApiError::invalid(format!(
                "table name '{}' has an empty namespace level",
                written.join(".")
            )));
        }
        id.push(table);
        Ok(Self { written, id, pin })
    }
}

fn parse_pin(pin: &str, name: &str) -> ApiResult<Pin> {
    let bad = || {
        ApiError::invalid(format!(
            "'{name}': after '@' comes a version number, 'tag:<name>' or 'branch:<name>'"
        ))
    };
    if let Some(tag) = pin.strip_prefix("tag:") {
        return if tag.is_empty() {
            Err(bad())
        } else {
            Ok(Pin::Tag(tag.to_string()))
        };
    }
    if let Some(branch) = pin.strip_prefix("branch:") {
        return if branch.is_empty() {
            Err(bad())
        } else {
            Ok(Pin::Branch(branch.to_string()))
        };
    }
    let number = pin.strip_prefix('v').unwrap_or(pin);
    number.parse().map(Pin::Version).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(parts: &[&str]) -> ApiResult<TableName> {
        TableName::parse(parts.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn names_map_to_ids_and_pins() {
        let n = name(&["items"]).unwrap();
        assert_eq!((n.id, n.pin), (vec!["items".to_string()], Pin::Latest));
        let n = name(&["shop", "items@3"]).unwrap();
        assert_eq!(
            (n.id, n.pin),
            (vec!["shop".into(), "items".into()], Pin::Version(3))
        );
        let n = name(&["lancet", "shop", "items@v7"]).unwrap();
        assert_eq!(
            (n.id, n.pin),
            (vec!["shop".into(), "items".into()], Pin::Version(7))
        );
        let n = name(&["a.b", "t@tag:x"]).unwrap();
        assert_eq!(n.id, vec!["a", "b", "t"]);
        assert_eq!(n.pin, Pin::Tag("x".into()));
        let n = name(&["a", "b", "t@branch:dev"]).unwrap();
        assert_eq!(n.id, vec!["a", "b", "t"]);
        assert_eq!(n.pin, Pin::Branch("dev".into()));
        assert_eq!(n.written, vec!["a", "b", "t@branch:dev"]);
    }

    #[test]
    fn bad_pins_and_names_are_refused() {
        for bad in [["t@"], ["t@tag:"], ["t@x"], ["@3"], ["t@branch:"]] {
            assert!(name(&bad).is_err(), "{bad:?}");
        }
        assert!(name(&["a..b", "t"]).is_err());
    }
}
