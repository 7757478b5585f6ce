//! Several batches in flight on one worker. Called one at a time, a worker waits for the host
//! between batches: two cross-process wake-ups per call (~0.15-0.3 ms here), as long as a
//! cheap pyarrow function's whole work on 16,384 rows. A [`Pipeline`] writes the next batch
//! while the worker computes the last, so the worker finds it waiting and never sleeps
//! between batches; the host reads answers on another thread.
//!
//! Two threads per pipeline, one per pipe direction, so neither direction can block the
//! other when a batch or a result is larger than the pipe's buffer: the writer blocks only
//! while the worker computes earlier batches, the reader only until the next answer.

use std::os::fd::AsFd;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use crate::frame::{self, Kind};
use crate::shm;
use crate::slots::Slot;
use crate::worker::{Input, encode};
use crate::{CallOutput, NativeError, Worker};

type Answer = Result<CallOutput, NativeError>;

/// A worker computing the batches submitted to it in order, the next one sent while it
/// computes the last. Dropping the pipeline lets the worker finish what was submitted, then
/// hands it back (to the pool it came from, see [`crate::Pool::pipeline`]).
pub struct Pipeline {
    jobs: mpsc::Sender<Job>,
}

/// A batch submitted to a [`Pipeline`]: its answer, once the worker has computed it.
#[must_use = "a submitted batch's answer says whether it was computed"]
pub struct Pending(mpsc::Receiver<Answer>);

struct Job {
    batch: RecordBatch,
    reply: mpsc::SyncSender<Answer>,
}

/// A batch written to the worker, for the reader.
struct Sent {
    rows: usize,
    /// The input schema the worker holds once it has read the batch.
    schema: Option<SchemaRef>,
    reply: mpsc::SyncSender<Answer>,
}

/// What a pipeline's first batch gets it.
pub(crate) struct Opened {
    pub(crate) worker: Worker,
    /// Where a worker goes when the pipeline is done with it (`None`: it died on the way).
    pub(crate) done: Arc<dyn Fn(Option<Worker>) + Send + Sync>,
    /// The tenant's slot it runs in, if it comes from a pool: given up to waiters between
    /// batches now and then, freed when every batch is answered.
    pub(crate) slot: Option<Slot>,
    /// For a pool's pipeline: when a worker is retired, and how to start a fresh one. A
    /// worker's CPU-time limit counts its whole life, so one kept busy by a long backfill is
    /// replaced between batches before it could be killed in the middle of one.
    pub(crate) renew: Option<(Retire, Renew)>,
}

/// How old a worker may get, and how many batches it may compute, before it is retired.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retire {
    pub(crate) age: Duration,
    pub(crate) calls: u64,
}

/// Starts a fresh worker of the pipeline's function.
pub(crate) type Renew = Box<dyn FnMut() -> Result<Worker, NativeError> + Send>;

/// A pipeline holding its slot this long gives it up to a waiting batch of its tenant (after
/// the batches in the worker's hands are answered), then queues for it again.
const YIELD_AFTER: Duration = Duration::from_secs(1);

impl Pipeline {
    /// The most batches in the worker's hands at once (written ahead of the answers read);
    /// more submitted wait in the pipeline's queue. A caller keeps this many submitted to
    /// keep the worker busy.
    pub const DEPTH: usize = WINDOW;

    /// Feeds `worker`; `done` receives it back when the pipeline is dropped and every
    /// submitted batch is answered (`None` if it died or was killed on the way).
    pub fn start(
        worker: Worker,
        done: impl FnOnce(Option<Worker>) + Send + 'static,
    ) -> Result<Pipeline, NativeError> {
        let done = std::sync::Mutex::new(Some(done));
        Pipeline::lazy(move || {
            Ok(Opened {
                worker,
                // Without renewal there is one worker: `done` runs once.
                done: Arc::new(move |w| {
                    let taken = done.lock().unwrap_or_else(|p| p.into_inner()).take();
                    if let Some(done) = taken {
                        done(w);
                    }
                }),
                slot: None,
                renew: None,
            })
        })
    }

