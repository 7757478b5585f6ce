//! Who is calling. A credential (an API key, or an OAuth 2.0 access token in JWT form) becomes
//! a [`Grant`]: the tenant it belongs to, a role, and the namespace subtree the role covers.
//! This module knows nothing of HTTP; `http::auth` finds the credential in a request.

mod jwt;
pub mod keys;
pub mod source;

use serde::{Deserialize, Serialize};

pub use jwt::JwtConfig;
pub use keys::{AuthFile, KeyEntry};
pub use source::AuthSource;

/// What a credential may do, each role including the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Describe, list, query, count, read history and indexes, watch jobs.
    Read,
    /// Create, change and drop tables, their data, columns, indexes, tags and branches.
    Write,
    /// Create and drop namespaces, register/deregister tables, batch catalog commits; manage
    /// the tenant's own keys and read its audit log.
    Admin,
    /// The service's operator: `/v1/admin/...` only, never a tenant's routes (see
    /// `http::pipeline::auth::refusal`). No tenant key or token can hold it.
    Operator,
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            "admin" => Ok(Role::Admin),
            "operator" => Err(
                "a tenant key cannot be an operator's: operator keys are made by \
                 `lancet keys create-operator`"
                    .into(),
            ),
            other => Err(format!("unknown role '{other}' (read, write or admin)")),
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
            Role::Operator => "operator",
        })
    }
}

/// What an authenticated caller may touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub tenant: String,
    pub role: Role,
    /// Namespace path (inside the tenant) the role covers; empty = the whole tenant.
    pub scope: Vec<String>,
    /// Who this is, for logs: a key id or a token subject, never the secret.
    pub principal: String,
}

impl Grant {
    /// Whether this is the operator's credential (no tenant).
    pub fn is_operator(&self) -> bool {
        self.role == Role::Operator
    }
}

impl Grant {
    /// Whether `id` (a namespace or table path inside the tenant) lies in this grant's subtree.
    pub fn covers(&self, id: &[String]) -> bool {
        id.starts_with(&self.scope)
    }
}

/// Why a credential was refused. The text is safe to show to the caller: it never repeats the
/// credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Tenant names become directory names: keep them plain.
pub fn check_tenant_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && !name.starts_with(['-', '_']);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tenant name '{name}' must be 1-64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit"
        ))
    }
}

/// Verifies credentials against the configured keys and token issuer.
pub struct Authenticator {
    keys: keys::KeyRing,
    jwt: Option<jwt::Verifier>,
}

impl Authenticator {
    pub fn new(keys: keys::KeyRing, jwt: Option<&JwtConfig>) -> Result<Self, String> {
        let jwt = jwt.map(jwt::Verifier::new).transpose()?;
        Ok(Self { keys, jwt })
    }

    pub fn keys(&self) -> &keys::KeyRing {
        &self.keys
    }

    pub fn has_issuer(&self) -> bool {
        self.jwt.is_some()
    }

    /// An API key (from `x-api-key` or `identity.api_key`).
    pub fn api_key(&self, key: &str) -> Result<Grant, Refused> {
        self.keys.lookup(key)
    }

    /// A bearer token (`Authorization: Bearer` or `identity.auth_token`): a JWT access token
    /// when it has a JWT's shape, otherwise an API key.
    pub fn bearer(&self, token: &str) -> Result<Grant, Refused> {
        if !jwt::looks_like_jwt(token) {
            return self.api_key(token);
        }
        match &self.jwt {
            Some(verifier) => verifier.verify(token).and_then(|g| {
                // A token names a tenant: it can never be the operator's.
                if g.role == Role::Operator {
                    Err(Refused(
                        "an access token cannot carry the operator role".into(),
                    ))
                } else {
                    Ok(g)
                }
            }),
            None => Err(Refused(
                "access tokens are not accepted here: no token issuer is configured".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered() {
        assert!(Role::Read < Role::Write && Role::Write < Role::Admin);
        assert_eq!("WRITE".parse::<Role>().unwrap(), Role::Write);
        assert!("owner".parse::<Role>().is_err());
    }

    #[test]
    fn scope_covers_its_subtree_only() {
        let g = Grant {
            tenant: "t".into(),
            role: Role::Read,
            scope: vec!["sales".into()],
            principal: "k".into(),
        };
        assert!(g.covers(&["sales".into(), "orders".into()]));
        assert!(g.covers(&["sales".into()]));
        assert!(!g.covers(&["salesforce".into()]));
        assert!(!g.covers(&[]));
    }

    #[test]
    fn tenant_names_are_plain() {
        assert!(check_tenant_name("acme-1").is_ok());
        for bad in ["", "Acme", "a/b", "..", "-x", &"a".repeat(65)] {
            assert!(check_tenant_name(bad).is_err(), "{bad}");
        }
    }
}
