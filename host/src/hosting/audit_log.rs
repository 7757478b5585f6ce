//! The audit log: a Lance table at `<root>/_audit/log.lance`, appended by every server
//! sharing the root, each as a writer with a hash chain of its own (`lancet_hosting::audit`).
//!
//! Records are written in groups: a request whose change is audited waits until its record is
//! stored (an acknowledged change always has its record), and every record that arrived while
//! the last group was being written goes into the next one, so N concurrent writes cost one
//! append, not N. Refused authentications are not waited for and are bounded: past
//! [`MAX_QUEUED`] unwritten, further ones are counted and summed up in one record.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arrow_array::{
    Array, ArrayRef, Int64Array, RecordBatch, RecordBatchIterator, StringArray, UInt16Array,
    UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use lance::Dataset;
use lance::dataset::{WriteMode, WriteParams};
use lance::session::Session;
use lancet_hosting::audit::{CLOSE_ACTION, Chain, Record, Report, Sealed};
use tokio::sync::{mpsc, oneshot};

/// Refused authentications waiting to be written, at most.
pub const MAX_QUEUED: usize = 10_000;

/// Records a query returns at most.
pub const MAX_ROWS: usize = 10_000;

struct Entry {
    record: Record,
    done: Option<oneshot::Sender<Result<(), String>>>,
}

/// This process's writer of the root's audit log.
pub struct AuditLog {
    uri: String,
    session: Arc<Session>,
    storage_options: std::collections::HashMap<String, String>,
    tx: mpsc::UnboundedSender<Entry>,
    queued: Arc<AtomicUsize>,
    dropped: Arc<AtomicU64>,
    writer: String,
}

/// What a query asks for; every part optional.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub tenant: Option<String>,
    pub principal: Option<String>,
    pub action: Option<String>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    pub limit: usize,
}

fn schema() -> SchemaRef {
    let s = |n: &str| Field::new(n, DataType::Utf8, false);
    Arc::new(Schema::new(vec![
        s("writer"),
        Field::new("seq", DataType::UInt64, false),
        Field::new("time_ms", DataType::Int64, false),
        s("tenant"),
        s("principal"),
        s("action"),
        s("object"),
        s("outcome"),
        Field::new("status", DataType::UInt16, false),
        s("request_id"),
        s("detail"),
        s("prev_hash"),
        s("hash"),
    ]))
}

fn to_batch(rows: &[Sealed]) -> RecordBatch {
    let text = |f: &dyn Fn(&Sealed) -> &str| -> ArrayRef {
        Arc::new(StringArray::from_iter_values(rows.iter().map(f)))
    };
    let columns: Vec<ArrayRef> = vec![
        text(&|s| &s.writer),
        Arc::new(UInt64Array::from_iter_values(rows.iter().map(|s| s.seq))),
        Arc::new(Int64Array::from_iter_values(
            rows.iter().map(|s| s.record.time_ms),
        )),
        text(&|s| &s.record.tenant),
        text(&|s| &s.record.principal),
        text(&|s| &s.record.action),
        text(&|s| &s.record.object),
        text(&|s| &s.record.outcome),
        Arc::new(UInt16Array::from_iter_values(
            rows.iter().map(|s| s.record.status),
        )),
        text(&|s| &s.record.request_id),
        text(&|s| &s.record.detail),
        text(&|s| &s.prev_hash),
        text(&|s| &s.hash),
    ];
    RecordBatch::try_new(schema(), columns).expect("columns match the schema")
}

fn from_batch(batch: &RecordBatch, out: &mut Vec<Sealed>) -> Result<(), String> {
    let col = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| format!("the audit log has no column '{name}'"))
    };
    let text = |name: &str| -> Result<StringArray, String> {
        arrow_cast::cast(col(name)?, &DataType::Utf8)
            .map_err(|e| e.to_string())?
            .as_any()
            .downcast_ref::<StringArray>()
            .cloned()
            .ok_or_else(|| format!("audit column '{name}' is not text"))
    };
    let [
        writer,
        tenant,
        principal,
        action,
        object,
        outcome,
        request_id,
        detail,
        prev,
        hash,
    ] = [
        "writer",
        "tenant",
        "principal",
        "action",
        "object",
        "outcome",
        "request_id",
        "detail",
        "prev_hash",
        "hash",
    ]
    .map(text);
    let (writer, tenant, principal, action, object, outcome) =
        (writer?, tenant?, principal?, action?, object?, outcome?);
    let (request_id, detail, prev, hash) = (request_id?, detail?, prev?, hash?);
    let seq = col("seq")?
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or("audit column 'seq' is not uint64")?;
    let time = col("time_ms")?
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or("audit column 'time_ms' is not int64")?;
    let status = col("status")?
        .as_any()
        .downcast_ref::<UInt16Array>()
        .ok_or("audit column 'status' is not uint16")?;
    for i in 0..batch.num_rows() {
        out.push(Sealed {
            writer: writer.value(i).to_string(),
            seq: seq.value(i),
            record: Record {
                time_ms: time.value(i),
                tenant: tenant.value(i).to_string(),
                principal: principal.value(i).to_string(),
                action: action.value(i).to_string(),
                object: object.value(i).to_string(),
                outcome: outcome.value(i).to_string(),
                status: status.value(i),
                request_id: request_id.value(i).to_string(),
                detail: detail.value(i).to_string(),
            },
            prev_hash: prev.value(i).to_string(),
            hash: hash.value(i).to_string(),
        });
    }
    Ok(())
}

