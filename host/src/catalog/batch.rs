//! All-or-nothing batches of catalog operations (`declare_table`, `deregister_table`,
//! `create_table_version`, `delete_table_versions`), also under SIGKILL.
//!
//! The catalog (`DirectoryNamespace`) has no multi-object transaction, so atomicity is built
//! here from an *intent record*: the validated batch, written to
//! `<tenant root>/_batch_intents/<millis>-<uuid>.json` before anything is applied and removed
//! when the batch is done. `Catalog::rename_table` is such a batch too (deregister, then an
//! internal register at the same location). Steps:
//!
//! 1. Under the catalog's commit lock (no other catalog change of this server interleaves),
//!    every operation is checked and what would undo it is learnt: a deregistered table's
//!    location; for a new version, the SHA-256 of the staged manifest (so an undo deletes only
//!    the bytes this batch published, never a version a concurrent writer committed); whether
//!    the version existed already (then there is nothing to undo).
//! 2. The intent (operations + undo information) is written. Object-store puts are atomic
//!    (a local root writes a temporary file and renames it), so a crash leaves either no intent
//!    or a whole one.
//! 3. The reversible operations are applied in request order. If one fails, the ones before
//!    it are undone in reverse order and the intent removed (409 for a conflict, else the error).
//! 4. Version deletions (irreversible) run last. Before the first, a `<name>.deleting` marker
//!    is written: from then on the batch is committed.
//! 5. The intent (then the marker) is removed.
//!
//! **Recovery** (when a tenant's catalog is first opened, and before every batch-commit) looks
//! at leftover intents, oldest first. Without a marker the batch is **rolled back**: every
//! step's undo runs, each idempotent and checked against the catalog ("deregister the declared
//! id if it is there", "register the deregistered id again unless it is there", "delete the
//! new version if it holds exactly the staged bytes"), so steps that never ran, ran half-way
//! or were already undone are all handled, and a crash during recovery just means recovery runs
//! again. With a marker it is **rolled forward**: the deletions run again (deleting a version
//! file that is already gone is not an error; a table or branch that has gone meanwhile has
//! nothing left to delete). A recovery that fails when the catalog opens is logged and the
//! tenant opens anyway (one bad record must not lock it out); batch-commits keep retrying it
//! first and fail until it succeeds.
//!
//! Why roll back rather than forward: the client never got an answer, so either outcome is
//! allowed, but only the undos are certain to succeed. A redo can fail for reasons the batch
//! would also have failed for (a concurrent writer took the version number, the staged manifest
//! is gone once copied), and then recovery would have to undo anyway. Deletions cannot be
//! undone, which is why they run last and are rolled forward once started.
//!
//! Limits: undoing a declare deregisters whatever the catalog holds under that id. Inside this
//! server nothing else can declare it meanwhile (commit lock; recovery runs before the catalog
//! is used), but another process writing the same catalog directly could. Object-store puts are
//! not fsynced (like lance's own manifests): the record survives a killed process, and a power
//! loss as well as lance's commits do.

use std::sync::Arc;

use bytes::Bytes;
use lance_namespace::ErrorCode;
use lance_namespace::models::{
    BatchDeleteTableVersionsRequest, CreateTableVersionRequest, DeclareTableRequest,
    DeregisterTableRequest, DescribeTableVersionRequest, ListTableVersionsRequest,
    RegisterTableRequest, TableExistsRequest, VersionRange,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Catalog, not_found_as_table};
use crate::error::{ApiError, ApiResult};
use crate::root::RootStore;

/// Where intents live, under a tenant's root.
const DIR: &str = "_batch_intents";

/// The largest staged manifest read (manifests of tables with millions of fragments stay far
/// below; the path a client names could otherwise be any data file of the table).
const STAGED_MANIFEST_MAX: u64 = 256 << 20;
const MARKER: &str = ".deleting";

