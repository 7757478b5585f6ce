//! When each key was last used. Every node keeps the times in memory (`KeyRing::last_used`)
//! and writes them to `_auth/used/<node>.json` when they changed, at most every
//! [`EVERY`]; a listing reads every node's file and keeps the latest time per key. So a key's
//! last use is known to within [`EVERY`], at one small write per node and period, not one per
//! request.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::App;
use crate::error::{ApiError, ApiResult};

/// How often a node writes its times (when they changed).
pub const EVERY: Duration = Duration::from_secs(10);

const DIR: &str = "_auth/used";

fn key(node: &str) -> String {
    format!("{DIR}/{}.json", hex::encode(node))
}

/// Writes this node's times now.
pub async fn write(app: &App) -> ApiResult<()> {
    let used = app.auth.keys().last_used();
    let bytes = serde_json::to_vec(&used).map_err(|e| ApiError::internal(e.to_string()))?;
    app.root.put(&key(&app.node_id), bytes).await
}

/// Key id -> latest use (ms) over every node.
pub async fn read_all(app: &App) -> ApiResult<HashMap<String, i64>> {
    let mut out: HashMap<String, i64> = HashMap::new();
    for k in app.root.list(DIR).await? {
        let Some(v) = app.root.get(&k).await? else {
            continue;
        };
        let Ok(times) = serde_json::from_slice::<HashMap<String, i64>>(&v.bytes) else {
            continue;
        };
        for (id, ms) in times {
            let e = out.entry(id).or_insert(ms);
            *e = (*e).max(ms);
        }
    }
    // This node's latest, not yet written.
    for (id, ms) in app.auth.keys().last_used() {
        let e = out.entry(id).or_insert(ms);
        *e = (*e).max(ms);
    }
    Ok(out)
}

/// Writes this node's times every [`EVERY`] when they changed.
pub async fn keep_writing(app: Arc<App>) {
    let mut last = HashMap::new();
    loop {
        tokio::time::sleep(EVERY).await;
        let now = app.auth.keys().last_used();
        if now != last {
            match write(&app).await {
                Ok(()) => last = now,
                Err(e) => tracing::warn!(error = %e, "key use times not written"),
            }
        }
    }
}
