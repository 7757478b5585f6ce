//! Decoded vector columns kept in memory, one entry per (table, fragment, column), for exact
//! (brute-force) nearest-neighbour search.
//!
//! Lance's flat search reads and decodes the whole vector column on every query; on a warm page
//! cache about 60% of its CPU is copying those bytes (kernel read, then page assembly), against
//! ~6% computing distances. Keeping the decoded arrays removes that work.
//!
//! An entry is named by the fragment's full metadata (data files, deletion file, row-id
//! sequence), which lance never changes in place: any write that touches a fragment's rows gives
//! it new metadata, so an entry can never be stale, and an append only loads the new fragment.
//! Entries are evicted least-recently-used once their total size passes the budget.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{Array, FixedSizeListArray, UInt64Array};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::ROW_ID;
use lance_table::format::Fragment;
use tokio::sync::OnceCell;

use crate::error::{ApiError, ApiResult};

/// One fragment's vectors (live rows only) and their row ids, in scan order.
pub struct FragmentVectors {
    pub vectors: FixedSizeListArray,
    pub row_ids: UInt64Array,
}

impl FragmentVectors {
    fn bytes(&self) -> usize {
        self.vectors.get_array_memory_size() + self.row_ids.get_array_memory_size()
    }
}

type Cell = Arc<OnceCell<Arc<FragmentVectors>>>;

struct Entry {
    cell: Cell,
    /// Size once loaded (0 while loading).
    bytes: usize,
    last_used: u64,
}

#[derive(Default)]
struct Entries {
    map: HashMap<String, Entry>,
    used: usize,
    clock: u64,
}

pub struct VectorCache {
    budget: usize,
    entries: Mutex<Entries>,
}

impl VectorCache {
    /// A cache holding at most `budget` bytes of vectors; 0 turns caching (and with it the
    /// in-memory flat search) off.
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            entries: Mutex::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    /// Bytes currently held.
    pub fn used(&self) -> usize {
        self.entries.lock().unwrap().used
    }

    /// The vectors of `column` in `fragment` of `ds`, loaded on first use. Concurrent callers
    /// wait for one load.
    pub async fn get(
        &self,
        ds: &Arc<Dataset>,
        fragment: &Fragment,
        column: &str,
    ) -> ApiResult<Arc<FragmentVectors>> {
        let key = entry_key(ds, fragment, column)?;
        let cell = {
            let mut entries = self.entries.lock().unwrap();
            entries.clock += 1;
            let now = entries.clock;
            let entry = entries.map.entry(key.clone()).or_insert_with(|| Entry {
                cell: Cell::default(),
                bytes: 0,
                last_used: now,
            });
            entry.last_used = now;
            entry.cell.clone()
        };
        if let Some(loaded) = cell.get() {
            return Ok(loaded.clone());
        }
        let loaded = cell
            .get_or_try_init(|| load(ds, fragment, column))
            .await
            .inspect_err(|_| {
                // A failed load leaves nothing behind: the next query tries again.
                let mut entries = self.entries.lock().unwrap();
                if entries
                    .map
                    .get(&key)
                    .is_some_and(|e| Arc::ptr_eq(&e.cell, &cell))
                {
                    entries.map.remove(&key);
                }
            })?
            .clone();
        self.account(&key, &cell, loaded.bytes());
        Ok(loaded)
    }

    /// Records the size of a fresh entry and evicts the least recently used others until the
    /// total fits the budget. An entry bigger than the whole budget is not kept at all.
    fn account(&self, key: &str, cell: &Cell, bytes: usize) {
        let mut entries = self.entries.lock().unwrap();
        let Some(entry) = entries.map.get_mut(key) else {
            return;
        };
        if !Arc::ptr_eq(&entry.cell, cell) || entry.bytes != 0 {
            return; // already accounted by another caller
        }
        if bytes > self.budget {
            entries.map.remove(key);
            return;
        }
        entry.bytes = bytes;
        entries.used += bytes;
        while entries.used > self.budget {
            let victim = entries
                .map
                .iter()
                .filter(|(k, e)| k.as_str() != key && e.bytes > 0)
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else { break };
            let gone = entries.map.remove(&victim).expect("victim is in the map");
            entries.used -= gone.bytes;
        }
    }
}

