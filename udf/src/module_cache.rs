//! Compiled modules: kept in memory by sha256, precompiled on disk by sha256 and engine
//! compatibility key, compiled with cranelift only when neither has them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::{Engine, InstancePre, Linker, Module};

use crate::UdfError;
use crate::instance::HostState;
use crate::manifest::sha256_hex;
use crate::module_check::{check_header, check_interface, compile_error};

/// A module ready to instantiate.
pub(crate) struct CompiledModule {
    pub(crate) sha256: String,
    pub(crate) module: Module,
    pub(crate) pre: InstancePre<HostState>,
    pub(crate) has_init: bool,
}

#[derive(Default)]
pub(crate) struct CacheCounters {
    pub(crate) compiled: AtomicU64,
    pub(crate) loaded_from_disk: AtomicU64,
    /// Total time spent in cranelift compiles / precompiled-code loads, in nanoseconds.
    pub(crate) compile_nanos: AtomicU64,
    pub(crate) load_nanos: AtomicU64,
}

fn add_elapsed(counter: &AtomicU64, since: Instant) {
    counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

pub(crate) struct ModuleCache {
    engine: Engine,
    linker: Linker<HostState>,
    module_dir: PathBuf,
    cache_dir: PathBuf,
    compat: String,
    loaded: Mutex<HashMap<String, Arc<CompiledModule>>>,
    shared: Option<Arc<dyn crate::runtime::SharedModules>>,
    /// Serialises loading so two callers never compile the same module at once.
    loading: Mutex<()>,
    pub(crate) counters: CacheCounters,
}

impl ModuleCache {
    pub(crate) fn new(
        engine: Engine,
        linker: Linker<HostState>,
        module_dir: PathBuf,
        cache_dir: PathBuf,
        compat: String,
        shared: Option<Arc<dyn crate::runtime::SharedModules>>,
    ) -> Self {
        Self {
            engine,
            linker,
            module_dir,
            cache_dir,
            compat,
            loaded: Mutex::default(),
            shared,
            loading: Mutex::default(),
            counters: CacheCounters::default(),
        }
    }

    pub(crate) fn module_path(&self, sha256: &str) -> PathBuf {
        self.module_dir.join(format!("{sha256}.wasm"))
    }

    /// Copy a module from the shared store into `module_dir`; false when the shared store
    /// does not have it (or there is none). Bytes that do not match their name are refused.
    pub(crate) fn fetch_shared(&self, sha256: &str) -> Result<bool, UdfError> {
        let Some(shared) = &self.shared else {
            return Ok(false);
        };
        let Some(bytes) = shared.fetch(sha256).map_err(UdfError::Internal)? else {
            return Ok(false);
        };
        check_named(sha256, &bytes)?;
        write_atomically(&self.module_path(sha256), &bytes)?;
        Ok(true)
    }

    fn precompiled_path(&self, sha256: &str) -> PathBuf {
        self.cache_dir
            .join(format!("{sha256}-{}.cwasm", self.compat))
    }

    fn cached(&self, sha256: &str) -> Option<Arc<CompiledModule>> {
        let loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        loaded.get(sha256).cloned()
    }

    /// The compiled module for `sha256`, from memory, disk, or a fresh compile.
    pub(crate) fn get(&self, sha256: &str) -> Result<Arc<CompiledModule>, UdfError> {
        if let Some(m) = self.cached(sha256) {
            return Ok(m);
        }
        let _loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = self.cached(sha256) {
            return Ok(m);
        }
        let module = match self.load_precompiled(sha256) {
            Some(module) => module,
            None => self.compile(sha256)?,
        };
        let has_init = check_interface(&module, None)?;
        let pre = self
            .linker
            .instantiate_pre(&module)
            .map_err(|e| UdfError::InvalidModule(format!("{e:#}")))?;
        let compiled = Arc::new(CompiledModule {
            sha256: sha256.to_string(),
            module,
            pre,
            has_init,
        });
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        loaded.insert(sha256.to_string(), compiled.clone());
        Ok(compiled)
    }

    fn load_precompiled(&self, sha256: &str) -> Option<Module> {
        let path = self.precompiled_path(sha256);
        if !path.exists() {
            return None;
        }
        // SAFETY: deserialising trusts the file to be wasmtime output for this engine. Only
        // this cache writes into cache_dir (atomically, via rename), and the name carries the
        // module's sha256 and the engine's compatibility key; wasmtime also re-checks its own
        // header and engine settings and refuses a mismatch.
        let start = Instant::now();
        match unsafe { Module::deserialize_file(&self.engine, &path) } {
            Ok(module) => {
                add_elapsed(&self.counters.load_nanos, start);
                self.counters
                    .loaded_from_disk
                    .fetch_add(1, Ordering::Relaxed);
                Some(module)
            }
            Err(err) => {
                tracing::warn!(
                    "discarding unusable precompiled module {}: {err:#}",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    fn compile(&self, sha256: &str) -> Result<Module, UdfError> {
        let path = self.module_path(sha256);
        if !path.exists() {
            self.fetch_shared(sha256)?;
        }
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(UdfError::ModuleNotStored {
                    sha256: sha256.to_string(),
                });
            }
            Err(e) => return Err(UdfError::io(format!("reading {}", path.display()), e)),
        };
        check_named(sha256, &bytes)?;
        let start = Instant::now();
        let module = Module::new(&self.engine, &bytes).map_err(compile_error)?;
        add_elapsed(&self.counters.compile_nanos, start);
        self.counters.compiled.fetch_add(1, Ordering::Relaxed);
        // Checked before caching so a rejected module is never written as precompiled code.
        check_interface(&module, None)?;
        if let Err(e) = self.write_precompiled(sha256, &module) {
            tracing::warn!("could not cache precompiled module {sha256}: {e}");
        }
        Ok(module)
    }

    fn write_precompiled(&self, sha256: &str, module: &Module) -> Result<(), UdfError> {
        let bytes = module
            .serialize()
            .map_err(|e| UdfError::Internal(format!("{e:#}")))?;
        write_atomically(&self.precompiled_path(sha256), &bytes)
    }
}

/// The store is content-addressed: bytes that do not match their name are corrupt (or not the
/// module asked for), and are refused before anything compiles them.
fn check_named(sha256: &str, bytes: &[u8]) -> Result<(), UdfError> {
    let actual = sha256_hex(bytes);
    if actual != sha256 {
        return Err(UdfError::ModuleChecksumMismatch {
            expected: sha256.to_string(),
            actual,
        });
    }
    check_header(bytes)
}

/// Writes via a temporary file and rename, so readers never see a partial file.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), UdfError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| UdfError::io(format!("creating {}", dir.display()), e))?;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}-{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&tmp, bytes)
        .map_err(|e| UdfError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        UdfError::io(format!("renaming into {}", path.display()), e)
    })
}