/// One operation of a batch; serialised into the intent record as given (ids already
/// resolved, no credentials: `identity` and `context` are cleared).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchOp {
    DeclareTable(DeclareTableRequest),
    DeregisterTable(DeregisterTableRequest),
    CreateTableVersion(CreateTableVersionRequest),
    DeleteTableVersions(BatchDeleteTableVersionsRequest),
    /// Not sent by clients (batch-commit has no such operation): the second half of a rename.
    RegisterTable(RegisterTableRequest),
}

impl BatchOp {
    pub fn id(&self) -> &[String] {
        let id = match self {
            BatchOp::DeclareTable(r) => &r.id,
            BatchOp::DeregisterTable(r) => &r.id,
            BatchOp::CreateTableVersion(r) => &r.id,
            BatchOp::DeleteTableVersions(r) => &r.id,
            BatchOp::RegisterTable(r) => &r.id,
        };
        id.as_deref().unwrap_or_default()
    }

    fn is_deletion(&self) -> bool {
        matches!(self, BatchOp::DeleteTableVersions(_))
    }

    fn without_credentials(mut self) -> Self {
        match &mut self {
            BatchOp::DeclareTable(r) => (r.identity, r.context) = (None, None),
            BatchOp::DeregisterTable(r) => (r.identity, r.context) = (None, None),
            BatchOp::CreateTableVersion(r) => (r.identity, r.context) = (None, None),
            BatchOp::DeleteTableVersions(r) => (r.identity, r.context) = (None, None),
            BatchOp::RegisterTable(r) => (r.identity, r.context) = (None, None),
        }
        self
    }
}

/// What undoes a step, learnt before anything is applied.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Undo {
    /// A declare or register: deregister the id if the catalog has it.
    Deregister,
    /// A deregister: register the id at `location` again unless the catalog has it.
    Register { location: String },
    /// A new version: delete it if its manifest holds exactly these bytes (SHA-256, hex).
    DeleteVersion { sha256: String },
    /// Nothing to undo (a version that existed already; deletions, which run last).
    Nothing,
}

#[derive(Debug, Serialize, Deserialize)]
struct Step {
    op: BatchOp,
    undo: Undo,
}

#[derive(Debug, Serialize, Deserialize)]
struct Intent {
    steps: Vec<Step>,
}

/// The intent records of one catalog root, kept through the root's [`RootStore`] like all
/// other server state.
pub(crate) struct Intents {
    root: Arc<RootStore>,
}

fn key(name: &str) -> String {
    format!("{DIR}/{name}")
}

impl Intents {
    pub(crate) fn new(root: Arc<RootStore>) -> Self {
        Self { root }
    }

    async fn put(&self, name: &str, bytes: Vec<u8>) -> ApiResult<()> {
        self.root.put(&key(name), bytes).await
    }

    async fn get(&self, name: &str) -> ApiResult<Option<Bytes>> {
        Ok(self.root.get(&key(name)).await?.map(|v| v.bytes))
    }

    async fn delete(&self, name: &str) -> ApiResult<()> {
        self.root.delete(&key(name)).await
    }

    /// Names of the records left in the directory, sorted (oldest first).
    async fn list(&self) -> ApiResult<Vec<String>> {
        let mut names: Vec<String> = self
            .root
            .list(DIR)
            .await?
            .iter()
            .filter_map(|k| k.strip_prefix(DIR)?.strip_prefix('/'))
            // Records only: a local put's temporary file (`<name>#<n>`) left by a crash is
            // not one, nor is anything in a sub-folder.
            .filter(|n| !n.contains('#') && !n.contains('/'))
            .map(str::to_string)
            .collect();
        names.sort();
        Ok(names)
    }

    /// An object of the catalog's store named by its path in the store (staged manifests, as
    /// lance reports them).
    async fn read_object(&self, path: &str) -> ApiResult<Option<Bytes>> {
        Ok(self
            .root
            .get_at_path(path, STAGED_MANIFEST_MAX)
            .await?
            .map(|v| v.bytes))
    }
}

