//! LSM upserts and deletes: rows routed to their shards by the table's sharding spec and
//! handed to the shards' writers. Answered once every shard's WAL entry is stored.

use std::collections::HashMap;

use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, UInt32Array};
use arrow_schema::DataType;
use lance::Dataset;
use lance::dataset::mem_wal::evaluate_sharding_spec;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::owner::Ownership;
use super::{Installed, LsmTable, SHARD_SEED_KEY, lost_ownership, require};
use crate::error::{ApiError, ApiResult};
use crate::store::{RowHook, Store, require_rows};

/// What an LSM write did.
#[derive(Debug, Clone, Copy)]
pub struct LsmWrite {
    pub rows: u64,
    pub shards: usize,
    /// The base table's version (an LSM write makes none).
    pub version: u64,
}

/// The rows of one shard, and the shard's value (as lance records it in the shard manifest).
struct ShardRows {
    values: HashMap<String, Vec<u8>>,
    batches: Vec<RecordBatch>,
}

impl Store {
    /// Upsert `batches` by the table's primary key through its shard writers.
    pub async fn lsm_upsert(
        &self,
        location: &str,
        table: &LsmTable,
        batches: Vec<RecordBatch>,
        hook: Option<RowHook<'_>>,
    ) -> ApiResult<LsmWrite> {
        require_rows(&batches)?;
        let (ds, installed) = (&table.ds, &table.installed);
        let batches = match hook {
            Some(h) => h(ds, batches)?,
            None => batches,
        };
        for key in &installed.pk {
            if batches[0].schema().field_with_name(key).is_err() {
                return Err(ApiError::column_not_found(format!(
                    "primary key column '{key}' is not a column of the source data"
                )));
            }
        }
        let rows = batches.iter().map(|b| b.num_rows() as u64).sum();
        let routed = route(ds, installed, batches)?;
        let shards = routed.len();
        let gate = self.lsm.gate(location);
        let _open = gate.read().await;
        self.put_all(location, ds, installed, routed, false).await?;
        Ok(LsmWrite {
            rows,
            shards,
            version: ds.version().version,
        })
    }

    /// Delete the rows `predicate` matches (read through the LSM scanner, so rows still in
    /// memtables count) by writing tombstones for their keys.
    pub async fn lsm_delete(&self, location: &str, predicate: &str) -> ApiResult<LsmWrite> {
        let ds = self.latest(location, None).await?;
        let installed = require(self.lsm_installed(&ds).await?)?;
        let keys = self
            .lsm_keys_matching(location, &ds, &installed, predicate)
            .await?;
        let rows = keys.iter().map(|b| b.num_rows() as u64).sum();
        if rows == 0 {
            return Ok(LsmWrite {
                rows: 0,
                shards: 0,
                version: ds.version().version,
            });
        }
        let routed = route(&ds, &installed, keys)?;
        let shards = routed.len();
        self.put_all(location, &ds, &installed, routed, true)
            .await?;
        Ok(LsmWrite {
            rows,
            shards,
            version: ds.version().version,
        })
    }

    /// Hand each shard its rows, all shards at once.
    async fn put_all(
        &self,
        location: &str,
        ds: &Dataset,
        installed: &Installed,
        routed: HashMap<Uuid, ShardRows>,
        tombstones: bool,
    ) -> ApiResult<()> {
        let puts = routed
            .into_iter()
            .map(|(shard, rows)| self.put_shard(location, ds, installed, shard, rows, tombstones));
        for result in futures::future::join_all(puts).await {
            result?;
        }
        Ok(())
    }

