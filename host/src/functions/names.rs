//! Names of secrets and Functions, checked as the lancedb client checks them, and where their
//! objects live under the data root: one folder per tenant and namespace, the tenant and
//! namespace hex-encoded (any name is a safe path segment then, `.` and `..` included).

use crate::error::{ApiError, ApiResult};

#[derive(Clone, Copy)]
pub enum ObjectKind {
    Secret,
    Function,
}

fn segment_ok(s: &str) -> bool {
    (1..=255).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A secret name: `[A-Za-z0-9_.-]{1,255}`. A Function name: a letter or `_`, then
/// `[A-Za-z0-9_.-]`.
pub fn check(kind: ObjectKind, name: &str) -> ApiResult<()> {
    let ok = match kind {
        ObjectKind::Secret => segment_ok(name),
        ObjectKind::Function => {
            segment_ok(name) && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        }
    };
    if ok {
        return Ok(());
    }
    let what = match kind {
        ObjectKind::Secret => "secret name (1-255 of A-Z a-z 0-9 _ . -)",
        ObjectKind::Function => "Function name (a letter or _, then A-Z a-z 0-9 _ . -)",
    };
    Err(ApiError::invalid(format!("invalid {what}: {name:?}")))
}

pub fn check_namespace(namespace: &[String]) -> ApiResult<()> {
    match namespace.iter().find(|s| !segment_ok(s)) {
        Some(bad) => Err(ApiError::invalid(format!(
            "invalid namespace path segment: {bad:?}"
        ))),
        None => Ok(()),
    }
}

/// ` in namespace a.b` (nothing for the root), for messages.
pub fn in_namespace(namespace: &[String]) -> String {
    if namespace.is_empty() {
        String::new()
    } else {
        format!(" in namespace {}", namespace.join("."))
    }
}

/// `<prefix>/<tenant>/<namespace>`: the folder of one tenant's objects of a namespace.
pub fn folder(prefix: &str, tenant: &str, namespace: &[String]) -> String {
    let ns = if namespace.is_empty() {
        "root".to_string()
    } else {
        format!("ns-{}", hex::encode(namespace.join("\0")))
    };
    format!("{prefix}/t-{}/{ns}", hex::encode(tenant))
}

/// A checked name as a file name: names may be `.` or `..`, which a path must not be.
pub fn file_name(name: &str) -> String {
    format!("n-{name}")
}

pub fn from_file_name(file: &str) -> Option<String> {
    file.strip_prefix("n-").map(str::to_string)
}

/// Splits an object id (`a$b$name`: namespace segments then the name) as the routes carry it.
pub fn split_id(id: &[String]) -> ApiResult<(Vec<String>, String)> {
    match id.split_last() {
        Some((name, namespace)) => Ok((namespace.to_vec(), name.clone())),
        None => Err(ApiError::invalid("the id names nothing")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_as_the_client_checks_them() {
        assert!(check(ObjectKind::Secret, "openai-prod.v2_x").is_ok());
        assert!(check(ObjectKind::Secret, "..").is_ok());
        assert!(check(ObjectKind::Secret, "a/b").is_err());
        assert!(check(ObjectKind::Secret, "").is_err());
        assert!(check(ObjectKind::Function, "doubled").is_ok());
        assert!(check(ObjectKind::Function, "-x").is_err());
        assert!(check_namespace(&["a".into(), "b c".into()]).is_err());
        assert_eq!(folder("_s", "t", &[]), "_s/t-74/root");
        assert_ne!(
            folder("_s", "t", &["a".into()]),
            folder("_s", "u", &["a".into()])
        );
    }
}
