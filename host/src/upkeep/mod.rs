//! Background upkeep: every table written through this server is watched, and checked every
//! `--upkeep-interval`; when the policy finds it needs compaction, index upkeep or cleanup, an
//! upkeep job is started for it (see `jobs::kinds::optimize`), one per (table, branch) at a time and
//! at most `--upkeep-concurrency` at once. A table is forgotten once it is clean and has not
//! been written for a while; the next write brings it back.

pub mod policy;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::App;
use crate::jobs::kinds::optimize::OptimizeSpec;
pub use policy::{UpkeepOverride, UpkeepPolicy};

type Key = (String, String);

struct Watched {
    table_id: Vec<String>,
    first_seen: Instant,
    last_write: Instant,
    branches: HashMap<Option<String>, BranchState>,
}

#[derive(Default)]
struct BranchState {
    /// The version the policy last found nothing to do at, or last started a job at: while
    /// the table stays at it, only a cleanup can be due (a job that changed nothing would
    /// change nothing again).
    settled_at: Option<u64>,
    /// The latest version seen, and when it was first seen (by a write here, another
    /// node's or upkeep's own commit): no version is younger than that.
    changed: Option<(u64, Instant)>,
    /// When the last cleanup was started.
    cleaned: Option<Instant>,
}

pub struct Upkeep {
    pub policy: UpkeepPolicy,
    pub interval: Duration,
    /// (tenant, location) -> what is known of the table.
    watched: Mutex<HashMap<Key, Watched>>,
}

impl Upkeep {
    pub fn new(policy: UpkeepPolicy, interval: Duration) -> Self {
        Self {
            policy,
            interval,
            watched: Mutex::default(),
        }
    }

    /// A write to a table was acknowledged.
    pub fn note_write(&self, tenant: &str, table_id: &[String], location: &str) {
        let mut watched = self.watched.lock().unwrap();
        let w = watched
            .entry((tenant.to_string(), location.to_string()))
            .or_insert_with(|| Watched {
                table_id: table_id.to_vec(),
                first_seen: Instant::now(),
                last_write: Instant::now(),
                branches: HashMap::new(),
            });
        w.table_id = table_id.to_vec();
        w.last_write = Instant::now();
    }

    /// Tables being watched, for metrics and tests.
    pub fn watched(&self) -> usize {
        self.watched.lock().unwrap().len()
    }

    /// The policy for a tenant (the server's, with the auth file's overrides).
    pub fn policy_for(&self, app: &App, tenant: &str) -> UpkeepPolicy {
        let settings = app.auth.keys().tenant_settings(tenant);
        self.policy
            .with(settings.as_ref().and_then(|s| s.upkeep.as_ref()))
    }

    /// Check every watched table forever.
    pub async fn run(app: Arc<App>) {
        let mut tick = tokio::time::interval(app.upkeep.interval.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let keys: Vec<Key> = app.upkeep.watched.lock().unwrap().keys().cloned().collect();
            for key in keys {
                if let Err(e) = check_table(&app, &key).await {
                    tracing::warn!(tenant = %key.0, location = %key.1, error = %e.message, "upkeep check failed");
                }
            }
        }
    }
}

