//! OAuth 2.0 access tokens in JWT form, verified with `jsonwebtoken` against one configured
//! issuer key. Signature, `exp` (required), `nbf`, `iss` and `aud` are all checked; the
//! tenant, role and namespace subtree come from claims whose names are configurable.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Grant, Refused, Role, check_tenant_name};

/// `[jwt]` in the auth file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// Required `iss`.
    pub issuer: String,
    /// Required `aud` (one of the token's audiences).
    pub audience: String,
    /// RS256, ES256 or HS256.
    pub algorithm: String,
    /// PEM public key (RS256/ES256), inline ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_pem: Option<String>,
    /// ... or in a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_file: Option<String>,
    /// Shared secret (HS256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    #[serde(default = "tenant_claim")]
    pub tenant_claim: String,
    #[serde(default = "role_claim")]
    pub role_claim: String,
    #[serde(default = "namespace_claim")]
    pub namespace_claim: String,
    /// Clock skew allowed on `exp`/`nbf`.
    #[serde(default = "leeway")]
    pub leeway_seconds: u64,
}

fn tenant_claim() -> String {
    "tenant".into()
}
fn role_claim() -> String {
    "role".into()
}
fn namespace_claim() -> String {
    "namespace".into()
}
fn leeway() -> u64 {
    30
}

/// Three base64url parts whose first decodes to a JSON header naming an algorithm.
pub fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3 && jsonwebtoken::decode_header(token).is_ok()
}

pub struct Verifier {
    config: JwtConfig,
    key: DecodingKey,
    validation: Validation,
}

impl Verifier {
    pub fn new(config: &JwtConfig) -> Result<Self, String> {
        let algorithm = match config.algorithm.to_ascii_uppercase().as_str() {
            "RS256" => Algorithm::RS256,
            "ES256" => Algorithm::ES256,
            "HS256" => Algorithm::HS256,
            other => {
                return Err(format!(
                    "jwt.algorithm '{other}': use RS256, ES256 or HS256"
                ));
            }
        };
        let pem = || -> Result<Vec<u8>, String> {
            match (&config.public_key_pem, &config.public_key_file) {
                (Some(pem), _) => Ok(pem.as_bytes().to_vec()),
                (None, Some(file)) => {
                    std::fs::read(file).map_err(|e| format!("jwt.public_key_file {file}: {e}"))
                }
                (None, None) => Err(format!(
                    "jwt: {} needs public_key_pem or public_key_file",
                    config.algorithm
                )),
            }
        };
        let key = match algorithm {
            Algorithm::RS256 => DecodingKey::from_rsa_pem(&pem()?),
            Algorithm::ES256 => DecodingKey::from_ec_pem(&pem()?),
            _ => match &config.secret {
                Some(s) if s.len() >= 32 => Ok(DecodingKey::from_secret(s.as_bytes())),
                _ => return Err("jwt: HS256 needs a secret of at least 32 bytes".into()),
            },
        }
        .map_err(|e| format!("jwt key: {e}"))?;
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = config.leeway_seconds;
        Ok(Self {
            config: config.clone(),
            key,
            validation,
        })
    }