/// The table (and branch: each has its own URI), the column, and everything lance records
/// about the fragment's contents.
fn entry_key(ds: &Dataset, fragment: &Fragment, column: &str) -> ApiResult<String> {
    let meta = serde_json::to_string(fragment)
        .map_err(|e| ApiError::internal(format!("fragment metadata: {e}")))?;
    Ok(format!("{}\n{column}\n{meta}", ds.uri()))
}

async fn load(
    ds: &Arc<Dataset>,
    fragment: &Fragment,
    column: &str,
) -> ApiResult<Arc<FragmentVectors>> {
    let mut scan = ds.scan();
    scan.with_fragments(vec![fragment.clone()])
        .project(&[column])
        .map_err(ApiError::from)?
        .with_row_id();
    let batches: Vec<_> = scan
        .try_into_stream()
        .await
        .map_err(ApiError::from)?
        .try_collect()
        .await
        .map_err(ApiError::from)?;
    let column_of = |name: &str| -> ApiResult<Vec<&dyn Array>> {
        batches
            .iter()
            .map(|b| {
                b.column_by_name(name)
                    .map(|c| c.as_ref())
                    .ok_or_else(|| ApiError::internal(format!("scan returned no {name} column")))
            })
            .collect()
    };
    let concat = |name: &str| -> ApiResult<arrow_array::ArrayRef> {
        arrow_select::concat::concat(&column_of(name)?).map_err(ApiError::from)
    };
    if batches.is_empty() {
        let field = ds.schema().field(column).ok_or_else(|| {
            ApiError::internal(format!("column {column} vanished from the schema"))
        })?;
        let empty = arrow_array::new_empty_array(&field.data_type());
        return Ok(Arc::new(FragmentVectors {
            vectors: empty.as_fixed_size_list().clone(),
            row_ids: UInt64Array::from(Vec::<u64>::new()),
        }));
    }
    // One array per fragment: a query makes one kernel call per fragment, not per batch.
    let vectors = concat(column)?
        .as_fixed_size_list_opt()
        .ok_or_else(|| ApiError::internal(format!("{column} is not a fixed-size list")))?
        .clone();
    let row_ids = concat(ROW_ID)?
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| ApiError::internal("_rowid is not UInt64"))?
        .clone();
    Ok(Arc::new(FragmentVectors { vectors, row_ids }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(n: usize) -> Arc<FragmentVectors> {
        let values = arrow_array::Float32Array::from(vec![0.0f32; n * 4]);
        let field = Arc::new(arrow_schema::Field::new(
            "item",
            arrow_schema::DataType::Float32,
            true,
        ));
        Arc::new(FragmentVectors {
            vectors: FixedSizeListArray::try_new(field, 4, Arc::new(values), None).unwrap(),
            row_ids: UInt64Array::from((0..n as u64).collect::<Vec<_>>()),
        })
    }

    fn insert(cache: &VectorCache, key: &str, v: Arc<FragmentVectors>) {
        let cell = Cell::new(OnceCell::new_with(Some(v.clone())));
        {
            let mut entries = cache.entries.lock().unwrap();
            entries.clock += 1;
            let now = entries.clock;
            entries.map.insert(
                key.to_string(),
                Entry {
                    cell: cell.clone(),
                    bytes: 0,
                    last_used: now,
                },
            );
        }
        cache.account(key, &cell, v.bytes());
    }

    #[test]
    fn evicts_least_recently_used_to_fit_the_budget() {
        let one = loaded(1000).bytes();
        let cache = VectorCache::new(one * 2 + one / 2);
        insert(&cache, "a", loaded(1000));
        insert(&cache, "b", loaded(1000));
        assert_eq!(cache.used(), 2 * one);
        // Touch "a" so "b" is the oldest.
        cache
            .entries
            .lock()
            .unwrap()
            .map
            .get_mut("a")
            .unwrap()
            .last_used = 100;
        insert(&cache, "c", loaded(1000));
        let entries = cache.entries.lock().unwrap();
        let mut keys: Vec<_> = entries.map.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, ["a", "c"]);
        assert_eq!(entries.used, 2 * one);
    }

    #[test]
    fn an_entry_bigger_than_the_budget_is_not_kept() {
        let cache = VectorCache::new(10);
        insert(&cache, "big", loaded(1000));
        assert_eq!(cache.used(), 0);
        assert!(cache.entries.lock().unwrap().map.is_empty());
    }
}
