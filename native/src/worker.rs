//! One sandboxed interpreter holding one function.

use std::io::Read;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use base64::Engine as _;

use crate::frame::{self, Kind};
use crate::shm::{self, Shared};
use crate::{NativeError, Sandbox};

/// The function's code, as the client sent it.
#[derive(Debug, Clone)]
pub enum Code {
    /// Python source defining `entry` (a function, or a class set up once per worker).
    Source {
        /// The module text.
        source: String,
        /// The name it defines to call.
        entry: String,
    },
    /// A pickled callable (cloudpickle's format, as Geneva and lancedb send functions); a
    /// pickled class is set up once per worker like a source one.
    Pickle {
        /// The pickle's bytes.
        bytes: Vec<u8>,
    },
}

/// How the function is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Once per row, with Python values; a null input gives a null output without a call.
    Row,
    /// Once per batch, with one `pyarrow.Array` per input column.
    Batch,
    /// Once per batch, with the input columns as one `pyarrow.RecordBatch`.
    RecordBatch,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Row => "row",
            Mode::Batch => "batch",
            Mode::RecordBatch => "record_batch",
        }
    }
}

/// What a worker loads.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// The code.
    pub code: Code,
    /// How it is called.
    pub mode: Mode,
    /// The type of the column it computes; results are cast to it or refused.
    pub output: DataType,
    /// Site directories (its installed requirements), bound read-only.
    pub environment: Vec<PathBuf>,
    /// Environment variables it sees.
    pub env: Vec<(String, String)>,
    /// A row whose call raises becomes null (counted, its error reported in
    /// [`CallOutput::failures`]) instead of failing the batch; row mode only.
    pub null_on_error: bool,
    /// Keyword arguments a class is set up with (`None`: none). Ignored for a function.
    pub init: Option<serde_json::Map<String, serde_json::Value>>,
    /// Modules shipped with the function (`path` -> bytes, e.g. `pkg/util.py`): written to
    /// the sandbox's private `/tmp` and put first on `sys.path`.
    pub files: Vec<(String, Vec<u8>)>,
    /// Row mode: call the function with `None` for a null input (it takes nulls) instead of
    /// answering null without a call.
    pub pass_nulls: bool,
    /// Load the code (imports included) but do not set a class up nor take batches: a check
    /// of a function before it is stored ([`Worker::params`] tells its parameters).
    pub load_only: bool,
}

/// A batch's result.
#[derive(Debug, Clone)]
pub struct CallOutput {
    /// One value per input row, of the output type.
    pub values: ArrayRef,
    /// Rows whose call raised and were nulled (`null_on_error`).
    pub nulled: usize,
    /// The first of those rows (at most [`MAX_FAILURES`]): offset in the batch, and the
    /// exception (`ValueError: ...`).
    pub failures: Vec<(usize, String)>,
    /// How long the call took: from sending the batch (in a [`crate::Pipeline`], from when
    /// the worker could start it) to its answer.
    pub elapsed: Duration,
}

/// Most row errors one call reports (the rest are only counted in [`CallOutput::nulled`]).
pub const MAX_FAILURES: usize = 100;

/// What a pipeline's writer needs of its worker.
pub(crate) struct Input {
    /// The pipe the worker reads frames from.
    pub(crate) pipe: std::os::fd::OwnedFd,
    /// Its shared memory file, if it has one.
    pub(crate) shared: Option<Arc<Shared>>,
    /// The call timeout.
    pub(crate) timeout: Duration,
}

/// The last bytes a worker wrote to its standard error (for error messages).
#[derive(Default)]
struct Tail(Vec<u8>);

const TAIL: usize = 2048;

impl Tail {
    fn push(&mut self, data: &[u8]) {
        self.0.extend_from_slice(data);
        if self.0.len() > TAIL {
            self.0.drain(..self.0.len() - TAIL);
        }
    }
}

