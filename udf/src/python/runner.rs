//! The Python runner component: found on disk, compiled once per machine (wasmtime's
//! serialized code, cached by the component's sha256 and the engine's settings), loaded on
//! first use, shared by every Python UDF.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, OptLevel};

use super::instance::{PyState, RunnerPre};
use crate::UdfError;
use crate::engine::{EpochTicker, compatibility_key};
use crate::manifest::sha256_hex;
use crate::module_cache::write_atomically;

/// Wasm stack for the interpreter. CPython keeps its C stack in linear memory, so this is
/// only wasm frames; it must stay under the calling thread's native stack (2 MiB).
const PYTHON_WASM_STACK: usize = 1 << 20;

/// Where the runner component is and where its compiled code is cached.
#[derive(Debug, Clone)]
pub struct PythonRunnerConfig {
    /// The component built by `scripts/build-python-runner.sh`.
    pub component: PathBuf,
    /// Compiled code: `python-runner-<sha256>-<engine key>.cwasm`. A machine-wide directory
    /// lets every server on the machine skip the compile after the first.
    pub cache_dir: PathBuf,
}

pub(crate) struct PythonRunner {
    pub(crate) engine: Engine,
    pub(crate) pre: RunnerPre<PyState>,
    _ticker: EpochTicker,
}

/// The runner, loaded once; a failed load is remembered (the file will not fix itself while
/// the server runs) and reported to every Python call.
pub(crate) struct RunnerSlot {
    config: Option<PythonRunnerConfig>,
    loaded: OnceLock<Result<Arc<PythonRunner>, String>>,
    loading: Mutex<()>,
}

impl RunnerSlot {
    pub(crate) fn new(config: Option<PythonRunnerConfig>) -> Self {
        Self {
            config,
            loaded: OnceLock::new(),
            loading: Mutex::new(()),
        }
    }

    pub(crate) fn configured(&self) -> Result<(), UdfError> {
        match &self.config {
            None => Err(UdfError::PythonUnavailable(
                "no Python runner is configured (--python-runner / LANCET_PYTHON_RUNNER)".into(),
            )),
            Some(c) if !c.component.exists() => Err(UdfError::PythonUnavailable(format!(
                "the Python runner {} does not exist (scripts/build-python-runner.sh builds it)",
                c.component.display()
            ))),
            Some(_) => match self.loaded.get() {
                Some(Err(e)) => Err(UdfError::PythonUnavailable(e.clone())),
                _ => Ok(()),
            },
        }
    }

    pub(crate) fn get(&self) -> Result<Arc<PythonRunner>, UdfError> {
        if let Some(done) = self.loaded.get() {
            return done.clone().map_err(UdfError::PythonUnavailable);
        }
        self.configured()?;
        let _one_at_a_time = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        let config = self.config.as_ref().expect("checked by configured()");
        let done = self
            .loaded
            .get_or_init(|| load(config).map(Arc::new).map_err(|e| e.to_string()));
        done.clone().map_err(UdfError::PythonUnavailable)
    }
}

fn engine() -> Result<Engine, UdfError> {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .max_wasm_stack(PYTHON_WASM_STACK)
        .cranelift_opt_level(OptLevel::Speed)
        .parallel_compilation(true);
    Engine::new(&config).map_err(|e| UdfError::Internal(format!("python engine: {e:#}")))
}

