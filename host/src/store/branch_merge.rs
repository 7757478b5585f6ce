//! What a branch changed against main (`branches/diff`), and bringing the columns a branch
//! added into main (`branches/cherry_pick`): the lancedb client's branch workflow, where a
//! column is computed on a branch and promoted once it looks right.
//!
//! Rows are compared by fragment: a fragment with the same id, row count and deletions on
//! both sides holds the same rows. A pick needs every fragment to match, in the same order;
//! then the branch's new columns, read in scan order, line up with main's rows and are added
//! to main through lance's `add_columns` from a stream (one new version; main's rows and
//! other columns untouched).

use std::collections::HashMap;

use arrow_schema::Schema;
use lance::Dataset;
use lance::dataset::NewColumnTransform;
use lance::index::DatasetIndexExt;
use serde_json::{Value, json};

use super::Store;
use crate::error::{ApiError, ApiResult};

/// A fragment's identity for comparing rows (id, physical rows, deletion file id and
/// version), and its live rows.
type FragmentKey = (u64, Option<usize>, Option<(u64, u64)>, u64);

fn fragment_keys(ds: &Dataset) -> Vec<FragmentKey> {
    ds.fragments()
        .iter()
        .map(|f| {
            let deletion = f.deletion_file.as_ref().map(|d| (d.id, d.read_version));
            let deleted = f
                .deletion_file
                .as_ref()
                .and_then(|d| d.num_deleted_rows)
                .unwrap_or(0) as u64;
            let live = f
                .physical_rows
                .map_or(0, |p| p as u64)
                .saturating_sub(deleted);
            (f.id, f.physical_rows, deletion, live)
        })
        .collect()
}

fn column(f: &arrow_schema::Field) -> Value {
    json!({"name": f.name(), "dataType": f.data_type().to_string(), "nullable": f.is_nullable()})
}

async fn indexes(ds: &Dataset) -> ApiResult<HashMap<String, Value>> {
    let schema = ds.schema();
    let mut out = HashMap::new();
    for index in ds.load_indices().await.map_err(ApiError::from)?.iter() {
        let columns: Vec<String> = index
            .fields
            .iter()
            .filter_map(|id| schema.field_by_id(*id).map(|f| f.name.clone()))
            .collect();
        out.insert(
            index.name.clone(),
            json!({"indexName": index.name, "columns": columns, "status": "SUCCEEDED"}),
        );
    }
    Ok(out)
}

fn error(code: &str, message: String) -> Value {
    json!({"code": code, "message": message})
}

/// The columns a branch adds, and whether its rows line up with main's (see the module doc).
struct Comparison {
    diff: Value,
    added: Vec<String>,
    main_version: u64,
}

