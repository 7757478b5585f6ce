//! The lancedb client's `LsmWriteSpec` on the wire, installed as lance's MemWAL index
//! (`set_lsm_write_spec` / `get_lsm_write_spec` / `unset_lsm_write_spec`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use lance::dataset::CommitBuilder;
use lance::dataset::mem_wal::{DatasetMemWalExt, ShardWriterConfig};
use lance::dataset::transaction::{Operation, Transaction};
use lance::index::DatasetIndexExt;
use lance_index::mem_wal::MEM_WAL_INDEX_NAME;
use serde::{Deserialize, Serialize};

use super::{Installed, SHARD_SEED_KEY, require};
use crate::error::{ApiError, ApiResult};
use crate::store::Store;

/// How rows are spread over shards (the client's `LsmWriteSpec.{bucket,identity,unsharded}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Sharding {
    /// Hash-bucket the (single-column) primary key into `num_buckets` shards.
    Bucket { column: String, num_buckets: u32 },
    /// One shard per distinct value of a scalar column.
    Identity { column: String },
    /// Every row to one shard.
    Unsharded,
}

/// `set_lsm_write_spec`'s body, and what `get_lsm_write_spec` answers in `lsm_write_spec`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LsmWriteSpec {
    pub sharding: Sharding,
    /// Indexes the memtables keep up to date; `null`: every index the table has now.
    #[serde(default)]
    pub maintained_indexes: Option<Vec<String>>,
    /// Default shard writer settings, recorded with the spec for every writer on every node.
    #[serde(default)]
    pub writer_config_defaults: HashMap<String, String>,
}

/// Writer settings a spec may record, and how each is applied.
const WRITER_KEYS: &[&str] = &[
    "durable_write",
    "max_wal_buffer_size",
    "max_wal_flush_interval_ms",
    "max_wal_persist_retries",
    "wal_persist_retry_base_delay_ms",
    "max_memtable_size",
    "max_memtable_rows",
    "max_memtable_batches",
    "manifest_scan_batch_size",
    "max_unflushed_memtable_bytes",
    "backpressure_log_interval_ms",
    "stats_log_interval_ms",
];

/// Apply a spec's recorded writer settings to `config`. Keys lance records itself for HNSW
/// (`hnsw.<index>.<field>`) are left to lance; any other unknown key is refused by name.
pub(super) fn apply_writer_defaults(
    config: &mut ShardWriterConfig,
    defaults: &HashMap<String, String>,
) -> ApiResult<()> {
    for (key, value) in defaults {
        if key == SHARD_SEED_KEY || key.starts_with("hnsw.") {
            continue;
        }
        let bad = || {
            ApiError::invalid(format!(
                "writer_config_defaults.{key}: '{value}' is not a valid value"
            ))
        };
        // Lance sizes allocations by some of these (a memtable's batch slots and index), so
        // each is bounded: a spec must not be able to make a writer ask for terabytes.
        let size = || {
            let n = value.parse::<usize>().map_err(|_| bad())?;
            let most = max_setting(key);
            if n > most {
                return Err(ApiError::invalid(format!(
                    "writer_config_defaults.{key}: {n} is above the most Lancet allows ({most})"
                )));
            }
            Ok(n)
        };
        let millis = || {
            let ms = value.parse::<u64>().map_err(|_| bad())?;
            if ms > 3_600_000 {
                return Err(ApiError::invalid(format!(
                    "writer_config_defaults.{key}: {ms} ms is above an hour"
                )));
            }
            Ok(Duration::from_millis(ms))
        };
        match key.as_str() {
            "durable_write" => config.durable_write = value.parse().map_err(|_| bad())?,
            "max_wal_buffer_size" => config.max_wal_buffer_size = size()?,
            "max_wal_flush_interval_ms" => {
                let d = millis()?;
                config.max_wal_flush_interval = (!d.is_zero()).then_some(d);
            }
            "max_wal_persist_retries" => config.max_wal_persist_retries = size()?,
            "wal_persist_retry_base_delay_ms" => config.wal_persist_retry_base_delay = millis()?,
            "max_memtable_size" => config.max_memtable_size = size()?,
            "max_memtable_rows" => config.max_memtable_rows = size()?.max(1),
            "max_memtable_batches" => config.max_memtable_batches = size()?.max(1),
            "manifest_scan_batch_size" => config.manifest_scan_batch_size = size()?.max(1),
            "max_unflushed_memtable_bytes" => config.max_unflushed_memtable_bytes = size()?,
            "backpressure_log_interval_ms" => config.backpressure_log_interval = millis()?,
            "stats_log_interval_ms" => {
                let d = millis()?;
                config.stats_log_interval = (!d.is_zero()).then_some(d);
            }
            "enable_memtable" => {
                if value != "true" {
                    return Err(ApiError::invalid(
                        "writer_config_defaults.enable_memtable: Lancet's LSM path reads memtables; \
                         only true is supported",
                    ));
                }
            }
            _ => {
                return Err(ApiError::invalid(format!(
                    "writer_config_defaults.{key} is not a shard writer setting Lancet knows \
                     (known: {}, enable_memtable)",
                    WRITER_KEYS.join(", ")
                )));
            }
        }
    }
    if !config.durable_write {
        tracing::warn!(
            "an LSM write spec turns durable writes off: acknowledged upserts can be lost on a crash"
        );
    }
    Ok(())
}

