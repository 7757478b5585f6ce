//! Producing a manifest for a module (the `lancet udf package` command), and decoding the
//! base64 module bytes a definition carries.

use std::collections::BTreeMap;

use base64::Engine as _;
use wasmtime::{Config, Engine, Module};

use crate::UdfError;
use crate::manifest::{ABI_NAME, Manifest, OnError, sha256_hex};
use crate::module_check::{check_header, check_interface, compile_error};

/// A packaged module: the manifest, its exact text, and the checksums to send with it.
#[derive(Debug, Clone)]
pub struct Packaged {
    pub manifest: Manifest,
    /// The manifest JSON; `manifest_checksum` is the sha256 of exactly these bytes.
    pub manifest_text: String,
    pub manifest_checksum: String,
    pub module_sha256: String,
}

/// Checks that `wasm` is a module this runtime would run with `entry` (compiling it once to
/// see its imports and exports) and writes its manifest.
pub fn package(
    wasm: &[u8],
    entry: &str,
    config: BTreeMap<String, String>,
) -> Result<Packaged, UdfError> {
    let manifest = Manifest {
        abi: ABI_NAME.to_string(),
        module_sha256: sha256_hex(wasm),
        module_size: wasm.len() as u64,
        entry: entry.to_string(),
        config,
        limits: None,
        on_error: OnError::Fail,
    };
    manifest.validate()?;
    check_header(wasm)?;
    let engine = Engine::new(&Config::new()).map_err(|e| UdfError::Internal(e.to_string()))?;
    let module = Module::new(&engine, wasm).map_err(compile_error)?;
    check_interface(&module, Some(entry))?;
    let manifest_text = manifest.to_json();
    Ok(Packaged {
        manifest_checksum: sha256_hex(manifest_text.as_bytes()),
        module_sha256: manifest.module_sha256.clone(),
        manifest,
        manifest_text,
    })
}

/// Decodes the standard-alphabet base64 of a module (padding optional, surrounding
/// whitespace ignored).
pub fn decode_module_base64(text: &str) -> Result<Vec<u8>, UdfError> {
    use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
    let text = text.trim();
    // The decoded module is refused above MAX_MODULE_BYTES anyway; refusing the text first
    // keeps a huge one from being decoded (an allocation of 3/4 its size) only to be refused.
    let longest = (crate::MAX_MODULE_BYTES as usize).div_ceil(3) * 4;
    if text.len() > longest {
        return Err(UdfError::BadModuleEncoding(format!(
            "{} base64 characters, more than a module of at most {} bytes takes",
            text.len(),
            crate::MAX_MODULE_BYTES
        )));
    }
    let decoded = if text.ends_with('=') {
        STANDARD.decode(text)
    } else {
        STANDARD_NO_PAD.decode(text)
    };
    decoded.map_err(|e| UdfError::BadModuleEncoding(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_garbage_is_a_definition_error() {
        assert_eq!(decode_module_base64(" AGFzbQ== ").unwrap(), b"\0asm");
        assert_eq!(decode_module_base64("AGFzbQ").unwrap(), b"\0asm");
        let huge = "A".repeat((crate::MAX_MODULE_BYTES as usize).div_ceil(3) * 4 + 4);
        let err = decode_module_base64(&huge).unwrap_err();
        assert!(
            err.to_string().contains("more than a module of at most"),
            "{err}"
        );
        for bad in ["not base64!", "AGFzbQ=", "AGF*bQ=="] {
            let err = decode_module_base64(bad).unwrap_err();
            assert!(err.is_definition_error(), "{err}");
        }
    }

    #[test]
    fn package_refuses_non_wasm() {
        let err = package(b"hello world", "f", BTreeMap::new()).unwrap_err();
        assert!(matches!(err, UdfError::NotWasm(_)), "{err}");
        let err = package(b"\0asm\x01\0\0\0\x99", "f", BTreeMap::new()).unwrap_err();
        assert!(matches!(err, UdfError::InvalidModule(_)), "{err}");
    }
}