impl Store {
    async fn compare(&self, location: &str, from: &str) -> ApiResult<Comparison> {
        let branches = self.list_branches(location).await?;
        let contents = branches.get(from).ok_or_else(|| {
            ApiError::new(
                lance_namespace::ErrorCode::TableBranchNotFound,
                format!("branch not found: {from}"),
            )
        })?;
        let main = self.latest(location, None).await?;
        let branch = self.latest(location, Some(from)).await?;
        let (main_schema, branch_schema) =
            (Schema::from(main.schema()), Schema::from(branch.schema()));
        let mut errors = Vec::new();
        let parent_is_main = contents
            .parent_branch
            .as_deref()
            .is_none_or(|p| p.is_empty() || p == "main");
        if !parent_is_main {
            errors.push(error(
                "parentNotMain",
                format!("branch '{from}' was made from another branch"),
            ));
        }
        let base_moved = main.version().version != contents.parent_version;
        if base_moved {
            errors.push(error(
                "baseMoved",
                format!(
                    "main moved from version {} to {} since the branch was made",
                    contents.parent_version,
                    main.version().version
                ),
            ));
        }
        let (main_frags, branch_frags) = (fragment_keys(&main), fragment_keys(&branch));
        let key = |f: &FragmentKey| (f.0, f.1, f.2);
        let branch_keys: Vec<_> = branch_frags.iter().map(key).collect();
        let main_keys: Vec<_> = main_frags.iter().map(key).collect();
        let unchanged: u64 = main_frags
            .iter()
            .filter(|f| branch_keys.contains(&key(f)))
            .map(|f| f.3)
            .sum();
        let new_on_base: u64 = main_frags
            .iter()
            .filter(|f| !branch_keys.contains(&key(f)))
            .map(|f| f.3)
            .sum();
        let new_on_branch: u64 = branch_frags
            .iter()
            .filter(|f| !main_keys.contains(&key(f)))
            .map(|f| f.3)
            .sum();
        let (rows_main, rows_branch) = (
            main_frags.iter().map(|f| f.3).sum::<u64>(),
            branch_frags.iter().map(|f| f.3).sum::<u64>(),
        );
        if rows_main != rows_branch {
            errors.push(error(
                "rowCountMismatch",
                format!("main has {rows_main} rows, the branch {rows_branch}"),
            ));
        }
        if main_keys != branch_keys {
            errors.push(error(
                "rowsChanged",
                "rows were written, deleted or moved on main or on the branch since it was made"
                    .into(),
            ));
        }
        let added: Vec<_> = branch_schema
            .fields()
            .iter()
            .filter(|f| main_schema.field_with_name(f.name()).is_err())
            .collect();
        let removed: Vec<_> = main_schema
            .fields()
            .iter()
            .filter(|f| branch_schema.field_with_name(f.name()).is_err())
            .collect();
        let changed: Vec<Value> = main_schema
            .fields()
            .iter()
            .filter_map(|m| {
                let b = branch_schema.field_with_name(m.name()).ok()?;
                (m.data_type() != b.data_type() || m.is_nullable() != b.is_nullable())
                    .then(|| json!({"name": m.name(), "main": column(m), "branch": column(b)}))
            })
            .collect();
        if !removed.is_empty() {
            errors.push(error(
                "columnRemoved",
                "the branch removed columns of main".into(),
            ));
        }
        if !changed.is_empty() {
            errors.push(error(
                "columnChanged",
                "the branch changed columns of main".into(),
            ));
        }
        if added.is_empty() {
            errors.push(error("nothingToApply", "the branch adds no column".into()));
        }
        let (main_idx, branch_idx) = (indexes(&main).await?, indexes(&branch).await?);
        let added_idx: Vec<&Value> = branch_idx
            .iter()
            .filter(|(n, _)| !main_idx.contains_key(*n))
            .map(|(_, v)| v)
            .collect();
        let removed_idx: Vec<&Value> = main_idx
            .iter()
            .filter(|(n, _)| !branch_idx.contains_key(*n))
            .map(|(_, v)| v)
            .collect();
        let diff = json!({
            "fromBranch": from,
            "parentVersion": contents.parent_version,
            "mainVersion": main.version().version,
            "branchVersion": branch.version().version,
            "baseMoved": base_moved,
            "rowCountMain": rows_main,
            "rowCountBranch": rows_branch,
            "rowSummary": {
                "unchanged": unchanged,
                "newOnBase": new_on_base,
                "newOnBranch": new_on_branch,
                "staleRecompute": 0,
                "inputsChanged": 0,
                "deltaAvailable": false,
            },
            "addedColumns": added.iter().map(|f| column(f)).collect::<Vec<_>>(),
            "removedColumns": removed.iter().map(|f| column(f)).collect::<Vec<_>>(),
            "changedColumns": changed,
            "addedIndexes": added_idx,
            "removedIndexes": removed_idx,
            "errors": errors,
        });
        Ok(Comparison {
            diff,
            added: added.iter().map(|f| f.name().clone()).collect(),
            main_version: main.version().version,
        })
    }

    /// What branch `from` changed against main (the lancedb client's `BranchDiff`).
    pub async fn branch_diff(&self, location: &str, from: &str) -> ApiResult<Value> {
        Ok(self.compare(location, from).await?.diff)
    }

    /// Bring the columns branch `from` added into main, unless the diff reports an error
    /// (then nothing changes). Answers whether it succeeded (or, with `dry_run`, would) and
    /// the lancedb client's `CherryPickResult`.
    pub async fn cherry_pick(
        &self,
        location: &str,
        from: &str,
        dry_run: bool,
    ) -> ApiResult<(bool, Value)> {
        let comparison = self.compare(location, from).await?;
        let preview = json!({"promotedColumns": comparison.added});
        let failed = comparison.diff["errors"]
            .as_array()
            .is_some_and(|e| !e.is_empty());
        let answer = |status: &str, diff: Value, after: Option<u64>| {
            let mut v = json!({"status": status, "diff": diff, "preview": preview});
            if let Some(after) = after {
                v["mainVersionAfter"] = json!(after);
            }
            v
        };
        if failed {
            return Ok((false, answer("failed", comparison.diff, None)));
        }
        if dry_run {
            return Ok((true, answer("ready", comparison.diff, None)));
        }
        let branch = self.latest(location, Some(from)).await?;
        let _guard = self.write_lock(location, None).await;
        let mut main = (*self.latest(location, None).await?).clone();
        if main.version().version != comparison.main_version {
            let mut diff = comparison.diff;
            diff["errors"] = json!([error(
                "baseMoved",
                "main changed while the pick was prepared".into()
            )]);
            return Ok((false, answer("failed", diff, None)));
        }
        let mut scan = branch.scan();
        scan.project(&comparison.added).map_err(ApiError::from)?;
        scan.scan_in_order(true);
        let stream = scan.try_into_stream().await.map_err(ApiError::from)?;
        main.add_columns(NewColumnTransform::Stream(stream.into()), None, None)
            .await
            .map_err(ApiError::from)?;
        let version = main.version().version;
        self.remember(location, None, std::sync::Arc::new(main));
        Ok((true, answer("cherryPicked", comparison.diff, Some(version))))
    }
}