/// Test hook: with `LANCET_FAULT_INJECTION=1` and `LANCET_BATCH_CRASH_AT=<point>` in the
/// environment the process aborts at that point of a batch-commit, as if killed there, so tests
/// reach every point of the protocol: `intent` (written, nothing applied), `step-<i>` (request
/// operation `i` applied), `marker` (deletions about to start), `removed` (intent removed,
/// marker not yet).
fn crash_point(point: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| {
        let on = std::env::var("LANCET_FAULT_INJECTION").is_ok_and(|v| v == "1");
        on.then(|| std::env::var("LANCET_BATCH_CRASH_AT").ok())
            .flatten()
    });
    if at.as_deref() == Some(point) {
        eprintln!("LANCET_BATCH_CRASH_AT={point}: aborting");
        std::process::abort();
    }
}

/// Whether object-store path `path` names an object under table location `location` (a local
/// path or a URI): staged manifests must be the table's own, not any object of the store.
fn within_table(location: &str, path: &str) -> bool {
    let root = match location.split_once("://") {
        // file:///abs/path -> abs/path; s3://bucket/prefix -> prefix (paths are per bucket).
        Some(("file", rest)) => rest.trim_start_matches('/'),
        Some((_, rest)) => rest.split_once('/').map_or("", |(_, p)| p),
        None => location.trim_start_matches('/'),
    };
    let root = root.trim_end_matches('/');
    let path = path.trim_start_matches('/');
    !root.is_empty()
        && path.len() > root.len() + 1
        && path.starts_with(root)
        && path.as_bytes()[root.len()] == b'/'
        && !path.split('/').any(|seg| seg == ".." || seg == ".")
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The version a staged manifest file records; `None` when the bytes are no lance manifest.
/// (Layout: the manifest message, a u32 length before it, and a 16-byte footer of its i64
/// position and the magic `LANC`.)
fn staged_version(bytes: &[u8]) -> Option<u64> {
    use prost::Message;
    let len = bytes.len();
    if len < 20 || !bytes.ends_with(b"LANC") {
        return None;
    }
    let position = i64::from_le_bytes(bytes[len - 16..len - 8].try_into().ok()?);
    let start = usize::try_from(position).ok()?.checked_add(4)?;
    let message = bytes.get(start..len - 16)?;
    lance_table::format::pb::Manifest::decode(message)
        .ok()
        .map(|m| m.version)
}

/// Why a batch failed: the error, the operation (request index) it came from, and when.
#[derive(Debug)]
pub struct BatchFailure {
    pub error: ApiError,
    pub op: Option<usize>,
    pub stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Refused by the checks; nothing was touched.
    Check,
    /// Failed while applying; what was applied has been undone.
    Apply,
    /// The batch is committed but a version deletion failed; it is retried by recovery.
    Delete,
}

impl From<ApiError> for BatchFailure {
    fn from(error: ApiError) -> Self {
        Self {
            error,
            op: None,
            stage: Stage::Check,
        }
    }
}

impl Catalog {
    /// Applies `ops` all-or-nothing; answers one JSON result per operation, in request order.
    pub async fn commit_batch(&self, ops: Vec<BatchOp>) -> Result<Vec<Value>, BatchFailure> {
        let _guard = self
            .commit_lock
            .lock()
            .await
            .map_err(|error| BatchFailure {
                error,
                op: None,
                stage: Stage::Check,
            })?;
        self.commit_batch_locked(ops).await
    }

    /// [`Self::commit_batch`] for a caller that holds the commit lock.
    pub(crate) async fn commit_batch_locked(
        &self,
        ops: Vec<BatchOp>,
    ) -> Result<Vec<Value>, BatchFailure> {
        // A batch an earlier failure could not finish or undo is settled first.
        self.recover_batches().await?;
        let ops: Vec<BatchOp> = ops.into_iter().map(BatchOp::without_credentials).collect();
        let steps = self.prepare(ops).await?;
        let intent = Intent { steps };
        let name = format!(
            "{:013}-{}.json",
            chrono::Utc::now().timestamp_millis(),
            uuid::Uuid::new_v4().simple()
        );
        let bytes = serde_json::to_vec(&intent)
            .map_err(|e| ApiError::internal(format!("batch-commit intent: encode: {e}")))?;
        self.intents.put(&name, bytes).await?;
        crash_point("intent");
        let result = self.apply_intent(&name, &intent).await;
        self.invalidate_all();
        result
    }

    async fn apply_intent(&self, name: &str, intent: &Intent) -> Result<Vec<Value>, BatchFailure> {
        let steps = &intent.steps;
        let mut results = vec![Value::Null; steps.len()];
        let reversible: Vec<usize> = (0..steps.len())
            .filter(|&i| !steps[i].op.is_deletion())
            .collect();
        for (n, &i) in reversible.iter().enumerate() {
            match self.apply(&steps[i].op).await {
                Ok(r) => {
                    results[i] = r;
                    crash_point(&format!("step-{i}"));
                }
                Err(error) => {
                    // Undo what was applied, newest first; the failed step itself only when its
                    // undo checks that what it removes is ours (a version's bytes): a failed
                    // declare or deregister changed nothing of ours.
                    let mut undo: Vec<usize> = reversible[..n].to_vec();
                    if matches!(steps[i].undo, Undo::DeleteVersion { .. }) {
                        undo.push(i);
                    }
                    self.roll_back(name, undo.iter().rev().map(|&j| &steps[j]))
                        .await;
                    return Err(BatchFailure {
                        error,
                        op: Some(i),
                        stage: Stage::Apply,
                    });
                }
            }
        }
        if steps.iter().any(|s| s.op.is_deletion()) {
            let marker = format!("{name}{MARKER}");
            if let Err(error) = self.intents.put(&marker, Vec::new()).await {
                // Not committed: nothing may stay applied.
                self.roll_back(name, reversible.iter().rev().map(|&j| &steps[j]))
                    .await;
                return Err(BatchFailure {
                    error,
                    op: None,
                    stage: Stage::Apply,
                });
            }
            // Committed: from here on the batch is rolled forward.
            crash_point("marker");
            for (i, step) in steps.iter().enumerate() {
                if step.op.is_deletion() {
                    match self.apply(&step.op).await {
                        Ok(r) => {
                            results[i] = r;
                            crash_point(&format!("step-{i}"));
                        }
                        Err(error) => {
                            tracing::error!(error = %error, intent = name, "batch-commit version deletion failed; left for recovery");
                            return Err(BatchFailure {
                                error,
                                op: Some(i),
                                stage: Stage::Delete,
                            });
                        }
                    }
                }
            }
            self.intents.delete(name).await?;
            crash_point("removed");
            self.intents.delete(&marker).await?;
        } else {
            self.intents.delete(name).await?;
        }
        Ok(results)
    }

    /// Undoes `steps` and removes the intent; if an undo fails the intent stays, and the next
    /// batch-commit (or start-up) undoes it.
    async fn roll_back<'a>(&self, name: &str, steps: impl Iterator<Item = &'a Step>) {
        let undone = match self.undo_steps(steps).await {
            Ok(()) => self.intents.delete(name).await,
            Err(e) => Err(e),
        };
        if let Err(e) = undone {
            tracing::error!(error = %e, intent = name, "batch-commit roll-back failed; left for recovery");
        }
    }

    /// Checks every operation against the catalog before anything is applied, and learns what
    /// would undo it.
    async fn prepare(&self, ops: Vec<BatchOp>) -> Result<Vec<Step>, BatchFailure> {
        let mut steps: Vec<Step> = Vec::with_capacity(ops.len());
        let count = ops.len() as i64;
        for (i, mut op) in ops.into_iter().enumerate() {
            self.clamp_ranges(&mut op, count).await;
            let undo = self
                .precheck(&op, &steps)
                .await
                .map_err(|error| BatchFailure {
                    error,
                    op: Some(i),
                    stage: Stage::Check,
                })?;
            steps.push(Step { op, undo });
        }
        Ok(steps)
    }

    /// Cut a deletion's ranges to the versions the table can have by the time it runs (its
    /// latest, plus one per operation of the batch). lance-namespace refuses a range of more
    /// than a million versions, and deletions run after the batch is committed: a client's
    /// `end_version` of 2^62 made the deletion fail after the commit, on every retry.
    async fn clamp_ranges(&self, op: &mut BatchOp, batch_len: i64) {
        let BatchOp::DeleteTableVersions(r) = op else {
            return;
        };
        let latest = self
            .ns
            .list_table_versions(ListTableVersionsRequest {
                id: r.id.clone(),
                branch: r.branch.clone(),
                descending: Some(true),
                limit: Some(1),
                ..Default::default()
            })
            .await
            .ok()
            .and_then(|l| l.versions.first().map(|v| v.version));
        let Some(latest) = latest else {
            // precheck reports a table or branch that does not exist.
            return;
        };
        let bound = latest.saturating_add(1).saturating_add(batch_len);
        for range in &mut r.ranges {
            if range.end_version > bound {
                range.end_version = bound;
            }
            if range.start_version > bound {
                range.start_version = bound;
            }
        }
    }

    async fn precheck(&self, op: &BatchOp, before: &[Step]) -> ApiResult<Undo> {
        let id = op.id();
        match op {
            BatchOp::DeclareTable(_) | BatchOp::RegisterTable(_) => match self.locate(id).await {
                Ok(_) => Err(ApiError::new(
                    ErrorCode::TableAlreadyExists,
                    format!("table already exists: {}", id.join(".")),
                )),
                Err(e) if e.code == ErrorCode::TableNotFound => Ok(Undo::Deregister),
                Err(e) => Err(e),
            },
            BatchOp::DeregisterTable(_) => {
                // The location as the catalog has it now (not a cached one).
                self.invalidate(id);
                let location = self.locate(id).await?;
                Ok(Undo::Register { location })
            }
            BatchOp::CreateTableVersion(r) => {
                if r.version < 0 || r.manifest_path.is_empty() {
                    return Err(ApiError::invalid(
                        "create_table_version needs a version >= 0 and a manifest_path",
                    ));
                }
                let location = self.locate(id).await?;
                if !within_table(&location, &r.manifest_path) {
                    return Err(ApiError::invalid(format!(
                        "manifest_path '{}' is not inside the table's location {location}: a version's manifest is staged in its own table",
                        r.manifest_path
                    )));
                }
                let staged = self
                    .intents
                    .read_object(&r.manifest_path)
                    .await?
                    .ok_or_else(|| {
                        ApiError::invalid(format!(
                            "staged manifest not found at '{}'",
                            r.manifest_path
                        ))
                    })?;
                match staged_version(&staged) {
                    Some(v) if v == r.version as u64 => {}
                    Some(v) => {
                        return Err(ApiError::invalid(format!(
                            "the staged manifest at '{}' is version {v}, not version {}",
                            r.manifest_path, r.version
                        )));
                    }
                    None => {
                        return Err(ApiError::invalid(format!(
                            "'{}' is not a lance manifest",
                            r.manifest_path
                        )));
                    }
                }
                match self.version_manifest(id, &r.branch, r.version).await? {
                    Some(_) => Ok(Undo::Nothing),
                    None => Ok(Undo::DeleteVersion {
                        sha256: sha256(&staged),
                    }),
                }
            }
            BatchOp::DeleteTableVersions(r) => {
                // Ranges are half-open, [start_version, end_version); a negative end means
                // "through the latest version".
                let bad = |rg: &VersionRange| {
                    rg.start_version < 0
                        || (rg.end_version >= 0 && rg.end_version < rg.start_version)
                };
                if r.ranges.iter().any(bad) {
                    return Err(ApiError::invalid(
                        "delete_table_versions ranges are [start_version, end_version) with 0 <= start_version <= end_version, or end_version < 0 for through-latest",
                    ));
                }
                // Deletions run after every other operation: one naming a table this batch
                // deregisters would fail once the batch is committed.
                if before
                    .iter()
                    .any(|s| matches!(s.op, BatchOp::DeregisterTable(_)) && s.op.id() == id)
                {
                    return Err(ApiError::invalid(format!(
                        "delete_table_versions of {}: the same batch deregisters that table",
                        id.join(".")
                    )));
                }
                self.locate(id).await?;
                // The branch must resolve too (deletions must not fail once committed).
                self.ns
                    .list_table_versions(ListTableVersionsRequest {
                        id: Some(id.to_vec()),
                        branch: r.branch.clone(),
                        limit: Some(1),
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| not_found_as_table(e, id))?;
                Ok(Undo::Nothing)
            }
        }
    }

    /// The manifest bytes of `version` of a table (on `branch`), None when it does not exist.
    async fn version_manifest(
        &self,
        id: &[String],
        branch: &Option<String>,
        version: i64,
    ) -> ApiResult<Option<Bytes>> {
        let request = DescribeTableVersionRequest {
            id: Some(id.to_vec()),
            version: Some(version),
            branch: branch.clone(),
            ..Default::default()
        };
        match self.ns.describe_table_version(request).await {
            Ok(v) => self.intents.read_object(&v.version.manifest_path).await,
            Err(e) => {
                let e = ApiError::from(e);
                // A branch's first version is committed before the branch is recorded (lance's
                // create_branch through a namespace-managed table): a branch not found yet
                // has no version either. (The table itself was located before this.)
                let unborn_branch =
                    branch.is_some() && e.status == axum::http::StatusCode::NOT_FOUND;
                if e.code == ErrorCode::TableVersionNotFound || unborn_branch {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    async fn apply(&self, op: &BatchOp) -> ApiResult<Value> {
        let id = op.id().to_vec();
        let out = match op {
            BatchOp::DeclareTable(r) => {
                let response = self.ns.declare_table(r.clone()).await;
                self.invalidate(&id);
                json!({ "declare_table": to_value(response?)? })
            }
            BatchOp::DeregisterTable(r) => {
                let response = self.ns.deregister_table(r.clone()).await;
                self.invalidate(&id);
                json!({ "deregister_table": to_value(response?)? })
            }
            BatchOp::RegisterTable(r) => {
                let response = self.ns.register_table(r.clone()).await;
                self.invalidate(&id);
                json!({ "register_table": to_value(response?)? })
            }
            BatchOp::CreateTableVersion(r) => {
                let response = self.ns.create_table_version(r.clone()).await?;
                json!({ "create_table_version": to_value(response)? })
            }
            BatchOp::DeleteTableVersions(r) => {
                let response = self.ns.batch_delete_table_versions(r.clone()).await?;
                json!({ "delete_table_versions": to_value(response)? })
            }
        };
        Ok(out)
    }

    async fn table_exists(&self, id: &[String]) -> ApiResult<bool> {
        let request = TableExistsRequest {
            id: Some(id.to_vec()),
            ..Default::default()
        };
        match self.ns.table_exists(request).await {
            Ok(()) => Ok(true),
            Err(e) => {
                let e = not_found_as_table(e, id);
                if e.code == ErrorCode::TableNotFound {
                    Ok(false)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// Undoes steps in the order given; each undo is idempotent and checked against the
    /// catalog, so a step that never ran, ran half-way or was undone already is fine.
    // Each arm checks the catalog first; as a guard, a false check would fall through to the
    // arms below instead of doing nothing.
    #[allow(clippy::collapsible_match)]
    async fn undo_steps<'a>(&self, steps: impl Iterator<Item = &'a Step>) -> ApiResult<()> {
        for step in steps {
            let id = step.op.id();
            self.invalidate(id);
            match (&step.op, &step.undo) {
                (BatchOp::DeclareTable(_) | BatchOp::RegisterTable(_), Undo::Deregister) => {
                    if self.table_exists(id).await? {
                        self.ns
                            .deregister_table(DeregisterTableRequest {
                                id: Some(id.to_vec()),
                                ..Default::default()
                            })
                            .await?;
                    }
                }
                (BatchOp::DeregisterTable(_), Undo::Register { location }) => {
                    if !self.table_exists(id).await? {
                        self.ns
                            .register_table(RegisterTableRequest {
                                id: Some(id.to_vec()),
                                location: self.relative_location(location),
                                ..Default::default()
                            })
                            .await?;
                    }
                }
                (BatchOp::CreateTableVersion(r), Undo::DeleteVersion { sha256: ours }) => {
                    if !self.table_exists(id).await? {
                        continue;
                    }
                    let found = self.version_manifest(id, &r.branch, r.version).await?;
                    if found.is_some_and(|bytes| &sha256(&bytes) == ours) {
                        let request = BatchDeleteTableVersionsRequest {
                            id: Some(id.to_vec()),
                            branch: r.branch.clone(),
                            ranges: vec![VersionRange {
                                start_version: r.version,
                                end_version: r.version + 1,
                            }],
                            ..Default::default()
                        };
                        self.ns.batch_delete_table_versions(request).await?;
                    }
                }
                _ => {}
            }
            self.invalidate(id);
        }
        Ok(())
    }

    /// Settles every intent a previous process (or a failed roll-back) left: rolled back
    /// unless its deletions had started, then rolled forward. The caller holds the commit lock
    /// or is opening the catalog (nobody else uses it yet).
    pub(crate) async fn recover_batches(&self) -> ApiResult<()> {
        let names = self.intents.list().await?;
        for name in names.iter().filter(|n| n.ends_with(".json")) {
            let marker = format!("{name}{MARKER}");
            let Some(bytes) = self.intents.get(name).await? else {
                continue;
            };
            let intent: Intent = match serde_json::from_slice(&bytes) {
                Ok(i) => i,
                Err(e) => {
                    tracing::error!(error = %e, intent = %name, "unreadable batch-commit intent left as it is");
                    continue;
                }
            };
            if names.contains(&marker) {
                for step in intent.steps.iter().filter(|s| s.op.is_deletion()) {
                    if let Err(e) = self.apply(&step.op).await {
                        let gone = matches!(
                            e.code,
                            ErrorCode::TableNotFound | ErrorCode::TableBranchNotFound
                        );
                        if !gone {
                            return Err(e);
                        }
                    }
                }
                tracing::warn!(intent = %name, "rolled an interrupted batch-commit forward (its version deletions)");
            } else {
                self.undo_steps(intent.steps.iter().rev()).await?;
                tracing::warn!(intent = %name, "rolled an interrupted batch-commit back");
            }
            self.intents.delete(name).await?;
            self.intents.delete(&marker).await?;
        }
        // Markers whose intent is gone (a crash between the two removals).
        for name in names.iter().filter(|n| n.ends_with(MARKER)) {
            let intent = name.trim_end_matches(MARKER);
            if !names.iter().any(|n| n == intent) {
                self.intents.delete(name).await?;
            }
        }
        self.invalidate_all();
        Ok(())
    }
}

fn to_value<T: Serialize>(v: T) -> ApiResult<Value> {
    serde_json::to_value(v).map_err(|e| ApiError::internal(e.to_string()))
}
