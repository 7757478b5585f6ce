//! What a module must look like to be run: only allow-listed imports, and the ABI's exports
//! with the ABI's signatures. Checked on every module before it is ever instantiated.

use wasmtime::{ExternType, FuncType, Module, ValType};

use crate::UdfError;

/// `\0asm` and binary format version 1.
const WASM_HEADER: [u8; 8] = [0, b'a', b's', b'm', 1, 0, 0, 0];

/// Cheap first check on raw bytes, before hashing work is stored or anything is compiled.
pub(crate) fn check_header(bytes: &[u8]) -> Result<(), UdfError> {
    if bytes.starts_with(&WASM_HEADER) {
        return Ok(());
    }
    let what = if bytes.starts_with(b"\0asm") {
        "a WebAssembly component or unsupported binary version; a core module (version 1) is required"
            .to_string()
    } else {
        let head = &bytes[..bytes.len().min(8)];
        format!("it starts with {head:02x?}, not the WebAssembly magic `\\0asm`")
    };
    Err(UdfError::NotWasm(what))
}

fn sig_matches(ty: &FuncType, params: &[ValType], results: &[ValType]) -> bool {
    ty.params().len() == params.len()
        && ty.results().len() == results.len()
        && ty.params().zip(params).all(|(a, b)| ValType::eq(&a, b))
        && ty.results().zip(results).all(|(a, b)| ValType::eq(&a, b))
}

fn sig_text(params: &[ValType], results: &[ValType]) -> String {
    let list = |v: &[ValType]| {
        v.iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("fn({}) -> ({})", list(params), list(results))
}

fn require_func(
    module: &Module,
    name: &str,
    params: &[ValType],
    results: &[ValType],
    optional: bool,
) -> Result<bool, UdfError> {
    let wanted = || sig_text(params, results);
    match module.get_export(name) {
        None if optional => Ok(false),
        None => Err(UdfError::MissingExport {
            name: name.into(),
            detail: format!("not exported; expected {}", wanted()),
        }),
        Some(ExternType::Func(ty)) if sig_matches(&ty, params, results) => Ok(true),
        Some(other) => Err(UdfError::MissingExport {
            name: name.into(),
            detail: format!("exported as {other:?}; expected {}", wanted()),
        }),
    }
}

/// Checks imports against the allow-list and the ABI exports; `entry` too when given.
/// Returns whether the module exports `lancet_init`.
pub(crate) fn check_interface(module: &Module, entry: Option<&str>) -> Result<bool, UdfError> {
    use ValType::{I32, I64};
    for import in module.imports() {
        let allowed = import.module() == "lancet"
            && match (import.name(), import.ty()) {
                ("log", ExternType::Func(ty)) => sig_matches(&ty, &[I32, I32], &[]),
                ("embed", ExternType::Func(ty)) => sig_matches(&ty, &[I32, I32], &[I64]),
                ("embed_take", ExternType::Func(ty)) => sig_matches(&ty, &[I32, I32], &[I32]),
                _ => false,
            };
        if !allowed {
            return Err(UdfError::ForbiddenImport {
                module: import.module().to_string(),
                name: import.name().to_string(),
            });
        }
    }
    match module.get_export("memory") {
        Some(ExternType::Memory(m)) if !m.is_64() && !m.is_shared() => {}
        _ => {
            return Err(UdfError::MissingExport {
                name: "memory".into(),
                detail: "a 32-bit, unshared linear memory must be exported as `memory`".into(),
            });
        }
    }
    require_func(module, "lancet_abi_version", &[], &[I32], false)?;
    require_func(module, "lancet_alloc", &[I32], &[I32], false)?;
    require_func(module, "lancet_free", &[I32, I32], &[], false)?;
    let has_init = require_func(module, "lancet_init", &[I32, I32], &[I64], true)?;
    if let Some(entry) = entry {
        require_func(module, entry, &[I32, I32], &[I64], false)?;
    }
    Ok(has_init)
}

/// Maps a wasmtime compile error on bytes that passed [`check_header`].
pub(crate) fn compile_error(err: wasmtime::Error) -> UdfError {
    UdfError::InvalidModule(format!("{err:#}"))
}