    pub fn verify(&self, token: &str) -> Result<Grant, Refused> {
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(
            token,
            &self.key,
            &self.validation,
        )
        .map_err(|e| {
            Refused(
                match e.kind() {
                    ErrorKind::ExpiredSignature => "access token expired",
                    ErrorKind::ImmatureSignature => "access token not yet valid (nbf)",
                    ErrorKind::InvalidAudience => "access token has the wrong audience",
                    ErrorKind::InvalidIssuer => "access token has the wrong issuer",
                    ErrorKind::InvalidSignature => "access token signature does not verify",
                    ErrorKind::InvalidAlgorithm => {
                        "access token uses an algorithm not accepted here"
                    }
                    ErrorKind::MissingRequiredClaim(_) => {
                        "access token lacks a required claim (exp, iss, aud)"
                    }
                    _ => "malformed access token",
                }
                .to_string(),
            )
        })?;
        let claims = data.claims;
        let tenant = claims
            .get(&self.config.tenant_claim)
            .and_then(Value::as_str)
            .ok_or_else(|| {
                Refused(format!(
                    "access token has no '{}' claim",
                    self.config.tenant_claim
                ))
            })?;
        check_tenant_name(tenant).map_err(Refused)?;
        let role = role_of(claims.get(&self.config.role_claim), claims.get("scope"))
            .ok_or_else(|| Refused(format!(
                "access token grants no role: set '{}' to read, write or admin (or scope lancet:<role>)",
                self.config.role_claim
            )))?;
        let scope = match claims.get(&self.config.namespace_claim) {
            None | Some(Value::Null) => vec![],
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(levels)) => levels
                .iter()
                .map(|l| l.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| Refused("access token namespace claim must hold strings".into()))?,
            Some(_) => {
                return Err(Refused(
                    "access token namespace claim must be a string or an array".into(),
                ));
            }
        };
        let subject = claims.get("sub").and_then(Value::as_str).unwrap_or("?");
        Ok(Grant {
            tenant: tenant.to_string(),
            role,
            scope,
            principal: format!("token:{subject}"),
        })
    }
}

/// The role claim, else the highest `lancet:<role>` in an OAuth `scope` string.
fn role_of(role: Option<&Value>, scope: Option<&Value>) -> Option<Role> {
    if let Some(r) = role.and_then(Value::as_str) {
        return r.parse().ok();
    }
    scope?
        .as_str()?
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("lancet:")?.parse::<Role>().ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header, encode};
    use serde_json::json;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn verifier() -> Verifier {
        Verifier::new(&JwtConfig {
            issuer: "https://issuer.test".into(),
            audience: "lancet".into(),
            algorithm: "HS256".into(),
            public_key_pem: None,
            public_key_file: None,
            secret: Some(SECRET.into()),
            tenant_claim: tenant_claim(),
            role_claim: role_claim(),
            namespace_claim: namespace_claim(),
            leeway_seconds: 0,
        })
        .unwrap()
    }

    fn token(claims: Value) -> String {
        encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .unwrap()
    }

    fn now() -> i64 {
        chrono::Utc::now().timestamp()
    }

    #[test]
    fn valid_token_grants_its_claims() {
        let t = token(
            json!({"iss": "https://issuer.test", "aud": "lancet", "exp": now() + 60,
            "tenant": "acme", "scope": "openid lancet:read lancet:write", "namespace": ["a", "b"], "sub": "u1"}),
        );
        assert!(looks_like_jwt(&t));
        let g = verifier().verify(&t).unwrap();
        assert_eq!(g.tenant, "acme");
        assert_eq!(g.role, Role::Write);
        assert_eq!(g.scope, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(g.principal, "token:u1");
    }

    #[test]
    fn bad_tokens_are_refused_with_a_reason() {
        let v = verifier();
        let base = json!({"iss": "https://issuer.test", "aud": "lancet", "exp": now() + 60, "tenant": "acme", "role": "read"});
        let with = |k: &str, val: Value| {
            let mut c = base.clone();
            c[k] = val;
            token(c)
        };
        let cases = [
            (with("exp", json!(now() - 10)), "expired"),
            (with("nbf", json!(now() + 600)), "not yet valid"),
            (with("aud", json!("other")), "audience"),
            (with("iss", json!("https://evil")), "issuer"),
            (with("role", json!("owner")), "no role"),
            (with("tenant", json!("../etc")), "tenant name"),
        ];
        for (t, why) in cases {
            let err = v.verify(&t).unwrap_err();
            assert!(err.0.contains(why), "{why}: {}", err.0);
        }
        let mut forged = token(base.clone());
        forged.pop();
        forged.push('x');
        assert!(v.verify(&forged).is_err());
        let no_exp = token(
            json!({"iss": "https://issuer.test", "aud": "lancet", "tenant": "acme", "role": "read"}),
        );
        assert!(v.verify(&no_exp).unwrap_err().0.contains("required claim"));
    }

    #[test]
    fn api_keys_do_not_look_like_tokens() {
        assert!(!looks_like_jwt("lk_0123456789abcdef"));
        assert!(!looks_like_jwt("a.b.c"));
    }
}
