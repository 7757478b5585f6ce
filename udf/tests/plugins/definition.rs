//! Bad definitions are refused before anything runs, with a definition error (HTTP 400).

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array};
use lancet_udf::{
    Manifest, Runtime, RuntimeConfig, UdfError, decode_module_base64, package, sha256_hex,
};

use crate::common::{batch, define, limits, manifest, shared, wasm};

fn assert_definition_error(err: &UdfError) {
    assert!(
        err.is_definition_error(),
        "should be a definition error: {err}"
    );
}

#[test]
fn checksum_mismatches_store_nothing() {
    let rt = shared();
    let module = wasm("identity_i64");
    let m = manifest(&module, "identity_i64", &[]);
    let text = m.to_json();
    let err = Manifest::parse_verified(&text, &sha256_hex(b"something else")).unwrap_err();
    assert!(
        matches!(err, UdfError::ManifestChecksumMismatch { .. }),
        "{err}"
    );
    assert_definition_error(&err);

    let mut other = wasm("slugify");
    other.push(0); // bytes no test stores, so "nothing stored" is observable
    let mut lying = manifest(&other, "x", &[]);
    lying.module_sha256 = sha256_hex(b"not these bytes");
    let err = rt.store_module(&lying, Some(&other)).unwrap_err();
    assert!(
        matches!(err, UdfError::ModuleChecksumMismatch { .. }),
        "{err}"
    );
    assert_definition_error(&err);
    assert!(!rt.has_module(&lying.module_sha256) && !rt.has_module(&sha256_hex(&other)));

    let mut wrong_size = manifest(&other, "x", &[]);
    wrong_size.module_size += 1;
    let err = rt.store_module(&wrong_size, Some(&other)).unwrap_err();
    assert!(matches!(err, UdfError::ModuleSizeMismatch { .. }), "{err}");
    assert!(!rt.has_module(&sha256_hex(&other)));

    let unknown = manifest(b"never stored", "x", &[]);
    let err = rt.store_module(&unknown, None).unwrap_err();
    assert!(matches!(err, UdfError::ModuleNotStored { .. }), "{err}");
    assert_definition_error(&err);
}

#[test]
fn garbage_is_not_a_module() {
    let err = decode_module_base64("%%% definitely not base64 %%%").unwrap_err();
    assert_definition_error(&err);
    let rt = shared();
    let bytes = b"#!/bin/sh\necho pwned\n".to_vec();
    let m = manifest(&bytes, "x", &[]);
    let err = rt.store_module(&m, Some(&bytes)).unwrap_err();
    assert!(matches!(err, UdfError::NotWasm(_)), "{err}");
    assert_definition_error(&err);
    assert!(!rt.has_module(&m.module_sha256));
}

#[test]
fn forbidden_imports_are_refused_by_name() {
    let rt = shared();
    for (plugin, import) in [
        ("wasi_import", "wasi_snapshot_preview1.fd_write"),
        ("unknown_import", "env.launch_missiles"),
    ] {
        let err = define(rt, plugin, "udf", &[]).unwrap_err();
        assert!(matches!(err, UdfError::ForbiddenImport { .. }), "{err}");
        assert!(err.to_string().contains(import), "{err}");
        assert_definition_error(&err);
    }
}

#[test]
fn abi_version_and_exports_are_checked() {
    let rt = shared();
    let err = define(rt, "wrong_abi", "udf", &[]).unwrap_err();
    assert!(
        matches!(
            err,
            UdfError::AbiMismatch {
                found: 3,
                expected: 2
            }
        ),
        "{err}"
    );
    assert_definition_error(&err);
    let err = define(rt, "no_entry", "udf", &[]).unwrap_err();
    assert!(
        matches!(err, UdfError::MissingExport { ref name, .. } if name == "udf"),
        "{err}"
    );
    assert_definition_error(&err);
    let err = define(rt, "misbehave", "bad_signature", &[]).unwrap_err();
    assert!(matches!(err, UdfError::MissingExport { .. }), "{err}");
    assert!(err.to_string().contains("fn(i32, i32) -> (i64)"), "{err}");
    let err = define(rt, "misbehave", "spin", &[("fail_init", "no thanks")]).unwrap_err();
    assert!(matches!(err, UdfError::Init { .. }), "{err}");
    assert!(err.to_string().contains("init refused: no thanks"), "{err}");
    assert_definition_error(&err);
}

#[test]
fn precompiled_modules_are_reloaded_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = RuntimeConfig::new(dir.path().join("modules"), dir.path().join("compiled"));
    let module = wasm("identity_i64");
    let m = manifest(&module, "identity_i64", &[]);
    let col: ArrayRef = Arc::new(Int64Array::from(vec![5, 6]));
    let input = batch(vec![("x", col.clone())]);
    let run = |rt: &Runtime| {
        let udf = rt.prepare(&m).unwrap();
        assert_eq!(
            &rt.invoke(&udf, "t", &input, None, &limits()).unwrap(),
            &col
        );
    };

    let first = Runtime::new(cfg.clone()).unwrap();
    first.store_module(&m, Some(&module)).unwrap();
    run(&first);
    assert_eq!(
        (first.stats().compiled, first.stats().loaded_from_disk),
        (1, 0)
    );
    run(&first);
    assert_eq!(first.stats().compiled, 1, "in-memory cache");
    drop(first);

    let second = Runtime::new(cfg.clone()).unwrap();
    second.store_module(&m, None).unwrap();
    run(&second);
    assert_eq!(
        (second.stats().compiled, second.stats().loaded_from_disk),
        (0, 1)
    );
    drop(second);

    // A damaged cache file is discarded and the module compiled again.
    for entry in std::fs::read_dir(&cfg.cache_dir).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let third = Runtime::new(cfg).unwrap();
    run(&third);
    assert_eq!(
        (third.stats().compiled, third.stats().loaded_from_disk),
        (1, 0)
    );
}

#[test]
fn package_writes_a_verifiable_manifest() {
    let module = wasm("slugify");
    let packaged = package(&module, "slugify", [("k".into(), "v".into())].into()).unwrap();
    let m = Manifest::parse_verified(&packaged.manifest_text, &packaged.manifest_checksum).unwrap();
    assert_eq!(m.module_sha256, sha256_hex(&module));
    assert_eq!(m.module_size, module.len() as u64);
    assert_eq!(m.config.get("k").map(String::as_str), Some("v"));
    let err = package(&module, "nope", Default::default()).unwrap_err();
    assert!(matches!(err, UdfError::MissingExport { .. }), "{err}");
}