/// The largest value a spec may give a size setting.
fn max_setting(key: &str) -> usize {
    match key {
        "max_memtable_rows" => 1_000_000,
        "max_memtable_batches" => 100_000,
        "max_memtable_size" => 4 << 30,
        "max_unflushed_memtable_bytes" => 8 << 30,
        "max_wal_buffer_size" => 256 << 20,
        "max_wal_persist_retries" => 100,
        "manifest_scan_batch_size" => 64,
        _ => usize::MAX,
    }
}

impl Store {
    /// Install `spec` on the table (lance's MemWAL index). The table needs an unenforced
    /// primary key (declared in the schema it was created with).
    pub async fn lsm_set_spec(&self, location: &str, spec: &LsmWriteSpec) -> ApiResult<u64> {
        // Every setting is checked before anything is committed.
        let mut probe = ShardWriterConfig::default();
        apply_writer_defaults(&mut probe, &spec.writer_config_defaults)?;
        if spec.writer_config_defaults.contains_key(SHARD_SEED_KEY) {
            return Err(ApiError::invalid(format!(
                "writer_config_defaults.{SHARD_SEED_KEY} is reserved"
            )));
        }
        let _guard = self.write_lock(location, None).await;
        let current = self.latest(location, None).await?;
        if self.lsm_installed(&current).await?.is_some() {
            // A 400: the lancedb client retries a 409.
            return Err(ApiError::invalid(
                "the table already has an LSM write spec: unset it first to change it",
            ));
        }
        let pk: Vec<String> = current
            .schema()
            .unenforced_primary_key()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        if pk.is_empty() {
            return Err(ApiError::invalid(
                "an LSM write spec needs an unenforced primary key: create the table with \
                 the key's field carrying the metadata 'lance-schema:unenforced-primary-key': 'true'",
            ));
        }
        if let Sharding::Bucket { column, .. } = &spec.sharding
            && (pk.len() != 1 || &pk[0] != column)
        {
            return Err(ApiError::invalid(format!(
                "bucket sharding must bucket the table's single-column primary key ({}), not '{column}'",
                pk.join(", ")
            )));
        }
        // `null` means the indexes the table has now (a snapshot, as the client documents).
        let maintained = match &spec.maintained_indexes {
            Some(list) => list.clone(),
            None => current
                .load_indices()
                .await
                .map_err(ApiError::from)?
                .iter()
                .filter(|i| !i.name.starts_with("__"))
                .map(|i| i.name.clone())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect(),
        };
        let mut ds = (*current).clone();
        let mut builder = ds.initialize_mem_wal().maintained_indexes(maintained);
        builder = match &spec.sharding {
            Sharding::Bucket {
                column,
                num_buckets,
            } => builder.bucket_sharding(column, *num_buckets),
            Sharding::Identity { column } => builder.identity_sharding(column),
            Sharding::Unsharded => builder.unsharded(),
        };
        for (k, v) in &spec.writer_config_defaults {
            builder = builder.add_writer_config_default(k, v);
        }
        builder =
            builder.add_writer_config_default(SHARD_SEED_KEY, uuid::Uuid::new_v4().to_string());
        builder.execute().await.map_err(ApiError::from)?;
        let version = ds.version().version;
        self.remember(location, None, Arc::new(ds));
        Ok(version)
    }