/// A running sandboxed worker. Dropping it kills the sandbox (every process in it).
pub struct Worker {
    child: Child,
    input: ChildStdin,
    output: ChildStdout,
    /// The memory file batches and results travel through when they fit (see `shm.rs`);
    /// `None` if it could not be made or the worker could not map it: the pipe carries all.
    shared: Option<Arc<Shared>>,
    stderr: Arc<Mutex<Tail>>,
    schema: SchemaRef,
    /// `schema` as the head of an IPC stream (no end marker): a [`Kind::Values`] answer is
    /// decoded as this followed by its message.
    schema_head: Vec<u8>,
    /// The input schema the worker last received in a [`Kind::Batch`] and computed with:
    /// later batches of it travel as bare messages.
    sent_schema: Option<SchemaRef>,
    python: String,
    params: Vec<String>,
    required: usize,
    calls: u64,
    call_timeout: Duration,
    /// Largest result frame accepted (bytes).
    max_output: usize,
    started: Instant,
}

/// Largest answer to the setup frame (a version, or an error message with a traceback).
const MAX_CONTROL: usize = 1 << 20;

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("pid", &self.child.id())
            .field("python", &self.python)
            .field("calls", &self.calls)
            .finish()
    }
}

impl Worker {
    /// Starts a sandboxed interpreter and loads `spec` in it (imports included), within the
    /// sandbox's start timeout.
    pub fn start(sandbox: &Sandbox, spec: &FunctionSpec) -> Result<Worker, NativeError> {
        let limits = sandbox.limits();
        let dirs: Vec<String> = (0..spec.environment.len())
            .map(|i| format!("/env/{i}"))
            .collect();
        let mut args = vec!["-S", "-E", "-s", "-B", "/lancet/worker.py"];
        args.extend(dirs.iter().map(String::as_str));
        let shared = (limits.shared_slot_bytes > 0)
            .then(|| Shared::new(limits.shared_slot_bytes).ok().map(Arc::new))
            .flatten();
        let keep: Vec<_> = shared.iter().map(|s| s.raw_fd()).collect();
        let (mut cmd, seccomp) = sandbox.command(&spec.environment, &args, &keep)?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = sandbox
            .spawn(cmd)
            .map_err(|e| NativeError::Unavailable(format!("starting bubblewrap: {e}")))?;
        drop(seccomp);
        let input = child.stdin.take().expect("piped stdin");
        let output = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        frame::set_nonblocking(input.as_fd())?;
        frame::set_nonblocking(output.as_fd())?;
        // A batch is usually more than the default 64 KiB: a bigger pipe saves round trips.
        frame::grow_pipe(input.as_fd());
        frame::grow_pipe(output.as_fd());
        let stderr = Arc::new(Mutex::new(Tail::default()));
        let sink = stderr.clone();
        std::thread::Builder::new()
            .name("lancet-native-stderr".into())
            .spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = err.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(&buf[..n]);
                }
            })?;
        let schema = Arc::new(Schema::new(vec![Field::new(
            "out",
            spec.output.clone(),
            true,
        )]));
        let schema_ipc = schema_bytes(&schema)?;
        // The stream's end marker is the last 8 bytes (continuation word, zero length).
        let schema_head = schema_ipc[..schema_ipc.len().saturating_sub(8)].to_vec();
        let mut worker = Worker {
            child,
            input,
            output,
            shared,
            stderr,
            schema,
            schema_head,
            sent_schema: None,
            python: String::new(),
            params: Vec::new(),
            required: 0,
            calls: 0,
            call_timeout: limits.call_timeout,
            max_output: limits.max_output_bytes,
            started: Instant::now(),
        };
        let setup = serde_json::json!({
            "source": match &spec.code { Code::Source { source, .. } => Some(source), _ => None },
            "entry": match &spec.code { Code::Source { entry, .. } => entry.as_str(), _ => "" },
            "pickle": match &spec.code {
                Code::Pickle { bytes } => Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
                _ => None,
            },
            "mode": spec.mode.name(),
            "null_on_error": spec.null_on_error,
            "output_schema": base64::engine::general_purpose::STANDARD.encode(&schema_ipc),
            "env": spec.env.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
            "init": spec.init,
            "files": spec.files.iter()
                .map(|(path, bytes)| (path.clone(), base64::engine::general_purpose::STANDARD.encode(bytes)))
                .collect::<std::collections::BTreeMap<_, _>>(),
            "load_only": spec.load_only,
            "pass_nulls": spec.pass_nulls,
            "shm": worker.shared.as_ref().map(|s| serde_json::json!({"fd": s.raw_fd(), "slot": s.slot(), "ways": shm::WAYS})),
        });
        let deadline = frame::deadline(limits.start_timeout);
        let answer = frame::send(
            worker.input.as_fd(),
            Kind::Setup,
            &[setup.to_string().as_bytes()],
            deadline,
        )
        .and_then(|()| frame::receive(worker.output.as_fd(), MAX_CONTROL, deadline, &[]));
        match answer {
            Ok((Kind::Ready, body)) => {
                #[derive(serde::Deserialize)]
                struct Ready {
                    python: String,
                    #[serde(default)]
                    params: Vec<String>,
                    #[serde(default)]
                    required: usize,
                    /// Whether it mapped the shared memory file.
                    #[serde(default)]
                    shm: bool,
                }
                let ready: Ready = serde_json::from_slice(&body)
                    .map_err(|e| NativeError::Load(format!("worker's ready message: {e}")))?;
                worker.python = ready.python;
                worker.params = ready.params;
                worker.required = ready.required;
                if !ready.shm {
                    worker.shared = None;
                }
                Ok(worker)
            }
            Ok((Kind::Error, body)) => Err(NativeError::Load(guest_message(&body).1)),
            Ok((kind, _)) => Err(NativeError::Load(format!(
                "unexpected {kind:?} from the worker"
            ))),
            Err(e) => Err(worker.failure(e, limits.start_timeout)),
        }
    }

    /// The parameters the loaded callable takes (a class's `__call__`'s, without `self`), in
    /// order; empty when Python cannot tell (a builtin).
    pub fn params(&self) -> &[String] {
        &self.params
    }

    /// How many of [`Worker::params`] have no default.
    pub fn required_params(&self) -> usize {
        self.required
    }

    /// The worker's Python version (`3.11.2`).
    pub fn python_version(&self) -> &str {
        &self.python
    }

    /// Whether batches and results that fit a slot travel through memory shared with the
    /// worker rather than its pipes (when the memory file could be made and mapped).
    pub fn shared_memory(&self) -> bool {
        self.shared.is_some()
    }

    /// Batches computed so far.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// How long the worker has been running.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// Computes `batch` (the function's input columns): one value per row, of the output
    /// type. After an error other than [`NativeError::worker_survives`] the worker is dead.
    pub fn call(&mut self, batch: &RecordBatch) -> Result<CallOutput, NativeError> {
        let started = Instant::now();
        let (kind, parts) = encode(&mut self.sent_schema, batch)?;
        let deadline = frame::deadline(self.call_timeout);
        // One call at a time: slot 0 is free (its last batch was answered).
        let shared = self.shared.as_deref();
        let received = shm::send(
            self.input.as_fd(),
            shared,
            0,
            kind,
            &parts.slices(),
            deadline,
        )
        .and_then(|()| self.receive(deadline));
        let result = self.answer(received, batch.num_rows(), started);
        if result.is_ok() {
            self.sent_schema = Some(batch.schema());
        }
        result
    }

    /// Reads the answer to a batch of `rows` rows sent earlier, waiting at most the call
    /// timeout from now (the pipeline's reader: the worker starts the batch about now).
    pub(crate) fn receive_answer(&mut self, rows: usize) -> Result<CallOutput, NativeError> {
        let started = Instant::now();
        let received = self.receive(frame::deadline(self.call_timeout));
        self.answer(received, rows, started)
    }

    /// The next answer; a result in the shared file is read out of it (behind the output
    /// schema, as a `Values` frame's).
    fn receive(&self, deadline: Instant) -> std::io::Result<(Kind, Vec<u8>)> {
        let (kind, body) = frame::receive(
            self.output.as_fd(),
            self.max_output,
            deadline,
            &self.schema_head,
        )?;
        if kind != Kind::SharedValues {
            return Ok((kind, body));
        }
        let shared = self.shared.as_ref().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "a shared-memory result from a worker without shared memory",
            )
        })?;
        let mut whole = self.schema_head.clone();
        shared.take(&body, &mut whole, self.max_output)?;
        Ok((Kind::Values, whole))
    }

    /// The pipe the worker reads batches from, for a pipeline's writer, and the longest a
    /// batch may wait to be written (the worker reads it only once it has computed those
    /// before it).
    pub(crate) fn input(&self) -> std::io::Result<Input> {
        Ok(Input {
            pipe: self.input.as_fd().try_clone_to_owned()?,
            shared: self.shared.clone(),
            timeout: self.call_timeout,
        })
    }

    /// The input schema the worker holds; see [`Worker::call`].
    pub(crate) fn sent_schema_mut(&mut self) -> &mut Option<SchemaRef> {
        &mut self.sent_schema
    }

    /// What a received frame means for a call of `rows` rows started at `started`.
    fn answer(
        &mut self,
        received: std::io::Result<(Kind, Vec<u8>)>,
        rows: usize,
        started: Instant,
    ) -> Result<CallOutput, NativeError> {
        self.calls += 1;
        let mut out = match received {
            // A Values frame arrives behind the output schema: a whole stream.
            Ok((Kind::Output | Kind::Values, body)) => self.decode(&body, rows),
            Ok((Kind::Error, body)) => {
                let (row, message) = guest_message(&body);
                Err(NativeError::Guest { row, message })
            }
            Ok((kind, _)) => {
                self.kill();
                Err(NativeError::Load(format!(
                    "unexpected {kind:?} from the worker"
                )))
            }
            Err(e) => Err(self.failure(e, self.call_timeout)),
        }?;
        out.elapsed = started.elapsed();
        Ok(out)
    }

    /// The result, checked: one column of the output type, one value per input row.
    fn decode(&self, body: &[u8], rows: usize) -> Result<CallOutput, NativeError> {
        let bad = |m: String| NativeError::Result(m);
        // The bytes come from the sandbox (its code can write to the protocol pipe): checked
        // against hostile lengths before arrow decodes them, within the output budget.
        let limits = lancet_ipc::Limits::new(self.max_output as u64);
        let (schema, batches) = lancet_ipc::read(body, &limits)
            .map_err(|e| bad(format!("not a readable Arrow IPC stream: {e}")))?;
        if schema.fields() != self.schema.fields() {
            return Err(bad(format!("schema {schema:?}, not {:?}", self.schema)));
        }
        let nulled = schema
            .metadata()
            .get("lancet.nulled")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        // Row errors as the sandbox reported them: only offsets inside the batch are kept,
        // and no more than the worker may send.
        let mut failures: Vec<(usize, String)> = schema
            .metadata()
            .get("lancet.errors")
            .and_then(|e| serde_json::from_str(e).ok())
            .unwrap_or_default();
        failures.retain(|(row, _)| *row < rows);
        failures.truncate(MAX_FAILURES.min(nulled));
        // The worker cuts messages to 2,000 characters; code in the sandbox could send more.
        for (_, message) in &mut failures {
            if let Some((cut, _)) = message.char_indices().nth(2000) {
                message.truncate(cut);
            }
        }
        let [out] = batches.as_slice() else {
            return Err(bad(format!("{} batches, not one", batches.len())));
        };
        if out.num_rows() != rows {
            return Err(bad(format!("{} values for {rows} rows", out.num_rows())));
        }
        Ok(CallOutput {
            values: out.column(0).clone(),
            nulled,
            failures,
            elapsed: Duration::ZERO,
        })
    }

    /// What a failed read or write means: a deadline passed (the sandbox is killed), or the
    /// worker died (how, and its last words).
    fn failure(&mut self, e: std::io::Error, timeout: Duration) -> NativeError {
        if e.kind() == std::io::ErrorKind::TimedOut {
            self.kill();
            return NativeError::Timeout(timeout);
        }
        if e.kind() == std::io::ErrorKind::InvalidData {
            self.kill();
            return NativeError::Result(format!("the worker broke the protocol: {e}"));
        }
        // It closed its pipe: give it a moment to exit, then say how it ended.
        let until = Instant::now() + Duration::from_secs(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
                _ => break None,
            }
        };
        self.kill();
        // Let the stderr thread take the last words.
        std::thread::sleep(Duration::from_millis(20));
        let tail = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        let text = String::from_utf8_lossy(&tail.0);
        let last: Vec<&str> = text.lines().rev().take(6).collect();
        let detail = if last.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                last.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )
        };
        NativeError::Killed {
            status: status.map_or_else(|| format!("{e}"), |s| s.to_string()),
            detail,
        }
    }

    /// Kills the sandbox: bwrap dies, its child (pid 1 of the sandbox) gets SIGKILL from
    /// `--die-with-parent`, and the kernel ends every process in that pid namespace.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A frame's payload in pieces, written with one `writev`.
