//! A loaded model: its checked files, its tokenizer, and a small pool of ONNX Runtime sessions
//! (one per call running at once: `ort` runs a session from one thread at a time).

use std::sync::{Condvar, Mutex};

use ort::session::Session;
use ort::session::builder::GraphOptimizationLevel;
use ort::value::{TensorElementType, ValueType};
use tokenizers::Tokenizer;
use tokenizers::utils::truncation::TruncationParams;

use crate::error::ModelError;
use crate::manifest::{MODEL_FILE, Manifest, Pooling, TOKENIZER_FILE, verify};
use crate::runtime;

/// How a model is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Calls that may run at once (one ONNX Runtime session each, each holding its own copy of
    /// the weights); further calls wait.
    pub sessions: usize,
    /// Threads one call's operators may use. 1 keeps inference from taking every core from
    /// queries; a batch still runs as one call.
    pub intra_threads: usize,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            sessions: 1,
            intra_threads: 1,
        }
    }
}

/// A model ready to embed text, shared read-only by every caller.
pub struct Model {
    manifest: Manifest,
    digest: String,
    tokenizer: Tokenizer,
    pad_id: u32,
    /// Whether the graph takes `token_type_ids`.
    wants_token_types: bool,
    idle: Mutex<Vec<Session>>,
    returned: Condvar,
    file_bytes: usize,
    sessions: usize,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("name", &self.manifest.name)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// Checks both files against the manifest's sha256, loads the tokenizer and the graph,
    /// checks the graph's inputs and output against the manifest, and embeds a probe text to
    /// check the dimension. Every failure is [`ModelError::Invalid`] but a missing ONNX Runtime.
    pub fn load(
        manifest: Manifest,
        model_onnx: &[u8],
        tokenizer_json: &[u8],
        options: LoadOptions,
    ) -> Result<Self, ModelError> {
        manifest.validate()?;
        verify(&manifest, MODEL_FILE, model_onnx)?;
        verify(&manifest, TOKENIZER_FILE, tokenizer_json)?;
        let name = manifest.name.clone();
        let mut tokenizer = Tokenizer::from_bytes(tokenizer_json).map_err(|e| {
            ModelError::invalid(format!(
                "model '{name}': {TOKENIZER_FILE} is not a tokenizers file: {e}"
            ))
        })?;
        let pad_id = tokenizer.get_padding().map(|p| p.pad_id).unwrap_or(0);
        // Padding is ours (to the batch's longest text); truncation is the manifest's.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: manifest.max_tokens as usize,
                ..Default::default()
            }))
            .map_err(|e| ModelError::invalid(format!("model '{name}': max_tokens {e}")))?;

        let sessions = options.sessions.max(1);
        let mut idle = Vec::with_capacity(sessions);
        for _ in 0..sessions {
            idle.push(session(&name, model_onnx, options.intra_threads.max(1))?);
        }
        let wants_token_types = check_graph(&manifest, &idle[0])?;
        let model = Self {
            digest: manifest.digest(),
            manifest,
            tokenizer,
            pad_id,
            wants_token_types,
            idle: Mutex::new(idle),
            returned: Condvar::new(),
            file_bytes: model_onnx.len() + tokenizer_json.len(),
            sessions,
        };
        let probe = model.embed(&["probe"], &crate::CallLimits::default())?;
        // Checked in every build, not only debug ones: the tests run the release binary
        // (docs/building.md "One build"), and a graph that answers one text with another
        // number of vectors would misalign every later batch.
        if probe.vectors() != 1 {
            return Err(ModelError::invalid(format!(
                "model '{}' answered one probe text with {} vectors",
                name,
                probe.vectors()
            )));
        }
        Ok(model)
    }

    /// The manifest it was loaded from.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// [`Manifest::digest`], computed once.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Output vector length.
    pub fn dimension(&self) -> usize {
        self.manifest.dimension as usize
    }

    /// Bytes the model holds, an estimate for accounting: each session holds the weights
    /// once, and the files are kept for nothing else.
    pub fn memory_bytes(&self) -> usize {
        self.file_bytes * self.sessions
    }

    pub(crate) fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub(crate) fn pad_id(&self) -> u32 {
        self.pad_id
    }

    pub(crate) fn wants_token_types(&self) -> bool {
        self.wants_token_types
    }

    /// Runs `f` with a session of the pool, waiting for one to be free.
    pub(crate) fn with_session<T>(&self, f: impl FnOnce(&mut Session) -> T) -> T {
        let mut session = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(s) = idle.pop() {
                    break s;
                }
                idle = self.returned.wait(idle).unwrap_or_else(|p| p.into_inner());
            }
        };
        // Given back even if `f` panics (ort's errors are results; this is for the caller's).
        struct Return<'a>(&'a Model, Option<Session>);
        impl Drop for Return<'_> {
            fn drop(&mut self) {
                if let Some(s) = self.1.take() {
                    self.0
                        .idle
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(s);
                    self.0.returned.notify_one();
                }
            }
        }
        let mut guard = Return(self, None);
        let result = f(&mut session);
        guard.1 = Some(session);
        result
    }
}

