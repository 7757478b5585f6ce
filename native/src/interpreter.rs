use std::path::{Path, PathBuf};
use std::process::Command;

use crate::NativeError;

/// A host CPython the sandbox runs: where it lives and which version it is.
#[derive(Debug, Clone)]
pub struct Interpreter {
    /// The interpreter binary, symlinks resolved (a venv's `python` is its base's).
    pub executable: PathBuf,
    /// Its installation prefix (`sys.base_prefix`), bound read-only into the sandbox.
    pub prefix: PathBuf,
    /// `major.minor.micro`.
    pub version: String,
}

const PROBE: &str = "import json, os, sys; print(json.dumps({'executable': \
    os.path.realpath(sys.executable), 'prefix': os.path.realpath(sys.base_prefix), \
    'version': '%d.%d.%d' % sys.version_info[:3]}))";

impl Interpreter {
    /// Runs `python` once (isolated: no site, no environment) and records what it is.
    pub fn probe(python: &Path) -> Result<Self, NativeError> {
        let out = Command::new(python)
            .args(["-S", "-E", "-s", "-c", PROBE])
            .output()
            .map_err(|e| NativeError::Unavailable(format!("{}: {e}", python.display())))?;
        if !out.status.success() {
            return Err(NativeError::Unavailable(format!(
                "{} -c ... failed: {}",
                python.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        #[derive(serde::Deserialize)]
        struct Probe {
            executable: PathBuf,
            prefix: PathBuf,
            version: String,
        }
        let p: Probe = serde_json::from_slice(&out.stdout).map_err(|e| {
            NativeError::Unavailable(format!(
                "{} answered its probe oddly: {e}",
                python.display()
            ))
        })?;
        Ok(Interpreter {
            executable: p.executable,
            prefix: p.prefix,
            version: p.version,
        })
    }

    /// `major.minor`, the part that must match a pickled function's Python.
    pub fn minor(&self) -> &str {
        match self.version.match_indices('.').nth(1) {
            Some((i, _)) => &self.version[..i],
            None => &self.version,
        }
    }
}
