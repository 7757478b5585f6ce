//! The runtime: one engine, the module store and compile cache, prepared UDFs, and the
//! per-tenant instance pool. `invoke` lives in invoke.rs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::Engine;

use crate::UdfError;
use crate::engine::{EpochTicker, build_engine, build_linker, compatibility_key};
use crate::instance::GuestInstance;
use crate::limits::Limits;
use crate::manifest::{ABI_VERSION, MAX_MODULE_BYTES, Manifest, OLDEST_ABI_VERSION, sha256_hex};
use crate::module_cache::{CompiledModule, ModuleCache, write_atomically};
use crate::module_check::{check_header, check_interface};
use crate::pool::{InstanceKey, InstancePool};

/// A module store shared by several runtimes (every server node of one data root): modules are
/// published to it when stored, and fetched from it into the local `module_dir` (then a cache)
/// when a runtime needs one it has not seen. Fetched bytes are checked against their sha256 like
/// any other module.
pub trait SharedModules: Send + Sync {
    fn fetch(&self, sha256: &str) -> Result<Option<Vec<u8>>, String>;
    fn publish(&self, sha256: &str, bytes: &[u8]) -> Result<(), String>;
}

/// Where the runtime keeps modules and compiled code, and the server-wide limits.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// Content-addressed module store: `<sha256>.wasm`.
    pub module_dir: PathBuf,
    /// Precompiled code: `<sha256>-<engine compatibility key>.cwasm`.
    pub cache_dir: PathBuf,
    /// Server-wide limits. `max_memory_bytes` also sizes the pooling allocator's slots and
    /// `max_stack_bytes` the engine's wasm stack; per-call limits cannot exceed either.
    pub default_limits: Limits,
    /// Instance slots in the pooling allocator (live instances, idle or running).
    pub max_instances: u32,
    /// Idle instances kept per (tenant, UDF module + config).
    pub max_idle_per_key: usize,
    /// Where modules are kept for other nodes; `None` when `module_dir` is the only store.
    pub shared: Option<Arc<dyn SharedModules>>,
    /// The Python runner; `None`: Python UDFs are refused with a message saying so.
    pub python: Option<crate::PythonRunnerConfig>,
    /// Answers guests' `embed` calls; `None`: they get an error saying no models run here.
    pub embedder: Option<Arc<dyn crate::HostEmbed>>,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("module_dir", &self.module_dir)
            .field("cache_dir", &self.cache_dir)
            .field("default_limits", &self.default_limits)
            .field("max_instances", &self.max_instances)
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

impl RuntimeConfig {
    pub fn new(module_dir: impl Into<PathBuf>, cache_dir: impl Into<PathBuf>) -> Self {
        Self {
            module_dir: module_dir.into(),
            cache_dir: cache_dir.into(),
            default_limits: Limits::default(),
            max_instances: 256,
            max_idle_per_key: 8,
            shared: None,
            python: None,
            embedder: None,
        }
    }
}

/// Counters, for tests, benchmarks and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Modules compiled with cranelift by this runtime.
    pub compiled: u64,
    /// Modules loaded from the on-disk precompiled cache.
    pub loaded_from_disk: u64,
    pub instances_created: u64,
    pub instances_reused: u64,
    /// Instances dropped after a trap, limit hit or bad output.
    pub instances_discarded: u64,
    /// Healthy instances dropped after a call because their memory grew past half its cap.
    pub instances_retired: u64,
    pub idle_instances: usize,
    pub pooling_allocator: bool,
    /// Total time spent compiling with cranelift.
    pub compile_time: Duration,
    /// Total time spent loading precompiled code from disk.
    pub load_time: Duration,
}

/// A UDF ready to invoke: verified, compiled, ABI-checked, its config accepted by `init`.
pub struct PreparedUdf {
    pub(crate) manifest: Manifest,
    pub(crate) label: String,
    pub(crate) module: Arc<CompiledModule>,
    pub(crate) config_json: Vec<u8>,
    pub(crate) instance_key: InstanceKey,
    pub(crate) nulled_rows: AtomicU64,
}

impl PreparedUdf {
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// `entry@sha256-prefix`, as used in error messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Rows turned to null so far under `on_error: null`.
    pub fn nulled_rows(&self) -> u64 {
        self.nulled_rows.load(Ordering::Relaxed)
    }

    /// Whether the module exports `lancet_init`.
    pub fn has_init(&self) -> bool {
        self.module.has_init
    }
}

impl std::fmt::Debug for PreparedUdf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedUdf")
            .field("udf", &self.label)
            .finish()
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) created: AtomicU64,
    pub(crate) reused: AtomicU64,
    pub(crate) discarded: AtomicU64,
}