    /// The table's spec as the client set it (`None`: no spec).
    pub async fn lsm_get_spec(&self, location: &str) -> ApiResult<Option<LsmWriteSpec>> {
        let ds = self.latest(location, None).await?;
        let Some(installed) = self.lsm_installed(&ds).await? else {
            return Ok(None);
        };
        Ok(Some(describe(&ds, &installed)?))
    }

    /// Remove the spec: this process's writers are closed (memtables flushed), every flushed
    /// generation is merged into the base table, then the MemWAL index and its files go.
    pub async fn lsm_unset_spec(&self, location: &str) -> ApiResult<u64> {
        let ds = self.latest(location, None).await?;
        require(self.lsm_installed(&ds).await?)?;
        // No write of this node lands in the WAL while it is merged and removed.
        let gate = self.lsm.gate(location);
        let _closed = gate.write().await;
        // Claim every shard so what other nodes hold in memory is replayed here and flushed,
        // and seal it so no node writes to it again (seal.rs).
        self.lsm_seal(location).await?;
        self.lsm_close_writers(location).await?;
        self.lsm_compact(location).await?;
        let _guard = self.write_lock(location, None).await;
        let current = self.latest(location, None).await?;
        let Some(meta) = current
            .load_indices()
            .await
            .map_err(ApiError::from)?
            .iter()
            .find(|i| i.name == MEM_WAL_INDEX_NAME)
            .cloned()
        else {
            return Err(require(None).unwrap_err());
        };
        let transaction = Transaction::new(
            current.manifest.version,
            Operation::CreateIndex {
                new_indices: vec![],
                removed_indices: vec![meta],
            },
            None,
        );
        let ds = CommitBuilder::new(current.clone())
            .execute(transaction)
            .await
            .map_err(ApiError::from)?;
        let version = ds.version().version;
        let store = ds.object_store(None).await.map_err(ApiError::from)?;
        let base = ds.branch_location().path;
        let dir = lance::dataset::mem_wal::util::mem_wal_path(&base);
        self.lsm.reclaim.forget(location);
        // Shard by shard, each one's manifest versions oldest first (owner.rs says why).
        let removed = async {
            for name in store.read_dir(dir.clone()).await? {
                if let Ok(shard) = uuid::Uuid::parse_str(&name) {
                    super::owner::remove_shard_files(&store, &base, shard).await?;
                }
            }
            store.remove_dir_all(dir).await
        };
        if let Err(e) = removed.await {
            tracing::warn!(%location, error = %e, "could not remove the MemWAL files of an unset spec");
        }
        self.remember(location, None, Arc::new(ds));
        Ok(version)
    }
}

/// The spec as the client reads it back, from the MemWAL index.
fn describe(ds: &lance::Dataset, installed: &Installed) -> ApiResult<LsmWriteSpec> {
    let details = &installed.details;
    let column_of = |id: i32| {
        ds.schema()
            .field_by_id(id)
            .map(|f| f.name.clone())
            .ok_or_else(|| ApiError::internal(format!("sharding source field {id} is gone")))
    };
    let field = details
        .sharding_specs
        .first()
        .and_then(|s| s.fields.first())
        .ok_or_else(|| ApiError::internal("the MemWAL index has no sharding spec"))?;
    let sharding = match field.transform.as_deref() {
        Some("bucket") => Sharding::Bucket {
            column: column_of(field.source_ids[0])?,
            num_buckets: field
                .parameters
                .get("num_buckets")
                .and_then(|n| n.parse().ok())
                .unwrap_or(details.num_shards),
        },
        Some("identity") => Sharding::Identity {
            column: column_of(field.source_ids[0])?,
        },
        _ => Sharding::Unsharded,
    };
    let mut defaults = details.writer_config_defaults.clone();
    defaults.remove(SHARD_SEED_KEY);
    Ok(LsmWriteSpec {
        sharding,
        maintained_indexes: Some(details.maintained_indexes.clone()),
        writer_config_defaults: defaults,
    })
}
