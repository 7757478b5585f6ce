//! One embedding call: texts to token ids (padded to the batch's longest), the graph run under
//! a deadline, token vectors pooled and normalised.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use ort::session::RunOptions;
use ort::value::Tensor;

use crate::error::ModelError;
use crate::manifest::Pooling;
use crate::model::Model;

/// Texts the graph runs at once: larger calls are split into runs of texts of similar length,
/// so padding to a run's longest text costs little.
pub const RUN_TEXTS: usize = 64;

/// Bounds on one call, checked before any work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Texts in one call.
    pub max_rows: usize,
    /// Bytes of one text (it is cut to the manifest's `max_tokens` after tokenising; this
    /// bounds the tokenising).
    pub max_text_bytes: usize,
    /// How long the graph may run before ONNX Runtime is told to stop it.
    pub deadline: Duration,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            max_rows: 1024,
            max_text_bytes: 64 * 1024,
            deadline: Duration::from_secs(60),
        }
    }
}

/// Vectors of one call, row after row.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    dimension: usize,
    values: Vec<f32>,
    tokens: usize,
}

impl Embeddings {
    /// How many vectors (one per text).
    pub fn vectors(&self) -> usize {
        self.values.len().checked_div(self.dimension).unwrap_or(0)
    }

    /// Length of each vector.
    pub fn dimension(&self) -> usize {
        self.dimension
    }

    /// Row `i`'s vector.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.values[i * self.dimension..(i + 1) * self.dimension]
    }

    /// All values, row-major (`vectors() * dimension()`): a fixed-size-list column's values.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Takes the values out.
    pub fn into_values(self) -> Vec<f32> {
        self.values
    }

    /// Tokens the call ran (padding excluded): what a token budget counts.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
}

struct Batch {
    rows: usize,
    width: usize,
    ids: Vec<i64>,
    mask: Vec<i64>,
    types: Vec<i64>,
    tokens: usize,
}