fn session(name: &str, bytes: &[u8], threads: usize) -> Result<Session, ModelError> {
    let environment = runtime::environment()?;
    let not_loaded = |e: ort::Error| {
        ModelError::invalid(format!(
            "model '{name}': {MODEL_FILE} is not a model ONNX Runtime can load: {e}"
        ))
    };
    let options = |e: ort::Error<_>| {
        ModelError::Runtime(format!("ONNX Runtime session options: {}", e.message()))
    };
    let mut builder = Session::builder(environment)
        .map_err(not_loaded)?
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(options)?
        .with_intra_threads(threads)
        .map_err(options)?
        .with_inter_threads(1)
        .map_err(options)?
        // With more than one thread, ONNX Runtime's pool threads spin after each parallel
        // section, taking a core from the query that follows an embedding (at --model-threads
        // 2 a text query's search ran 13 ms slower than the same vector's; bench/RESULTS.md).
        // Sleeping costs a wake-up per section instead.
        .with_intra_op_spinning(false)
        .map_err(options)?;
    builder.commit_from_memory(bytes).map_err(not_loaded)
}

/// Holds the graph's inputs and output against the manifest; answers whether the graph takes
/// token type ids.
fn check_graph(manifest: &Manifest, session: &Session) -> Result<bool, ModelError> {
    let name = &manifest.name;
    let named: Vec<&str> = [
        Some(manifest.inputs.input_ids.as_str()),
        Some(manifest.inputs.attention_mask.as_str()),
        manifest.inputs.token_type_ids.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let inputs: Vec<&str> = session.inputs().iter().map(|i| i.name()).collect();
    for wanted in &named {
        if !inputs.contains(wanted) {
            return Err(ModelError::invalid(format!(
                "model '{name}': the manifest names input '{wanted}', the graph has only {inputs:?}"
            )));
        }
    }
    for input in session.inputs() {
        if !named.contains(&input.name()) {
            return Err(ModelError::invalid(format!(
                "model '{name}': the graph's input '{}' is not named in the manifest's inputs \
                 (the graph takes {inputs:?})",
                input.name()
            )));
        }
        if !is_tensor_of(input.dtype(), TensorElementType::Int64) {
            return Err(ModelError::invalid(format!(
                "model '{name}': the graph's input '{}' is {:?}, not an int64 tensor",
                input.name(),
                input.dtype()
            )));
        }
    }
    let outputs: Vec<&str> = session.outputs().iter().map(|o| o.name()).collect();
    let output = session
        .outputs()
        .iter()
        .find(|o| o.name() == manifest.output)
        .ok_or_else(|| {
            ModelError::invalid(format!(
                "model '{name}': the graph has no output '{}' (it has {outputs:?})",
                manifest.output
            ))
        })?;
    if !is_tensor_of(output.dtype(), TensorElementType::Float32) {
        return Err(ModelError::invalid(format!(
            "model '{name}': output '{}' is {:?}, not a float32 tensor",
            manifest.output,
            output.dtype()
        )));
    }
    let rank = output.dtype().tensor_shape().map(|s| s.len());
    let want = if manifest.pooling == Pooling::None {
        2
    } else {
        3
    };
    if rank.is_some_and(|r| r != want) {
        return Err(ModelError::invalid(format!(
            "model '{name}': output '{}' has {} dimensions; pooling '{}' needs {want}",
            manifest.output,
            rank.unwrap_or(0),
            serde_json::to_value(manifest.pooling)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        )));
    }
    Ok(manifest
        .inputs
        .token_type_ids
        .as_deref()
        .is_some_and(|t| inputs.contains(&t)))
}

fn is_tensor_of(dtype: &ValueType, element: TensorElementType) -> bool {
    dtype.tensor_type() == Some(element)
}