/// Decide for one watched table (all its branches), start jobs, and forget it once it is
/// settled and idle.
async fn check_table(app: &Arc<App>, key: &Key) -> crate::error::ApiResult<()> {
    let (tenant, location) = key;
    let upkeep = &app.upkeep;
    let policy = upkeep.policy_for(app, tenant);
    let Some((table_id, first_seen, last_write)) = upkeep
        .watched
        .lock()
        .unwrap()
        .get(key)
        .map(|w| (w.table_id.clone(), w.first_seen, w.last_write))
    else {
        return Ok(());
    };
    if !policy.enabled {
        upkeep.watched.lock().unwrap().remove(key);
        return Ok(());
    }
    let mut branches: Vec<Option<String>> = vec![None];
    match app.store.list_branches(location).await {
        Ok(b) => branches.extend(b.into_keys().map(Some)),
        Err(e) if e.code == lance_namespace::ErrorCode::TableNotFound => {
            // Dropped (or never created): nothing to keep up.
            upkeep.watched.lock().unwrap().remove(key);
            return Ok(());
        }
        Err(e) => return Err(e),
    }
    let mut all_settled = true;
    for branch in branches {
        if app.jobs.busy(location, branch.as_deref()) {
            all_settled = false;
            continue;
        }
        let t = &policy.thresholds;
        let health = app
            .store
            .health(
                location,
                branch.as_deref(),
                t.target_rows_per_fragment,
                t.deleted_share,
            )
            .await?;
        let (settled_at, changed_at, cleaned) = {
            let mut watched = upkeep.watched.lock().unwrap();
            let Some(w) = watched.get_mut(key) else {
                return Ok(());
            };
            let s = w.branches.entry(branch.clone()).or_default();
            if s.changed.is_none_or(|(v, _)| v != health.version) {
                s.changed = Some((health.version, Instant::now()));
            }
            (
                s.settled_at,
                s.changed.map_or(first_seen, |(_, at)| at),
                s.cleaned,
            )
        };
        // Due when the interval has passed and there may be something to remove: versions
        // that were younger than the retention window at the last cleanup. The first cleanup
        // of a newly watched table comes one interval after the watch began, so short-lived
        // tables (and a server's first minutes) start no cleanup-only jobs.
        let retention = Duration::from_secs(policy.thresholds.retention_secs);
        let cleanup_due = match cleaned {
            None => first_seen.elapsed() >= policy.cleanup_interval,
            Some(at) => at.elapsed() >= policy.cleanup_interval && at < changed_at + retention,
        };
        // An LSM write makes no version: what waits in its tiers is due work of its own.
        let lsm_due = health.lsm_generations > 0 || health.lsm_memtable_rows > 0;
        if settled_at == Some(health.version) && !cleanup_due && !lsm_due {
            continue;
        }
        let quiet = last_write.elapsed() >= policy.quiet_after;
        let phases = policy.decide(&health, cleanup_due, quiet);
        // The lock is held in a block of its own: the job is submitted (awaited) after it.
        let start = {
            let mut watched = upkeep.watched.lock().unwrap();
            let Some(state) = watched
                .get_mut(key)
                .and_then(|w| w.branches.get_mut(&branch))
            else {
                return Ok(());
            };
            state.settled_at = Some(health.version);
            if !phases.is_empty() && phases.contains(&crate::jobs::kinds::optimize::Phase::Cleanup)
            {
                state.cleaned = Some(Instant::now());
            }
            !phases.is_empty()
        };
        if !start {
            continue;
        }
        all_settled = false;
        let spec = OptimizeSpec {
            table_id: table_id.clone(),
            branch: branch.clone(),
            actions: phases,
            thresholds: policy.thresholds.clone(),
            retrain: false,
            merge_segments: quiet,
            trigger: "policy".into(),
        };
        match crate::jobs::kinds::optimize::submit(app, tenant, location.clone(), spec).await {
            Ok(job_id) => {
                tracing::info!(%tenant, %location, ?branch, %job_id, "upkeep job started")
            }
            // One was started on request meanwhile: it does the work.
            Err(e) => tracing::debug!(error = %e.message, "upkeep job not started"),
        }
    }
    // Every version it has is past retention and cleaned since, and it is settled: forget it
    // (its next write brings it back).
    let retention = Duration::from_secs(policy.thresholds.retention_secs);
    if all_settled && last_write.elapsed() > retention + policy.cleanup_interval {
        let mut watched = upkeep.watched.lock().unwrap();
        let done = watched.get(key).is_some_and(|w| {
            w.branches.values().all(|b| {
                let changed_at = b.changed.map_or(first_seen, |(_, at)| at);
                b.cleaned.is_some_and(|at| at > changed_at + retention)
            })
        });
        if done {
            watched.remove(key);
        }
    }
    Ok(())
}