    /// One shard's rows to its writer, acknowledged only once the writer is confirmed still
    /// the shard's owner after its WAL entry was stored (owner.rs). A writer that lost its
    /// shard (a peer claimed it, its WAL write failed, or its files were removed under it) is
    /// replaced by a new claim and the rows written again: an upsert or tombstone written
    /// twice is the same state.
    async fn put_shard(
        &self,
        location: &str,
        ds: &Dataset,
        installed: &Installed,
        shard: Uuid,
        rows: ShardRows,
        tombstones: bool,
    ) -> ApiResult<()> {
        let mut last = String::new();
        for _ in 0..3 {
            let owned = self
                .shard_owner(
                    location,
                    ds,
                    installed,
                    shard,
                    Some(rows.values.clone()),
                    super::Purpose::Use,
                )
                .await;
            let owned = match owned {
                Ok(owned) => owned,
                Err(e) => return Err(self.failed_in_spec_change(location, ds, installed, e).await),
            };
            let writer = &owned.writer;
            hold_for_tests().await;
            let result = if tombstones {
                writer.delete(rows.batches.clone()).await
            } else {
                writer.put(rows.batches.clone()).await
            };
            let failure = match result {
                Ok(_) => match owned.confirm(std::time::Instant::now()).await {
                    Ok(Ownership::Held) => return Ok(()),
                    Ok(Ownership::Lost) => {
                        "the shard was claimed or removed before its WAL entry was confirmed"
                            .to_string()
                    }
                    Err(e) => {
                        let e = ApiError::from(e);
                        return Err(self.failed_in_spec_change(location, ds, installed, e).await);
                    }
                },
                Err(e) if lost_ownership(&e) => e.to_string(),
                Err(e) if e.is_backpressure() => {
                    return Err(ApiError::unavailable(format!(
                        "shard {shard} holds as many unflushed rows as it may: retry shortly ({e})"
                    )));
                }
                Err(e) => {
                    let e = ApiError::from(e);
                    return Err(self.failed_in_spec_change(location, ds, installed, e).await);
                }
            };
            tracing::info!(%location, %shard, error = %failure, "shard writer lost its shard; claiming it again");
            self.lsm.drop_writer(location, shard, writer);
            last = failure;
        }
        Err(ApiError::unavailable(format!(
            "shard {shard} kept changing hands during this write (nothing of it is \
             acknowledged; retry): {last}"
        )))
    }
}

/// Test-only fault injection: with `LANCET_TEST_HOLD_LSM_WRITES` naming a file, every LSM
/// write waits, after choosing its shard writer and before writing, for as long as that file
/// exists, and says it is waiting by creating `<file>.reached`. It lets a test hold a write at
/// the point where another node's unset can overtake it (tests/api/lsm_races.rs). Read once;
/// unset in production.
async fn hold_for_tests() {
    static HOLD: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let Some(path) = HOLD.get_or_init(|| {
        std::env::var_os("LANCET_TEST_HOLD_LSM_WRITES").map(std::path::PathBuf::from)
    }) else {
        return;
    };
    if path.exists() {
        let _ = std::fs::write(path.with_extension("reached"), b"");
    }
    while path.exists() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

impl Store {
    /// `e` as the client is told it. A write that failed while another node unset or replaced
    /// the table's LSM spec (sealing and removing the shards this one was writing to: a shard
    /// manifest gone between its listing and its read) is a 503: nothing of it was
    /// acknowledged, and the retry meets the new spec. Other failures stay as they are.
    async fn failed_in_spec_change(
        &self,
        location: &str,
        ds: &Dataset,
        installed: &Installed,
        e: ApiError,
    ) -> ApiError {
        if !e.status.is_server_error() || e.code == lance_namespace::ErrorCode::ServiceUnavailable {
            return e;
        }
        let unsetting = self.lsm_unsetting(ds).await.unwrap_or(false);
        let replaced = match self.latest(location, None).await {
            Ok(now) => self.lsm_installed(&now).await.is_ok_and(|current| {
                current.as_ref().map(Installed::seed) != Some(installed.seed())
            }),
            Err(_) => false,
        };
        if !(unsetting || replaced) {
            return e;
        }
        tracing::info!(%location, error = %e.message, "an LSM write failed while the table's spec changed");
        ApiError::unavailable(format!(
            "the table's LSM write spec changed during this write: nothing of it is \
             acknowledged; retry ({})",
            e.message
        ))
    }
}

/// Split rows by shard. A shard's id is derived from the spec's seed and the row's shard
/// value, so every node routes a key to the same shard without asking anyone.
fn route(
    ds: &Dataset,
    installed: &Installed,
    batches: Vec<RecordBatch>,
) -> ApiResult<HashMap<Uuid, ShardRows>> {
    let spec = installed
        .details
        .sharding_specs
        .first()
        .ok_or_else(|| ApiError::internal("the MemWAL index has no sharding spec"))?;
    let field_id = spec
        .fields
        .first()
        .map(|f| f.field_id.clone())
        .unwrap_or_default();
    let mut out: HashMap<Uuid, ShardRows> = HashMap::new();
    for batch in batches {
        if batch.num_rows() == 0 {
            continue;
        }
        let values = evaluate_sharding_spec(&batch, spec, ds.schema()).map_err(ApiError::from)?;
        let column = values.column(0);
        let mut groups: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
        for row in 0..batch.num_rows() {
            groups
                .entry(scalar_bytes(column, row)?)
                .or_default()
                .push(row as u32);
        }
        if groups.len() > super::MAX_SHARDS_PER_TABLE {
            return Err(ApiError::invalid(format!(
                "these rows fall in {} shards, more than the {} a table may have: shard by a \
                 column with fewer values, or use bucket sharding",
                groups.len(),
                super::MAX_SHARDS_PER_TABLE
            )));
        }
        for (value, rows) in groups {
            let shard = shard_id(installed.seed(), spec.spec_id, &value);
            let part = if rows.len() == batch.num_rows() {
                batch.clone()
            } else {
                arrow_select::take::take_record_batch(&batch, &UInt32Array::from(rows))
                    .map_err(ApiError::from)?
            };
            out.entry(shard)
                .or_insert_with(|| ShardRows {
                    // The seed too: a shard of an identity spec is recognised by it.
                    values: HashMap::from([
                        (field_id.clone(), value),
                        (
                            SHARD_SEED_KEY.to_string(),
                            installed.seed().as_bytes().to_vec(),
                        ),
                    ]),
                    batches: Vec::new(),
                })
                .batches
                .push(part);
        }
    }
    Ok(out)
}

pub(super) fn shard_id(seed: &str, spec_id: u32, value: &[u8]) -> Uuid {
    let mut h = Sha256::new();
    h.update(seed.as_bytes());
    h.update(spec_id.to_le_bytes());
    h.update(value);
    let digest = h.finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes).into_uuid()
}