pub(crate) struct Parts(Vec<Vec<u8>>);

impl Parts {
    pub(crate) fn slices(&self) -> Vec<&[u8]> {
        self.0.iter().map(Vec::as_slice).collect()
    }
}

/// The frame carrying `batch` to a worker holding input schema `sent` (updated): after the
/// first batch of a schema, bare messages (per batch, Python would spend more parsing a
/// schema and writing one back than it spends on a cheap function).
pub(crate) fn encode(
    sent: &mut Option<SchemaRef>,
    batch: &RecordBatch,
) -> Result<(Kind, Parts), NativeError> {
    let io = |e| NativeError::Io(std::io::Error::other(e));
    let bare = match sent {
        Some(s) if *s == batch.schema() => message(batch).map_err(io)?,
        _ => None,
    };
    Ok(match bare {
        Some(parts) => (Kind::Message, Parts(parts)),
        None => {
            // The worker takes a stream's schema as soon as it reads it, even if the call then
            // fails (and drops the one it held if it cannot read it): until a call succeeds,
            // the next batch goes as a stream again.
            *sent = None;
            (Kind::Batch, Parts(vec![stream(batch).map_err(io)?]))
        }
    })
}

/// `batch` as an IPC stream (its schema, then the batch).
fn stream(batch: &RecordBatch) -> Result<Vec<u8>, arrow_schema::ArrowError> {
    let mut ipc = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut ipc, &batch.schema())?;
    w.write(batch)?;
    w.finish()?;
    drop(w);
    Ok(ipc)
}