/// A value inside a SQL string literal.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

impl AuditLog {
    /// Starts this process's writer (node id and a random suffix, so a restarted node starts
    /// a new chain rather than continuing one it cannot see the end of).
    pub fn start(
        root_uri: &str,
        session: Arc<Session>,
        storage_options: std::collections::HashMap<String, String>,
        node: &str,
    ) -> Arc<Self> {
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = format!("{node}/{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        let log = Arc::new(Self {
            uri: format!("{}/_audit/log.lance", root_uri.trim_end_matches('/')),
            session,
            storage_options,
            tx,
            queued: Default::default(),
            dropped: Default::default(),
            writer: writer.clone(),
        });
        tokio::spawn(write_loop(log.clone(), Chain::new(writer), rx));
        log
    }

    /// This process's writer id.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// Appends `record` and waits until it is stored.
    pub async fn append(&self, record: Record) -> Result<(), String> {
        let (done, stored) = oneshot::channel();
        self.tx
            .send(Entry {
                record,
                done: Some(done),
            })
            .map_err(|_| "the audit writer has stopped".to_string())?;
        stored
            .await
            .map_err(|_| "the audit writer has stopped".to_string())?
    }

    /// Appends `record` without waiting (refused authentications), unless too many are
    /// queued already: then it is only counted.
    pub fn note(&self, record: Record) {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= MAX_QUEUED {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let _ = self.tx.send(Entry { record, done: None });
    }

    /// Closes the chain: a close record, stored, so a later cut of its end shows.
    pub async fn close(&self) {
        let record = Record {
            time_ms: chrono::Utc::now().timestamp_millis(),
            action: CLOSE_ACTION.into(),
            outcome: "ok".into(),
            ..Default::default()
        };
        if let Err(e) = self.append(record).await {
            tracing::warn!("audit log: the close record was not written: {e}");
        }
    }

    async fn open(&self) -> Result<Option<Dataset>, String> {
        match lance::dataset::builder::DatasetBuilder::from_uri(&self.uri)
            .with_session(self.session.clone())
            .with_storage_options(self.storage_options.clone())
            .load()
            .await
        {
            Ok(ds) => Ok(Some(ds)),
            Err(lance::Error::DatasetNotFound { .. }) | Err(lance::Error::NotFound { .. }) => {
                Ok(None)
            }
            Err(e) => Err(format!("audit log: {e}")),
        }
    }

    async fn store(&self, rows: &[Sealed]) -> Result<(), String> {
        let batch = to_batch(rows);
        let params = WriteParams {
            mode: WriteMode::Append,
            session: Some(self.session.clone()),
            store_params: Some(crate::root::store_params(&self.storage_options)),
            ..Default::default()
        };
        let reader = RecordBatchIterator::new([Ok(batch)], schema());
        Dataset::write(reader, self.uri.as_str(), Some(params))
            .await
            .map(|_| ())
            .map_err(|e| format!("audit log append: {e}"))
    }

    /// Records matching `filter`, newest first, at most `filter.limit` (and [`MAX_ROWS`]).
    pub async fn query(&self, filter: &Filter) -> Result<Vec<Sealed>, String> {
        let Some(ds) = self.open().await? else {
            return Ok(Vec::new());
        };
        let mut terms = Vec::new();
        if let Some(t) = &filter.tenant {
            terms.push(format!("tenant = {}", quoted(t)));
        }
        if let Some(p) = &filter.principal {
            terms.push(format!("principal = {}", quoted(p)));
        }
        if let Some(a) = &filter.action {
            terms.push(format!("action = {}", quoted(a)));
        }
        if let Some(s) = filter.since_ms {
            terms.push(format!("time_ms >= {s}"));
        }
        if let Some(u) = filter.until_ms {
            terms.push(format!("time_ms < {u}"));
        }
        let mut rows = self.scan(&ds, &terms.join(" AND ")).await?;
        rows.sort_by(|a, b| {
            (b.record.time_ms, &b.writer, b.seq).cmp(&(a.record.time_ms, &a.writer, a.seq))
        });
        rows.truncate(filter.limit.clamp(1, MAX_ROWS));
        Ok(rows)
    }

    async fn scan(&self, ds: &Dataset, filter: &str) -> Result<Vec<Sealed>, String> {
        let batches = super::scan_all(ds, filter)
            .await
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        for b in &batches {
            from_batch(b, &mut rows)?;
        }
        Ok(rows)
    }

    /// Checks every writer's chain in the whole log.
    pub async fn verify(&self) -> Result<Report, String> {
        let Some(ds) = self.open().await? else {
            return Ok(Report::default());
        };
        Ok(lancet_hosting::audit::verify(self.scan(&ds, "").await?))
    }
}