/// A shard value as lance records it: Arrow's little-endian bytes of the scalar (UTF-8 bytes
/// for strings).
fn scalar_bytes(column: &ArrayRef, row: usize) -> ApiResult<Vec<u8>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    if column.is_null(row) {
        return Err(ApiError::invalid(format!(
            "row {row}: the shard column is null (an LSM table's shard column needs a value)"
        )));
    }
    Ok(match column.data_type() {
        DataType::Int8 => column
            .as_primitive::<Int8Type>()
            .value(row)
            .to_le_bytes()
            .to_vec(),
        DataType::Int16 => column
            .as_primitive::<Int16Type>()
            .value(row)
            .to_le_bytes()
            .to_vec(),
        DataType::Int32 => column
            .as_primitive::<Int32Type>()
            .value(row)
            .to_le_bytes()
            .to_vec(),
        DataType::Int64 => column
            .as_primitive::<Int64Type>()
            .value(row)
            .to_le_bytes()
            .to_vec(),
        DataType::UInt8 => column
            .as_primitive::<UInt8Type>()
            .value(row)
            .to_le_bytes()
            .to_vec(),
        DataType::UInt16 => column
            .as_primitive::<UInt16Type>()
            .value(row)
            .to_le_bytes()
            .to_vec(),
        DataType::UInt32 => column
            .as_primitive::<UInt32Type>()
            .value(row)
            .to_le_bytes()
            .to_vec(),
        DataType::UInt64 => column
            .as_primitive::<UInt64Type>()
            .value(row)
            .to_le_bytes()
            .to_vec(),
        DataType::Utf8 => column.as_string::<i32>().value(row).as_bytes().to_vec(),
        DataType::LargeUtf8 => column.as_string::<i64>().value(row).as_bytes().to_vec(),
        DataType::Boolean => vec![u8::from(
            column
                .as_any()
                .downcast_ref::<BooleanArray>()
                .is_some_and(|b| b.value(row)),
        )],
        other => {
            return Err(ApiError::invalid(format!(
                "a shard column of type {other} cannot route rows"
            )));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_ids_are_stable_and_distinct() {
        let a = shard_id("seed", 1, &1i32.to_le_bytes());
        assert_eq!(a, shard_id("seed", 1, &1i32.to_le_bytes()));
        assert_ne!(a, shard_id("seed", 1, &2i32.to_le_bytes()));
        assert_ne!(a, shard_id("other", 1, &1i32.to_le_bytes()));
    }
}