impl Model {
    /// Embeds `texts`, one vector each, in order. A call of many texts runs the graph on
    /// runs of [`RUN_TEXTS`] texts of similar length (each padded only to its own longest),
    /// each run under the deadline.
    pub fn embed<S: AsRef<str>>(
        &self,
        texts: &[S],
        limits: &CallLimits,
    ) -> Result<Embeddings, ModelError> {
        if texts.len() <= RUN_TEXTS {
            return self.embed_run(texts, limits);
        }
        // The same checks as one run makes, on the whole call, before any work.
        self.check_call(texts, limits)?;
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].as_ref().len());
        let d = self.dimension();
        let mut values = vec![0f32; texts.len() * d];
        let mut tokens = 0;
        for run in order.chunks(RUN_TEXTS) {
            let part: Vec<&str> = run.iter().map(|&i| texts[i].as_ref()).collect();
            let e = self.embed_run(&part, limits)?;
            tokens += e.tokens;
            for (k, &i) in run.iter().enumerate() {
                values[i * d..(i + 1) * d].copy_from_slice(e.row(k));
            }
        }
        Ok(Embeddings {
            dimension: d,
            values,
            tokens,
        })
    }

    fn check_call<S: AsRef<str>>(
        &self,
        texts: &[S],
        limits: &CallLimits,
    ) -> Result<(), ModelError> {
        let name = &self.manifest().name;
        if texts.len() > limits.max_rows {
            return Err(ModelError::invalid(format!(
                "model '{name}': {} texts in one call, more than the {} allowed",
                texts.len(),
                limits.max_rows
            )));
        }
        if let Some((i, t)) = texts
            .iter()
            .enumerate()
            .find(|(_, t)| t.as_ref().len() > limits.max_text_bytes)
        {
            return Err(ModelError::invalid(format!(
                "model '{name}': text {i} holds {} bytes, more than the {} allowed",
                t.as_ref().len(),
                limits.max_text_bytes
            )));
        }
        Ok(())
    }

    fn embed_run<S: AsRef<str>>(
        &self,
        texts: &[S],
        limits: &CallLimits,
    ) -> Result<Embeddings, ModelError> {
        let batch = self.tokenize(texts, limits)?;
        let name = &self.manifest().name;
        let millis = limits.deadline.as_millis() as u64;
        let shape = [batch.rows as i64, batch.width as i64];
        let tensor = |values: Vec<i64>| {
            Tensor::from_array((shape, values))
                .map_err(|e| ModelError::Runtime(format!("model '{name}': input tensor: {e}")))
        };
        let mut inputs = vec![
            (
                self.manifest().inputs.input_ids.clone(),
                tensor(batch.ids)?.into_dyn(),
            ),
            (
                self.manifest().inputs.attention_mask.clone(),
                tensor(batch.mask.clone())?.into_dyn(),
            ),
        ];
        if self.wants_token_types()
            && let Some(types) = &self.manifest().inputs.token_type_ids
        {
            inputs.push((types.clone(), tensor(batch.types)?.into_dyn()));
        }
        let options = RunOptions::new()
            .map_err(|e| ModelError::Runtime(format!("ONNX Runtime run options: {e}")))?;
        let stopped = AtomicBool::new(false);
        let pooled = self.with_session(|session| {
            std::thread::scope(|scope| {
                let (done, wait) = mpsc::channel::<()>();
                let (options, stopped) = (&options, &stopped);
                // The epoch ticker that stops Wasm guests cannot reach into a host call; ONNX
                // Runtime checks this flag between operators.
                scope.spawn(move || {
                    if let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(limits.deadline)
                    {
                        stopped.store(true, Ordering::SeqCst);
                        let _ = options.terminate();
                    }
                });
                let outcome = session.run_with_options(inputs, options);
                drop(done);
                let outputs = outcome.map_err(|e| {
                    if stopped.load(Ordering::SeqCst) {
                        ModelError::Deadline {
                            model: name.clone(),
                            millis,
                        }
                    } else {
                        ModelError::Runtime(format!("model '{name}' failed: {e}"))
                    }
                })?;
                let output = outputs
                    .get(&self.manifest().output)
                    .ok_or_else(|| ModelError::Runtime(format!("model '{name}' gave no output")))?;
                let (dims, values) = output.try_extract_tensor::<f32>().map_err(|e| {
                    ModelError::Runtime(format!("model '{name}': output is not float32: {e}"))
                })?;
                self.pool(dims, values, &batch.mask, batch.rows, batch.width)
            })
        })?;
        Ok(Embeddings {
            dimension: self.dimension(),
            values: pooled,
            tokens: batch.tokens,
        })
    }

    fn tokenize<S: AsRef<str>>(
        &self,
        texts: &[S],
        limits: &CallLimits,
    ) -> Result<Batch, ModelError> {
        let name = &self.manifest().name;
        if texts.is_empty() {
            return Err(ModelError::invalid(format!(
                "model '{name}': an embedding call needs at least one text"
            )));
        }
        if texts.len() > limits.max_rows {
            return Err(ModelError::invalid(format!(
                "model '{name}': {} texts in one call, more than the {} allowed",
                texts.len(),
                limits.max_rows
            )));
        }
        let mut encodings = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let text = text.as_ref();
            if text.len() > limits.max_text_bytes {
                return Err(ModelError::invalid(format!(
                    "model '{name}': text {i} holds {} bytes, more than the {} allowed",
                    text.len(),
                    limits.max_text_bytes
                )));
            }
            let encoding = self.tokenizer().encode(text, true).map_err(|e| {
                ModelError::invalid(format!("model '{name}': text {i} cannot be tokenised: {e}"))
            })?;
            encodings.push(encoding);
        }
        let rows = encodings.len();
        let width = encodings
            .iter()
            .map(|e| e.get_ids().len())
            .max()
            .unwrap_or(0)
            .max(1);
        let mut batch = Batch {
            rows,
            width,
            ids: vec![i64::from(self.pad_id()); rows * width],
            mask: vec![0; rows * width],
            types: vec![0; rows * width],
            tokens: 0,
        };
        for (r, e) in encodings.iter().enumerate() {
            let at = r * width;
            for (j, ((&id, &mask), &ty)) in e
                .get_ids()
                .iter()
                .zip(e.get_attention_mask())
                .zip(e.get_type_ids())
                .enumerate()
            {
                batch.ids[at + j] = i64::from(id);
                batch.mask[at + j] = i64::from(mask);
                batch.types[at + j] = i64::from(ty);
            }
            batch.tokens += e.get_ids().len();
        }
        Ok(batch)
    }

    fn pool(
        &self,
        dims: &[i64],
        values: &[f32],
        mask: &[i64],
        rows: usize,
        width: usize,
    ) -> Result<Vec<f32>, ModelError> {
        let d = self.dimension();
        let name = &self.manifest().name;
        let pooling = self.manifest().pooling;
        let expected: Vec<i64> = match pooling {
            Pooling::None => vec![rows as i64, d as i64],
            Pooling::Mean | Pooling::Cls => vec![rows as i64, width as i64, d as i64],
        };
        if dims != expected.as_slice() || values.len() != expected.iter().product::<i64>() as usize
        {
            return Err(ModelError::invalid(format!(
                "model '{name}': output '{}' has shape {dims:?}, the manifest (dimension {d}, \
                 pooling {pooling:?}) needs {expected:?}",
                self.manifest().output
            )));
        }
        let mut out = vec![0f32; rows * d];
        for r in 0..rows {
            let target = &mut out[r * d..(r + 1) * d];
            match pooling {
                Pooling::None => target.copy_from_slice(&values[r * d..(r + 1) * d]),
                Pooling::Cls => {
                    let at = r * width * d;
                    target.copy_from_slice(&values[at..at + d]);
                }
                Pooling::Mean => {
                    let mut kept = 0f32;
                    for t in 0..width {
                        if mask[r * width + t] == 0 {
                            continue;
                        }
                        kept += 1.0;
                        let at = (r * width + t) * d;
                        for (acc, v) in target.iter_mut().zip(&values[at..at + d]) {
                            *acc += v;
                        }
                    }
                    let kept = kept.max(1e-9);
                    target.iter_mut().for_each(|v| *v /= kept);
                }
            }
            if self.manifest().normalize {
                let norm = target.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
                target.iter_mut().for_each(|v| *v /= norm);
            }
        }
        Ok(out)
    }
}