    /// A pipeline that gets its worker from `open` when the first batch is submitted, on its
    /// own thread: creating it never blocks, and one that is never given a batch starts no
    /// worker. Should `open` fail, every batch is answered with its error.
    pub(crate) fn lazy(
        open: impl FnOnce() -> Result<Opened, NativeError> + Send + 'static,
    ) -> Result<Pipeline, NativeError> {
        let (jobs, jobs_rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("lancet-native-writer".into())
            .spawn(move || feed(open, jobs_rx))?;
        Ok(Pipeline { jobs })
    }

    /// Queues `batch` (the function's input columns) behind those submitted before; never
    /// blocks. Its answer is as [`Worker::call`]'s.
    pub fn submit(&self, batch: RecordBatch) -> Pending {
        let (reply, answer) = mpsc::sync_channel(1);
        // The writer runs until this pipeline is dropped; should it be gone, the dropped reply
        // answers the batch (see `Pending::wait`).
        let _ = self.jobs.send(Job { batch, reply });
        Pending(answer)
    }
}

/// The writer thread: at the first batch, opens the worker and starts the reader; then
/// writes batches as they come.
fn feed(open: impl FnOnce() -> Result<Opened, NativeError>, jobs: mpsc::Receiver<Job>) {
    let Ok(first) = jobs.recv() else {
        return; // dropped before any batch
    };
    let mut writer = match open().and_then(Writer::new) {
        Ok(w) => w,
        Err(e) => return refuse(e, std::iter::once(first).chain(jobs)),
    };
    writer.run(std::iter::once(first).chain(jobs));
}

/// Answers every job with `e` (the first) or its message (the rest).
fn refuse(e: NativeError, jobs: impl Iterator<Item = Job>) {
    let why = e.to_string();
    let mut e = Some(e);
    for job in jobs {
        let answer = e.take().unwrap_or_else(|| NativeError::Load(why.clone()));
        let _ = job.reply.send(Err(answer));
    }
}

impl Pending {
    /// Blocks until the batch is computed; the time in [`CallOutput::elapsed`] counts from
    /// when the worker could start it.
    pub fn wait(self) -> Answer {
        self.0.recv().unwrap_or_else(|_| {
            Err(NativeError::Killed {
                status: "the pipeline ended before this batch was computed".into(),
                detail: String::new(),
            })
        })
    }
}

/// Batches written ahead of the answers read: the shared memory's slots each way rely on it.
const WINDOW: usize = shm::WAYS;

/// One worker as the writer feeds it: its input, and the reader thread taking its answers.
struct Session {
    input: Input,
    /// The input schema the worker holds once it has read what was written.
    schema: Option<SchemaRef>,
    sent: mpsc::Sender<Sent>,
    /// One message per answer the reader has taken.
    reads: mpsc::Receiver<()>,
    written: usize,
    answered: usize,
    /// When the worker started, and the batches it had computed before this session.
    born: Instant,
    calls_before: u64,
}

impl Session {
    /// Starts the reader of `worker`, which hands it to `done` when this session is dropped
    /// and every batch written is answered.
    fn open(
        mut worker: Worker,
        done: Arc<dyn Fn(Option<Worker>) + Send + Sync>,
    ) -> Result<Session, NativeError> {
        let input = worker.input()?;
        let schema = worker.sent_schema_mut().clone();
        let born = Instant::now() - worker.age();
        let calls_before = worker.calls();
        let (sent, sent_rx) = mpsc::channel::<Sent>();
        let (read, reads) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("lancet-native-reader".into())
            .spawn(move || done(read_answers(worker, sent_rx, read)))?;
        Ok(Session {
            input,
            schema,
            sent,
            reads,
            written: 0,
            answered: 0,
            born,
            calls_before,
        })
    }

    /// Waits until at most `in_flight` written batches are unanswered; false if the reader
    /// is gone.
    fn wait_answers(&mut self, in_flight: usize) -> bool {
        while self.written - self.answered > in_flight {
            if self.reads.recv().is_err() {
                return false;
            }
            self.answered += 1;
        }
        true
    }
}

/// The writer thread's state once the worker is open.
struct Writer {
    session: Session,
    done: Arc<dyn Fn(Option<Worker>) + Send + Sync>,
    renew: Option<(Retire, Renew)>,
    slot: Option<Slot>,
    /// When the slot was last taken.
    since: Instant,
}

impl Writer {
    fn new(opened: Opened) -> Result<Writer, NativeError> {
        Ok(Writer {
            session: Session::open(opened.worker, opened.done.clone())?,
            done: opened.done,
            renew: opened.renew,
            slot: opened.slot,
            since: Instant::now(),
        })
    }