/// The Wasm UDF runtime. Cheap to clone; all clones share one engine, caches and pool.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) cfg: RuntimeConfig,
    pub(crate) pooling: bool,
    pub(crate) modules: ModuleCache,
    prepared: Mutex<HashMap<[u8; 32], Arc<PreparedUdf>>>,
    /// Instances that only ran `init` during `prepare`; handed to the first caller.
    fresh: Mutex<HashMap<InstanceKey, GuestInstance>>,
    pub(crate) pool: InstancePool<GuestInstance>,
    pub(crate) counters: Counters,
    pub(crate) call_stats: crate::call_stats::TenantCallStats,
    pub(crate) python: crate::python::PythonHost,
    _ticker: EpochTicker,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps behind these locks stay consistent even if a holder panicked.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Runtime {
    pub fn new(cfg: RuntimeConfig) -> Result<Self, UdfError> {
        for dir in [&cfg.module_dir, &cfg.cache_dir] {
            std::fs::create_dir_all(dir)
                .map_err(|e| UdfError::io(format!("creating {}", dir.display()), e))?;
        }
        let (engine, pooling) = build_engine(&cfg.default_limits, cfg.max_instances)?;
        let linker = build_linker(&engine)?;
        let compat = compatibility_key(&engine);
        let modules = ModuleCache::new(
            engine.clone(),
            linker,
            cfg.module_dir.clone(),
            cfg.cache_dir.clone(),
            compat,
            cfg.shared.clone(),
        );
        let ticker = EpochTicker::start(engine.clone())?;
        let pool = InstancePool::new(
            cfg.max_idle_per_key,
            (cfg.max_instances as usize / 2).max(1),
        );
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                pooling,
                modules,
                prepared: Mutex::default(),
                fresh: Mutex::default(),
                pool,
                counters: Counters::default(),
                call_stats: Default::default(),
                python: crate::python::PythonHost::new(cfg.python.clone(), cfg.max_idle_per_key),
                cfg,
                _ticker: ticker,
            }),
        })
    }

    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.cfg
    }

    pub fn stats(&self) -> RuntimeStats {
        let i = &self.inner;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RuntimeStats {
            compiled: get(&i.modules.counters.compiled),
            loaded_from_disk: get(&i.modules.counters.loaded_from_disk),
            instances_created: get(&i.counters.created),
            instances_reused: get(&i.counters.reused),
            instances_discarded: get(&i.counters.discarded),
            instances_retired: i.pool.retired() + i.python.pool.retired(),
            idle_instances: i.pool.idle_count(),
            pooling_allocator: i.pooling,
            compile_time: Duration::from_nanos(get(&i.modules.counters.compile_nanos)),
            load_time: Duration::from_nanos(get(&i.modules.counters.load_nanos)),
        }
    }

    /// Each tenant's guest calls and how they ended, sorted by tenant.
    pub fn call_stats(&self) -> Vec<(String, crate::CallStats)> {
        self.inner.call_stats.snapshot()
    }

    /// Whether the module with this sha256 is in the module store.
    pub fn has_module(&self, sha256: &str) -> bool {
        self.inner.modules.module_path(sha256).exists()
            || self.inner.modules.fetch_shared(sha256).unwrap_or(false)
    }

    /// Verifies `module` against the manifest's sha256 and size and stores it
    /// content-addressed; with `None` the module must already be stored. Nothing is stored
    /// unless every check passes.
    pub fn store_module(&self, manifest: &Manifest, module: Option<&[u8]>) -> Result<(), UdfError> {
        manifest.validate()?;
        let path = self.inner.modules.module_path(&manifest.module_sha256);
        let Some(bytes) = module else {
            return match path.exists()
                || self.inner.modules.fetch_shared(&manifest.module_sha256)?
            {
                true => Ok(()),
                false => Err(UdfError::ModuleNotStored {
                    sha256: manifest.module_sha256.clone(),
                }),
            };
        };
        if bytes.len() as u64 > MAX_MODULE_BYTES {
            return Err(UdfError::ModuleSizeMismatch {
                expected: manifest.module_size,
                actual: bytes.len() as u64,
            });
        }
        let actual = sha256_hex(bytes);
        if actual != manifest.module_sha256 {
            return Err(UdfError::ModuleChecksumMismatch {
                expected: manifest.module_sha256.clone(),
                actual,
            });
        }
        if bytes.len() as u64 != manifest.module_size {
            return Err(UdfError::ModuleSizeMismatch {
                expected: manifest.module_size,
                actual: bytes.len() as u64,
            });
        }
        check_header(bytes)?;
        if let Some(shared) = &self.inner.cfg.shared {
            // Published first: a module another node may be asked to run must be there for it.
            shared
                .publish(&manifest.module_sha256, bytes)
                .map_err(UdfError::Internal)?;
        }
        if path.exists() {
            return Ok(()); // same name, same bytes
        }
        write_atomically(&path, bytes)
    }

    /// Compiles (or loads) the module, checks its imports, exports and ABI version, and runs
    /// `lancet_init` with the manifest's config once. Memoised per manifest.
    pub fn prepare(&self, manifest: &Manifest) -> Result<Arc<PreparedUdf>, UdfError> {
        manifest.validate()?;
        let manifest_key: [u8; 32] = Sha256::digest(manifest.to_json().as_bytes()).into();
        if let Some(p) = lock(&self.inner.prepared).get(&manifest_key) {
            return Ok(p.clone());
        }
        let module = self.inner.modules.get(&manifest.module_sha256)?;
        check_interface(&module.module, Some(&manifest.entry))?;
        let config_json = serde_json::to_vec(&manifest.config)
            .map_err(|e| UdfError::BadManifest(e.to_string()))?;
        let instance_key: InstanceKey = Sha256::new()
            .chain_update(module.sha256.as_bytes())
            .chain_update([0])
            .chain_update(&config_json)
            .finalize()
            .into();
        let label = manifest.label();
        let limits = self
            .inner
            .cfg
            .default_limits
            .tightened_by(manifest.limits.as_ref());

        let mut probe = self.new_instance(&module, &limits, &label)?;
        let version = probe.abi_version(&limits, &label).map_err(|e| {
            UdfError::InvalidModule(format!("calling lancet_abi_version failed: {e}"))
        })?;
        if !(OLDEST_ABI_VERSION..=ABI_VERSION).contains(&version) {
            return Err(UdfError::AbiMismatch {
                expected: ABI_VERSION,
                found: version,
            });
        }
        init_instance(&mut probe, &config_json, &limits, &label)?;
        lock(&self.inner.fresh).insert(instance_key, probe);

        let udf = Arc::new(PreparedUdf {
            manifest: manifest.clone(),
            label,
            module,
            config_json,
            instance_key,
            nulled_rows: AtomicU64::new(0),
        });
        lock(&self.inner.prepared).insert(manifest_key, udf.clone());
        Ok(udf)
    }

    /// Creates and drops one initialised instance of `udf` (benchmarks, health checks).
    pub fn instantiate_only(&self, udf: &PreparedUdf) -> Result<(), UdfError> {
        let limits = self
            .inner
            .cfg
            .default_limits
            .tightened_by(udf.manifest.limits.as_ref());
        let mut instance = self.new_instance(&udf.module, &limits, &udf.label)?;
        init_instance(&mut instance, &udf.config_json, &limits, &udf.label)
    }

    /// An instance for `tenant`: reused if one is idle, else the prepare-time one, else new.
    pub(crate) fn checkout(
        &self,
        udf: &PreparedUdf,
        tenant: &str,
        limits: &Limits,
    ) -> Result<GuestInstance, UdfError> {
        if let Some(instance) = self.inner.pool.take(tenant, &udf.instance_key) {
            self.inner.counters.reused.fetch_add(1, Ordering::Relaxed);
            return Ok(instance);
        }
        if let Some(instance) = lock(&self.inner.fresh).remove(&udf.instance_key) {
            return Ok(instance);
        }
        let mut instance = self.new_instance(&udf.module, limits, &udf.label)?;
        init_instance(&mut instance, &udf.config_json, limits, &udf.label)?;
        Ok(instance)
    }

    fn new_instance(
        &self,
        module: &CompiledModule,
        limits: &Limits,
        label: &str,
    ) -> Result<GuestInstance, UdfError> {
        loop {
            match GuestInstance::new(&self.inner.engine, &module.pre, limits, label) {
                Ok(instance) => {
                    self.inner.counters.created.fetch_add(1, Ordering::Relaxed);
                    return Ok(instance);
                }
                // Every allocator slot is taken: idle instances are the ones to give up.
                Err(UdfError::Busy(msg)) => {
                    if !self.inner.pool.evict_oldest() && !self.evict_fresh() {
                        return Err(UdfError::Busy(msg));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn evict_fresh(&self) -> bool {
        let mut fresh = lock(&self.inner.fresh);
        let key = fresh.keys().next().copied();
        key.and_then(|k| fresh.remove(&k)).is_some()
    }
}

/// Runs `lancet_init`; whatever goes wrong there is a problem with the definition.
fn init_instance(
    instance: &mut GuestInstance,
    config_json: &[u8],
    limits: &Limits,
    label: &str,
) -> Result<(), UdfError> {
    instance
        .init(config_json, limits, label)
        .map_err(|e| match e {
            e @ UdfError::Init { .. } => e,
            other => UdfError::Init {
                udf: label.to_string(),
                message: other.to_string(),
            },
        })
}
