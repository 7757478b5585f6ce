//! Models loaded once per process and shared read-only, keyed by digest, within a memory
//! bound: a model not in use is dropped (least recently used first) to make room; when the
//! models in use alone fill the bound, a load is refused rather than the bound broken.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::ModelError;
use crate::manifest::Manifest;
use crate::model::{LoadOptions, Model};

/// The process's loaded models.
pub struct ModelCache {
    options: LoadOptions,
    max_bytes: usize,
    inner: Mutex<Inner>,
    /// Held while a model loads, so two callers asking for the same model load it once.
    loading: Mutex<()>,
}

#[derive(Default)]
struct Inner {
    models: HashMap<String, (Arc<Model>, u64)>,
    clock: u64,
}

impl ModelCache {
    /// A cache loading models with `options`, holding at most `max_bytes` of them (by
    /// [`Model::memory_bytes`]).
    pub fn new(options: LoadOptions, max_bytes: usize) -> Self {
        Self {
            options,
            max_bytes,
            inner: Mutex::new(Inner::default()),
            loading: Mutex::new(()),
        }
    }

    /// The model `manifest` describes, loaded by `files` (the bytes of `model.onnx` and
    /// `tokenizer.json`) when this process has not loaded it yet.
    pub fn get_or_load(
        &self,
        manifest: &Manifest,
        files: impl FnOnce() -> Result<(Vec<u8>, Vec<u8>), ModelError>,
    ) -> Result<Arc<Model>, ModelError> {
        let digest = manifest.digest();
        if let Some(model) = self.touch(&digest) {
            return Ok(model);
        }
        let _one_load = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(model) = self.touch(&digest) {
            return Ok(model);
        }
        let (onnx, tokenizer) = files()?;
        let need = (onnx.len() + tokenizer.len()) * self.options.sessions.max(1);
        self.make_room(&manifest.name, need)?;
        let model = Arc::new(Model::load(
            manifest.clone(),
            &onnx,
            &tokenizer,
            self.options,
        )?);
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        inner.models.insert(digest, (model.clone(), now));
        Ok(model)
    }

    /// The model `manifest` describes, if this process has it loaded.
    pub fn loaded(&self, manifest: &Manifest) -> Option<Arc<Model>> {
        self.touch(&manifest.digest())
    }

    /// Bytes the loaded models hold.
    pub fn memory_bytes(&self) -> usize {
        self.lock()
            .models
            .values()
            .map(|(m, _)| m.memory_bytes())
            .sum()
    }

    /// Drops the model with this digest (when its registration is deleted). Callers holding
    /// it keep it until they finish.
    pub fn forget(&self, digest: &str) {
        self.lock().models.remove(digest);
    }

    fn touch(&self, digest: &str) -> Option<Arc<Model>> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        inner.models.get_mut(digest).map(|(model, used)| {
            *used = now;
            model.clone()
        })
    }

    fn make_room(&self, name: &str, need: usize) -> Result<(), ModelError> {
        if need > self.max_bytes {
            return Err(ModelError::invalid(format!(
                "model '{name}' needs {need} bytes loaded, more than this server's model \
                 memory limit of {} bytes",
                self.max_bytes
            )));
        }
        let mut inner = self.lock();
        loop {
            let held: usize = inner.models.values().map(|(m, _)| m.memory_bytes()).sum();
            if held + need <= self.max_bytes {
                return Ok(());
            }
            // Only a model no caller holds can go (the cache's own Arc is the one count).
            let victim = inner
                .models
                .iter()
                .filter(|(_, (m, _))| Arc::strong_count(m) == 1)
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            match victim {
                Some(k) => {
                    inner.models.remove(&k);
                }
                None => {
                    return Err(ModelError::Unavailable(format!(
                        "model '{name}' cannot be loaded now: the models in use hold {held} of \
                         this server's {} bytes for models",
                        self.max_bytes
                    )));
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