    fn run(&mut self, mut jobs: impl Iterator<Item = Job>) {
        let mut broken = false;
        while let Some(Job { batch, reply }) = jobs.next() {
            if !broken && let Err(e) = self.renew_if_old() {
                let _ = reply.send(Err(e));
                return refuse(
                    NativeError::Load("no fresh worker for this pipeline".into()),
                    jobs,
                );
            }
            let session = &mut self.session;
            if !broken {
                let (kind, parts) = match encode(&mut session.schema, &batch) {
                    Ok(frame) => frame,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        continue;
                    }
                };
                if kind == Kind::Batch {
                    session.schema = Some(batch.schema());
                }
                self.take_turn();
                let session = &mut self.session;
                // The answer WINDOW batches back is read: the worker has read that batch (its
                // slot is free) and the host has taken that answer (the worker may reuse its).
                broken = !session.wait_answers(WINDOW - 1);
                // The worker reads a batch once it has computed the one before: one call's
                // time for that one, one for this one's own reading.
                let deadline = frame::deadline(session.input.timeout.saturating_mul(2));
                let slot = (session.written % WINDOW) as u32;
                // A failed write means the worker is gone or stuck: the reader finds out (EOF,
                // or its own deadline, which kills it) and answers this batch and the later
                // ones.
                broken = broken
                    || shm::send(
                        session.input.pipe.as_fd(),
                        session.input.shared.as_deref(),
                        slot,
                        kind,
                        &parts.slices(),
                        deadline,
                    )
                    .is_err();
                session.written += 1;
            }
            let session = &mut self.session;
            let (rows, schema) = (batch.num_rows(), session.schema.clone());
            if session
                .sent
                .send(Sent {
                    rows,
                    schema,
                    reply,
                })
                .is_err()
            {
                break;
            }
        }
        // The slot is freed (dropped with the writer) once the worker has answered all.
        self.session.wait_answers(0);
    }

    /// Before a batch: replaces a worker old enough to be retired with a fresh one, once it
    /// has answered what it holds (the old one goes back to `done`, which retires it).
    fn renew_if_old(&mut self) -> Result<(), NativeError> {
        let Some((retire, start)) = &mut self.renew else {
            return Ok(());
        };
        let calls = self.session.calls_before + self.session.written as u64;
        if self.session.born.elapsed() < retire.age && calls < retire.calls {
            return Ok(());
        }
        self.session.wait_answers(0);
        let fresh = Session::open(start()?, self.done.clone())?;
        // Dropping the old session ends its reader, which hands its worker back.
        self.session = fresh;
        Ok(())
    }

    /// Before a batch: gives the slot up to a waiting batch of the tenant when held long
    /// enough, once the worker has answered what it holds (it runs nothing meanwhile).
    fn take_turn(&mut self) {
        let Some(slot) = &self.slot else { return };
        if self.since.elapsed() < YIELD_AFTER || !slot.contended() {
            return;
        }
        if self.session.wait_answers(0)
            && let Some(slot) = &mut self.slot
        {
            slot.yield_to_waiters();
        }
        self.since = Instant::now();
    }
}

fn read_answers(
    mut worker: Worker,
    sent: mpsc::Receiver<Sent>,
    read: mpsc::Sender<()>,
) -> Option<Worker> {
    let mut dead: Option<String> = None;
    for Sent {
        rows,
        schema,
        reply,
    } in sent
    {
        let answer = match &dead {
            Some(why) => Err(NativeError::Killed {
                status: "at an earlier batch".into(),
                detail: format!(": {why}"),
            }),
            None => worker.receive_answer(rows),
        };
        let _ = read.send(());
        match &answer {
            Ok(_) => *worker.sent_schema_mut() = schema,
            Err(e) if e.worker_survives() => *worker.sent_schema_mut() = None,
            Err(e) if dead.is_none() => dead = Some(e.to_string()),
            Err(_) => {}
        }
        let _ = reply.send(answer);
    }
    dead.is_none().then_some(worker)
}