/// `batch` as one encapsulated IPC record batch message, as its header and its body (the
/// body, the size of the batch, is not copied behind the header); `None` when it needs
/// dictionary messages too (those go as a stream).
fn message(batch: &RecordBatch) -> Result<Option<Vec<Vec<u8>>>, arrow_schema::ArrowError> {
    use arrow_ipc::writer::{
        DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteOptions, write_message,
    };
    let options = IpcWriteOptions::default();
    let (dictionaries, encoded) = IpcDataGenerator::default().encode(
        batch,
        &mut DictionaryTracker::new(false),
        &options,
        &mut Default::default(),
    )?;
    if !dictionaries.is_empty() {
        return Ok(None);
    }
    // The body is already padded (to 64 bytes by default; IPC asks for 8), so
    // the message is exactly the header written alone followed by the body.
    let EncodedData {
        ipc_message,
        arrow_data,
    } = encoded;
    if !arrow_data.len().is_multiple_of(8) {
        return Err(arrow_schema::ArrowError::MemoryError(
            "Arrow data not aligned".into(),
        ));
    }
    let mut header = Vec::with_capacity(ipc_message.len() + 16);
    let header_only = EncodedData {
        ipc_message,
        arrow_data: Vec::new(),
    };
    write_message(&mut header, header_only, &options)?;
    Ok(Some(vec![header, arrow_data]))
}

fn schema_bytes(schema: &Schema) -> Result<Vec<u8>, NativeError> {
    let mut out = Vec::new();
    let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, schema)
        .map_err(|e| NativeError::Io(std::io::Error::other(e)))?;
    w.finish()
        .map_err(|e| NativeError::Io(std::io::Error::other(e)))?;
    drop(w);
    Ok(out)
}

/// `(row, message)` of an error frame.
fn guest_message(body: &[u8]) -> (Option<usize>, String) {
    #[derive(serde::Deserialize)]
    struct E {
        message: String,
        row: Option<usize>,
    }
    match serde_json::from_slice::<E>(body) {
        Ok(e) => (e.row, e.message),
        Err(_) => (None, String::from_utf8_lossy(body).into_owned()),
    }
}
