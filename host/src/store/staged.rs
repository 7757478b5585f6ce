//! Inserts in several parts (the lancedb client's multipart writes). Each part's rows are
//! written as data files no version references yet; lance hands back the transaction that
//! would commit them, which the caller keeps (encoded) until every part has arrived. One
//! commit then makes all parts visible at once, or none of them.

use std::sync::Arc;

use arrow_array::RecordBatch;
use lance::Dataset;
use lance::dataset::transaction::{Operation, Transaction, TransactionBuilder};
use lance::dataset::{CommitBuilder, InsertBuilder, WriteDestination};
use lance_table::format::pb;
use prost::Message;

use super::Store;
use super::write::{RowHook, commit_error, require_rows};
use crate::error::{ApiError, ApiResult};

impl Store {
    /// Writes `batches` (after `hook`) as uncommitted data files of the table; returns the
    /// encoded transaction that would commit them.
    pub async fn stage_insert(
        &self,
        location: &str,
        branch: Option<&str>,
        batches: Vec<RecordBatch>,
        overwrite: bool,
        hook: Option<RowHook<'_>>,
    ) -> ApiResult<Vec<u8>> {
        require_rows(&batches)?;
        let current = self.latest(location, branch).await?;
        let (batches, params) = self.prepare_insert(&current, batches, overwrite, hook)?;
        let txn = InsertBuilder::new(WriteDestination::Dataset(current))
            .with_params(&params)
            .execute_uncommitted(batches)
            .await
            .map_err(ApiError::from)?;
        let encoded = pb::Transaction::try_from(&txn).map_err(ApiError::from)?;
        Ok(encoded.encode_to_vec())
    }

    /// Commits staged parts (from [`Store::stage_insert`]) as one version, under transaction
    /// id `uuid` (so that a commit interrupted before it was recorded can be recognised).
    pub async fn commit_staged(
        &self,
        location: &str,
        branch: Option<&str>,
        parts: &[Vec<u8>],
        uuid: &str,
    ) -> ApiResult<Arc<Dataset>> {
        let operation = combine(parts)?;
        let _guard = self.write_lock(location, branch).await;
        let current = self.latest(location, branch).await?;
        let txn = TransactionBuilder::new(current.version().version, operation)
            .uuid(uuid.to_string())
            .build();
        let ds = CommitBuilder::new(current)
            .with_session(self.session())
            .execute(txn)
            .await
            .map_err(commit_error)?;
        let ds = Arc::new(ds);
        self.remember(location, branch, ds.clone());
        Ok(ds)
    }

    /// The version that committed transaction `uuid`, looking at the versions after `since`.
    pub async fn find_transaction(
        &self,
        location: &str,
        branch: Option<&str>,
        since: u64,
        uuid: &str,
    ) -> ApiResult<Option<u64>> {
        let ds = self.latest(location, branch).await?;
        for version in (since + 1)..=ds.version().version {
            let txn = ds
                .read_transaction_by_version(version)
                .await
                .map_err(ApiError::from)?;
            if txn.is_some_and(|t| t.uuid == uuid) {
                return Ok(Some(version));
            }
        }
        Ok(None)
    }
}

fn decode(part: &[u8]) -> ApiResult<Transaction> {
    let message = pb::Transaction::decode(part)
        .map_err(|e| ApiError::internal(format!("a staged part cannot be read: {e}")))?;
    Transaction::try_from(message).map_err(ApiError::from)
}

/// One operation holding every part's new fragments: an append of them all, or an overwrite
/// by them all (every part must then carry the same schema).
fn combine(parts: &[Vec<u8>]) -> ApiResult<Operation> {
    let mut combined: Option<Operation> = None;
    for part in parts {
        let op = decode(part)?.operation;
        combined = Some(match (combined, op) {
            (None, op @ (Operation::Append { .. } | Operation::Overwrite { .. })) => op,
            (Some(Operation::Append { mut fragments }), Operation::Append { fragments: more }) => {
                fragments.extend(more);
                Operation::Append { fragments }
            }
            (
                Some(Operation::Overwrite {
                    mut fragments,
                    schema,
                    config_upsert_values,
                    initial_bases,
                }),
                Operation::Overwrite {
                    fragments: more,
                    schema: other,
                    ..
                },
            ) => {
                if schema != other {
                    return Err(ApiError::invalid(
                        "the parts of an overwrite carry different schemas",
                    ));
                }
                fragments.extend(more);
                Operation::Overwrite {
                    fragments,
                    schema,
                    config_upsert_values,
                    initial_bases,
                }
            }
            (Some(_), _) => {
                return Err(ApiError::invalid(
                    "an upload's parts mix mode=append and mode=overwrite",
                ));
            }
            (None, other) => {
                return Err(ApiError::internal(format!(
                    "a staged part holds an unexpected {other} operation"
                )));
            }
        });
    }
    combined.ok_or_else(|| ApiError::invalid("the upload has no parts: nothing to commit"))
}