fn load(config: &PythonRunnerConfig) -> Result<PythonRunner, UdfError> {
    let engine = engine()?;
    let bytes = std::fs::read(&config.component)
        .map_err(|e| UdfError::io(format!("reading {}", config.component.display()), e))?;
    let sha = sha256_hex(&bytes);
    let cached = config.cache_dir.join(format!(
        "python-runner-{}-{}.cwasm",
        &sha[..16],
        compatibility_key(&engine)
    ));
    let start = Instant::now();
    // SAFETY: only this function writes the cache file (atomically), named by the component's
    // sha256 and the engine's compatibility key; wasmtime re-checks its header and settings.
    let component = match unsafe { Component::deserialize_file(&engine, &cached) } {
        Ok(c) => {
            tracing::info!(
                "python runner loaded from {} in {:?}",
                cached.display(),
                start.elapsed()
            );
            c
        }
        Err(_) => {
            tracing::info!(
                "compiling the python runner {} (once per machine)",
                config.component.display()
            );
            let c = Component::new(&engine, &bytes).map_err(|e| {
                UdfError::PythonUnavailable(format!(
                    "the runner {} does not compile: {e:#}",
                    config.component.display()
                ))
            })?;
            match c.serialize() {
                Ok(code) => {
                    if let Err(e) = write_atomically(&cached, &code) {
                        tracing::warn!("could not cache the compiled python runner: {e}");
                    }
                }
                Err(e) => tracing::warn!("could not serialize the python runner: {e:#}"),
            }
            tracing::info!("python runner compiled in {:?}", start.elapsed());
            c
        }
    };
    prune_compiled(&config.cache_dir, &cached);
    // The runner imports only `host` (built with every WASI import stubbed).
    let mut linker: Linker<PyState> = Linker::new(&engine);
    super::instance::add_imports(&mut linker).map_err(|e| {
        UdfError::PythonUnavailable(format!("the runner's imports cannot be linked: {e:#}"))
    })?;
    let pre = linker
        .instantiate_pre(&component)
        .and_then(RunnerPre::new)
        .map_err(|e| {
            UdfError::PythonUnavailable(format!(
                "the runner {} does not fit this server (rebuild it): {e:#}",
                config.component.display()
            ))
        })?;
    let ticker = EpochTicker::start(engine.clone())?;
    Ok(PythonRunner {
        engine,
        pre,
        _ticker: ticker,
    })
}

/// Compiled runners kept in the cache directory: the one in use and the most recently used
/// others (another server version on the machine, a rollback).
const KEEP_COMPILED: usize = 3;

/// Marks `current` used (its modification time) and deletes compiled runners beyond the
/// [`KEEP_COMPILED`] most recently used, when unused for a day: each is ~40 MB, and every
/// runner or engine change makes a new one. A server that has one loaded keeps it (the file
/// is mapped; deleting its name frees nothing until that server exits).
fn prune_compiled(dir: &std::path::Path, current: &std::path::Path) {
    let now = std::time::SystemTime::now();
    if let Ok(f) = std::fs::File::options().write(true).open(current) {
        let _ = f.set_modified(now);
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut compiled: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("python-runner-") && name.ends_with(".cwasm")
        })
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    compiled.sort_by_key(|(used, _)| std::cmp::Reverse(*used));
    let day = std::time::Duration::from_secs(24 * 3600);
    for (used, path) in compiled.into_iter().skip(KEEP_COMPILED) {
        if path != current && now.duration_since(used).is_ok_and(|age| age > day) {
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::info!(
                    "removed an unused compiled python runner {}",
                    path.display()
                ),
                Err(e) => tracing::debug!("could not remove {}: {e}", path.display()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn compiled_runners_beyond_the_recent_ones_are_removed_once_a_day_unused() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str, age_h: u64| {
            let p = dir.path().join(name);
            std::fs::write(&p, b"x").unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(SystemTime::now() - Duration::from_secs(age_h * 3600))
                .unwrap();
            p
        };
        let current = at("python-runner-aaaa-k.cwasm", 100);
        let recent = at("python-runner-b-k.cwasm", 1);
        let young = at("python-runner-d-k.cwasm", 2);
        let old = [
            at("python-runner-c-k.cwasm", 30),
            at("python-runner-e-k.cwasm", 48),
        ];
        let other = at("unrelated-file.cwasm", 500);
        prune_compiled(dir.path(), &current);
        assert!(
            current.exists(),
            "the one in use is kept (and now the newest)"
        );
        assert!(
            recent.exists() && young.exists(),
            "the next most recent two are kept"
        );
        assert!(
            old.iter().all(|p| !p.exists()),
            "beyond three and a day unused: removed"
        );
        // Beyond three but used within the day: kept.
        let fresh = at("python-runner-g-k.cwasm", 3);
        prune_compiled(dir.path(), &current);
        assert!(fresh.exists());
        assert!(other.exists(), "not a compiled runner");
    }
}