/// Appends between compactions of the log (each append is a small file and a version).
const COMPACT_EVERY: u64 = 256;

impl AuditLog {
    /// Merges the log's small files (records are rewritten, not changed: the chains still
    /// verify). Run by the writer every [`COMPACT_EVERY`] appends, off its path.
    pub async fn compact(&self) -> Result<(), String> {
        let Some(mut ds) = self.open().await? else {
            return Ok(());
        };
        lance::dataset::optimize::compact_files(&mut ds, Default::default(), None)
            .await
            .map(|_| ())
            .map_err(|e| format!("audit log compaction: {e}"))
    }
}

async fn write_loop(log: Arc<AuditLog>, mut chain: Chain, mut rx: mpsc::UnboundedReceiver<Entry>) {
    let mut appended = 0u64;
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while group.len() < 4096 {
            match rx.try_recv() {
                Ok(e) => group.push(e),
                Err(_) => break,
            }
        }
        let unwaited = group.iter().filter(|e| e.done.is_none()).count();
        log.queued.fetch_sub(unwaited, Ordering::Relaxed);
        let mut records: Vec<Record> = group.iter().map(|e| e.record.clone()).collect();
        let dropped = log.dropped.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            records.push(Record {
                time_ms: chrono::Utc::now().timestamp_millis(),
                action: "audit.refusals_dropped".into(),
                outcome: "refused".into(),
                detail: format!(
                    "{dropped} refused authentications were not recorded one by one (more than \
                     {MAX_QUEUED} waiting)"
                ),
                ..Default::default()
            });
        }
        let sealed: Vec<Sealed> = records.into_iter().map(|r| chain.seal(r)).collect();
        let mut result = Err(String::new());
        for attempt in 0..6u32 {
            result = log.store(&sealed).await;
            match &result {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(attempt, error = %e, "audit log: append failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                }
            }
        }
        if result.is_ok() {
            appended += 1;
            if appended.is_multiple_of(COMPACT_EVERY) {
                let log = log.clone();
                tokio::spawn(async move {
                    if let Err(e) = log.compact().await {
                        tracing::warn!(error = %e, "audit log not compacted");
                    }
                });
            }
        } else {
            chain.rewind(&sealed[0]);
            if dropped > 0 {
                log.dropped.fetch_add(dropped, Ordering::Relaxed);
            }
        }
        for e in group {
            if let Some(done) = e.done {
                let _ = done.send(result.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: i64, tenant: &str) -> Record {
        Record {
            time_ms: 1_000 + i,
            tenant: tenant.into(),
            principal: format!("key:k{}", i % 2),
            action: "POST /v1/table/{id}/insert".into(),
            object: "t".into(),
            outcome: "ok".into(),
            status: 200,
            request_id: format!("r{i}"),
            detail: String::new(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_are_stored_chained_and_queryable() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        let session = Arc::new(Session::default());
        let a = AuditLog::start(root, session.clone(), Default::default(), "a");
        let b = AuditLog::start(root, session, Default::default(), "b");
        let mut tasks = Vec::new();
        for i in 0..40 {
            let log = if i % 2 == 0 { a.clone() } else { b.clone() };
            let tenant = if i % 4 < 2 { "acme" } else { "other" };
            tasks.push(tokio::spawn(
                async move { log.append(record(i, tenant)).await },
            ));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        a.note(record(99, ""));
        a.close().await;
        let report = a.verify().await.unwrap();
        assert!(report.ok(), "{report:?}");
        assert_eq!((report.records, report.writers), (42, 2));
        assert_eq!(report.open, vec![b.writer().to_string()]);
        let acme = a
            .query(&Filter {
                tenant: Some("acme".into()),
                principal: Some("key:k0".into()),
                limit: 100,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(acme.len(), 10);
        assert!(
            acme.windows(2)
                .all(|w| w[0].record.time_ms >= w[1].record.time_ms)
        );
        let recent = a
            .query(&Filter {
                since_ms: Some(1_030),
                until_ms: Some(1_040),
                limit: 5,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            recent.iter().map(|r| r.record.time_ms).collect::<Vec<_>>(),
            vec![1_039, 1_038, 1_037, 1_036, 1_035]
        );
    }
}
