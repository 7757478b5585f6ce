//! The ONNX Runtime library, loaded once per process from a path the server is given.
//!
//! `ort` panics if any of its calls runs before a library is loaded, so every path into it
//! goes through [`environment`], which answers [`ModelError::Unavailable`] instead.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ort::environment::Environment;

use crate::error::ModelError;

static ENVIRONMENT: OnceLock<Result<Loaded, String>> = OnceLock::new();

struct Loaded {
    environment: Environment,
    path: PathBuf,
}

/// Loads ONNX Runtime from `library` (`libonnxruntime.so.1.31.x`) and makes the process's
/// one environment. Later calls return the first call's outcome, whatever path they name:
/// a process can hold one ONNX Runtime.
pub fn init(library: &Path) -> Result<(), ModelError> {
    let loaded = ENVIRONMENT.get_or_init(|| {
        let builder = ort::init_from(library)
            .map_err(|e| format!("cannot load ONNX Runtime from {}: {e}", library.display()))?;
        let environment = builder
            .with_name("lancet")
            .build()
            .map_err(|e| format!("cannot start ONNX Runtime: {e}"))?;
        Ok(Loaded {
            environment,
            path: library.to_path_buf(),
        })
    });
    loaded
        .as_ref()
        .map(|_| ())
        .map_err(|e| ModelError::Unavailable(e.clone()))
}

/// The library [`init`] loaded, if it succeeded.
pub fn loaded_from() -> Option<&'static Path> {
    match ENVIRONMENT.get() {
        Some(Ok(loaded)) => Some(&loaded.path),
        _ => None,
    }
}

pub(crate) fn environment() -> Result<&'static Environment, ModelError> {
    match ENVIRONMENT.get() {
        Some(Ok(loaded)) => Ok(&loaded.environment),
        Some(Err(e)) => Err(ModelError::Unavailable(e.clone())),
        None => Err(ModelError::Unavailable(
            "models need ONNX Runtime, and this server was started without it \
             (--onnxruntime PATH or LANCET_ONNXRUNTIME; scripts/setup.sh models fetches it)"
                .into(),
        )),
    }
}
