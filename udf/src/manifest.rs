//! The UDF manifest: what the module is (sha256, size), which export to call, its config and
//! limits. It is accepted only if its exact bytes hash to the `manifest_checksum` sent with it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::UdfError;
use crate::limits::LimitsOverride;

/// The only `abi` value this runtime accepts.
pub const ABI_NAME: &str = "lancet-udf/1";
/// The newest `lancet_abi_version()` this runtime speaks. Version 2 is version 1 plus
/// gathered results (the guest lists byte ranges instead of writing one stream).
pub const ABI_VERSION: i32 = 2;
/// The oldest version still run (version-1 modules work unchanged).
pub const OLDEST_ABI_VERSION: i32 = 1;
/// Modules larger than this are refused before hashing or compiling.
pub const MAX_MODULE_BYTES: u64 = 64 << 20;

/// What happens to rows whose call fails (guest error or trap; limit hits always fail).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The whole call fails.
    #[default]
    Fail,
    /// The failing rows (found by bisecting the batch) become null and are counted.
    Null,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// ABI name and version: `lancet-udf/1`.
    pub abi: String,
    /// sha256 of the module bytes, lowercase hex.
    pub module_sha256: String,
    pub module_size: u64,
    /// The exported entry point to call.
    pub entry: String,
    /// Passed to the guest's `lancet_init` as a JSON object of strings.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Lower limits than the server's, if the author wants them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsOverride>,
    #[serde(default)]
    pub on_error: OnError,
}

/// Lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl Manifest {
    /// Checks `sha256(text) == checksum_hex`, then parses and validates. Nothing in the text is
    /// looked at before the checksum matches.
    pub fn parse_verified(text: &str, checksum_hex: &str) -> Result<Manifest, UdfError> {
        let expected = checksum_hex.trim().to_ascii_lowercase();
        if !is_sha256_hex(&expected) {
            return Err(UdfError::BadManifest(format!(
                "manifest_checksum must be 64 hex characters (sha256), got {checksum_hex:?}"
            )));
        }
        let actual = sha256_hex(text.as_bytes());
        if actual != expected {
            return Err(UdfError::ManifestChecksumMismatch { expected, actual });
        }
        Self::parse(text)
    }

    /// Parses and validates without a checksum (for manifests already stored by the server).
    pub fn parse(text: &str) -> Result<Manifest, UdfError> {
        let manifest: Manifest =
            serde_json::from_str(text).map_err(|e| UdfError::BadManifest(e.to_string()))?;
        manifest.validate()?;
        Ok(manifest)
    }

    pub fn validate(&self) -> Result<(), UdfError> {
        let bad = |msg: String| Err(UdfError::BadManifest(msg));
        if self.abi != ABI_NAME {
            return bad(format!(
                "abi is {:?}; this server supports {ABI_NAME:?}",
                self.abi
            ));
        }
        if !is_sha256_hex(&self.module_sha256) {
            return bad("module_sha256 must be 64 lowercase hex characters".into());
        }
        if self.module_size == 0 || self.module_size > MAX_MODULE_BYTES {
            return bad(format!(
                "module_size must be between 1 and {MAX_MODULE_BYTES} bytes, got {}",
                self.module_size
            ));
        }
        let entry_ok = !self.entry.is_empty()
            && self.entry.len() <= 128
            && self
                .entry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !self.entry.starts_with("lancet_");
        if !entry_ok {
            return bad(format!(
                "entry {:?} must be 1-128 characters of [A-Za-z0-9_] not starting with `lancet_`",
                self.entry
            ));
        }
        if self.config.keys().any(|k| k.is_empty()) {
            return bad("config keys must not be empty".into());
        }
        if let Some(l) = &self.limits {
            let zero = [
                l.timeout_ms.map(|v| v as usize),
                l.max_memory_bytes,
                l.max_output_bytes,
                l.max_rows_per_call,
            ]
            .contains(&Some(0));
            if zero {
                return bad("limits must be positive".into());
            }
        }
        Ok(())
    }

    /// The manifest as JSON text (what `package` writes and checksums).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a manifest always serialises")
    }

    /// How errors and logs name this UDF: `entry@` and the first 12 hex digits of the module.
    pub fn label(&self) -> String {
        format!("{}@{}", self.entry, &self.module_sha256[..12])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            abi: ABI_NAME.into(),
            module_sha256: sha256_hex(b"module"),
            module_size: 6,
            entry: "score".into(),
            config: BTreeMap::from([("weight_a".into(), "0.5".into())]),
            limits: None,
            on_error: OnError::Fail,
        }
    }

    #[test]
    fn round_trips_and_verifies_checksum() {
        let text = sample().to_json();
        let sum = sha256_hex(text.as_bytes());
        assert_eq!(Manifest::parse_verified(&text, &sum).unwrap(), sample());
        assert_eq!(
            Manifest::parse_verified(&text, &sum.to_uppercase()).unwrap(),
            sample()
        );
        let err = Manifest::parse_verified(&format!("{text} "), &sum).unwrap_err();
        assert!(
            matches!(err, UdfError::ManifestChecksumMismatch { .. }),
            "{err}"
        );
        assert!(err.is_definition_error());
        let err = Manifest::parse_verified(&text, "abc").unwrap_err();
        assert!(matches!(err, UdfError::BadManifest(_)), "{err}");
    }

    #[test]
    fn rejects_invalid_fields() {
        type Mutation = Box<dyn Fn(&mut Manifest)>;
        let cases: Vec<(&str, Mutation)> = vec![
            ("abi", Box::new(|m| m.abi = "lancet-udf/2".into())),
            ("sha", Box::new(|m| m.module_sha256 = "ABC".into())),
            ("size", Box::new(|m| m.module_size = 0)),
            ("entry", Box::new(|m| m.entry = "lancet_alloc".into())),
            ("entry chars", Box::new(|m| m.entry = "a-b".into())),
            (
                "limits",
                Box::new(|m| {
                    m.limits = Some(LimitsOverride {
                        timeout_ms: Some(0),
                        ..Default::default()
                    })
                }),
            ),
        ];
        for (what, mutate) in cases {
            let mut m = sample();
            mutate(&mut m);
            assert!(Manifest::parse(&m.to_json()).is_err(), "{what} should fail");
        }
        let unknown = sample().to_json().replacen('{', "{\"surprise\": 1,", 1);
        assert!(Manifest::parse(&unknown).is_err());
        let with_defaults =
            r#"{"abi":"lancet-udf/1","module_sha256":"SHA","module_size":3,"entry":"f"}"#
                .replace("SHA", &sha256_hex(b"x"));
        let m = Manifest::parse(&with_defaults).unwrap();
        assert_eq!((m.on_error, m.config.len()), (OnError::Fail, 0));
        assert!(Manifest::parse(&with_defaults.replace("}", r#","on_error":"null"}"#)).is_ok());
    }
}

/// Property tests: any text, and JSON objects with plausible and hostile values in every
/// field, parse to a valid manifest or are refused as a definition error (the HTTP layer's
/// 400), never a panic; what parses can be labelled, written back and re-read unchanged.
/// Cases: proptest's default (256) or `PROPTEST_CASES`.
#[cfg(test)]
mod props {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use crate::Limits;

    fn number() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            Just(json!(0)),
            Just(json!(u64::MAX)),
            Just(json!("12")),
            Just(Value::Null),
        ]
    }

    fn text() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<String>().prop_map(Value::from),
            "[a-z_]{0,8}".prop_map(Value::from),
            Just(json!("lancet_init")),
            Just(json!(ABI_NAME)),
            Just(json!("f".repeat(64))),
            Just(json!("F".repeat(64))),
            Just(json!(1)),
        ]
    }

    fn manifest() -> impl Strategy<Value = String> {
        let limits = prop_oneof![
            Just(Value::Null),
            (number(), number(), number(), number()).prop_map(|(a, b, c, d)| json!({
                "timeout_ms": a, "max_memory_bytes": b, "max_output_bytes": c, "max_rows_per_call": d
            })),
            text(),
        ];
        let config = prop_oneof![
            prop::collection::btree_map(any::<String>(), any::<String>(), 0..3)
                .prop_map(|m| json!(m)),
            Just(json!({"k": 1})),
            Just(json!([])),
        ];
        (
            prop_oneof![Just(json!(ABI_NAME)), text()],
            prop_oneof![Just(json!("ab".repeat(32))), text()],
            prop_oneof![Just(json!(1024)), number()],
            prop_oneof![Just(json!("slugify")), text()],
            config,
            limits,
            prop_oneof![Just(json!("fail")), Just(json!("null")), text()],
            any::<bool>(),
        )
            .prop_map(|(abi, sha, size, entry, config, limits, on_error, extra)| {
                let mut m = json!({
                    "abi": abi, "module_sha256": sha, "module_size": size, "entry": entry,
                    "config": config, "on_error": on_error,
                });
                if !limits.is_null() {
                    m["limits"] = limits;
                }
                if extra {
                    m["unexpected"] = json!(true);
                }
                m.to_string()
            })
    }

    fn check(text: &str) -> Result<(), TestCaseError> {
        match Manifest::parse(text) {
            Ok(m) => {
                let _ = m.label();
                let again = Manifest::parse(&m.to_json());
                prop_assert!(again.as_ref().is_ok_and(|a| *a == m), "{:?}", again);
                let _ = Limits::default().tightened_by(m.limits.as_ref());
            }
            Err(e) => prop_assert!(e.is_definition_error(), "{e}"),
        }
        let checksum = sha256_hex(text.as_bytes());
        if let Err(e) = Manifest::parse_verified(text, &checksum) {
            prop_assert!(e.is_definition_error(), "{e}");
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn any_text(text in any::<String>()) {
            check(&text)?;
        }

        #[test]
        fn json_objects(text in manifest()) {
            check(&text)?;
        }

        #[test]
        fn truncated_json(text in manifest(), cut in any::<prop::sample::Index>()) {
            let at = cut.index(text.len() + 1);
            if text.is_char_boundary(at) {
                check(&text[..at])?;
            }
        }

        #[test]
        fn any_checksum(text in manifest(), checksum in any::<String>()) {
            if let Err(e) = Manifest::parse_verified(&text, &checksum) {
                prop_assert!(e.is_definition_error(), "{e}");
            }
        }
    }
}
