//! Indexes on a table (any branch): create (vector, scalar, full-text), list, statistics, drop.
//! Index builds are synchronous, so a listed index has always been built; rows written since
//! are folded in by upkeep (`status` PENDING/INDEXING until they are, then SUCCEEDED).

use std::sync::Arc;

use lance::index::DatasetIndexExt;
use lance::index::IndexParams;
use lance::index::vector::VectorIndexParams;
use lance_index::IndexType;
use lance_index::is_system_index;
use lance_index::scalar::{BuiltinIndexType, InvertedIndexParams, ScalarIndexParams};
use lance_index::vector::bq::RQBuildParams;
use lance_index::vector::hnsw::builder::HnswBuildParams;
use lance_index::vector::ivf::IvfBuildParams;
use lance_index::vector::pq::PQBuildParams;
use lance_index::vector::sq::builder::SQBuildParams;
use lance_linalg::distance::DistanceType;
use lance_namespace::ErrorCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{At, Store};
use crate::error::{ApiError, ApiResult};

/// Index options as the namespace API names them; all optional but `column` and `index_type`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct IndexOptions {
    pub column: String,
    pub index_type: String,
    pub name: Option<String>,
    pub distance_type: Option<String>,
    pub metric_type: Option<String>,
    pub replace: Option<bool>,
    pub num_partitions: Option<i64>,
    /// Rows per IVF partition to aim for (instead of `num_partitions`).
    pub target_partition_size: Option<i64>,
    pub num_sub_vectors: Option<i64>,
    pub num_bits: Option<i64>,
    pub sample_rate: Option<i64>,
    pub max_iterations: Option<i64>,
    pub m: Option<i64>,
    pub ef_construction: Option<i64>,
    pub with_position: Option<bool>,
    pub base_tokenizer: Option<String>,
    pub language: Option<String>,
    pub max_token_length: Option<i64>,
    pub lower_case: Option<bool>,
    pub stem: Option<bool>,
    pub remove_stop_words: Option<bool>,
    pub ascii_folding: Option<bool>,
}

fn positive(name: &str, v: Option<i64>) -> ApiResult<Option<usize>> {
    match v {
        Some(n) if n <= 0 => Err(ApiError::invalid(format!("{name} must be > 0, got {n}"))),
        Some(n) => Ok(Some(n as usize)),
        None => Ok(None),
    }
}

fn index_type(name: &str) -> ApiResult<IndexType> {
    let upper = name.trim().to_ascii_uppercase();
    // The namespace API's aliases for lance's own names.
    let lance_name = match upper.as_str() {
        "SCALAR" => "BTREE",
        "FTS" => "INVERTED",
        "LABEL_LIST" => "LABELLIST",
        "ZONE_MAP" => "ZONEMAP",
        "VECTOR" => "IVF_PQ",
        other => other,
    };
    IndexType::try_from(lance_name).map_err(|_| {
        ApiError::invalid(format!(
            "unsupported index_type '{name}': use BTREE, BITMAP, LABEL_LIST, INVERTED/FTS, NGRAM, ZONEMAP, BLOOMFILTER, FM, MINHASH_LSH, IVF_FLAT, IVF_PQ, IVF_SQ, IVF_RQ, IVF_HNSW_FLAT, IVF_HNSW_SQ or IVF_HNSW_PQ"
        ))
    })
}

impl IndexOptions {
    fn build(&self) -> ApiResult<(IndexType, Box<dyn IndexParams>)> {
        let kind = index_type(&self.index_type)?;
        let scalar = |t| -> Box<dyn IndexParams> { Box::new(ScalarIndexParams::for_builtin(t)) };
        let params: Box<dyn IndexParams> = match kind {
            IndexType::BTree => scalar(BuiltinIndexType::BTree),
            IndexType::Bitmap => scalar(BuiltinIndexType::Bitmap),
            IndexType::LabelList => scalar(BuiltinIndexType::LabelList),
            IndexType::NGram => scalar(BuiltinIndexType::NGram),
            IndexType::ZoneMap => scalar(BuiltinIndexType::ZoneMap),
            IndexType::BloomFilter => scalar(BuiltinIndexType::BloomFilter),
            // Lance builds R-trees only with its `geo` feature (geospatial types and their
            // dependencies), which this server leaves out to keep its build lean.
            IndexType::RTree => {
                return Err(ApiError::invalid(
                    "index_type RTREE: this server is built without geospatial support; R-tree indexes are not available",
                ));
            }
            IndexType::Fm => scalar(BuiltinIndexType::Fm),
            IndexType::MinHashLsh => scalar(BuiltinIndexType::MinHashLsh),
            IndexType::Inverted => Box::new(self.inverted()?),
            _ => Box::new(self.vector(kind)?),
        };
        Ok((kind, params))
    }

    fn inverted(&self) -> ApiResult<InvertedIndexParams> {
        let mut p = InvertedIndexParams::default();
        if let Some(v) = self.with_position {
            p = p.with_position(v);
        }
        if let Some(v) = &self.base_tokenizer {
            p = p.base_tokenizer(v.clone());
        }
        if let Some(v) = &self.language {
            p = p.language(v).map_err(ApiError::from)?;
        }
        if let Some(v) = positive("max_token_length", self.max_token_length)? {
            p = p.max_token_length(Some(v));
        }
        if let Some(v) = self.lower_case {
            p = p.lower_case(v);
        }
        if let Some(v) = self.stem {
            p = p.stem(v);
        }
        if let Some(v) = self.remove_stop_words {
            p = p.remove_stop_words(v);
        }
        if let Some(v) = self.ascii_folding {
            p = p.ascii_folding(v);
        }
        Ok(p)
    }

    fn vector(&self, kind: IndexType) -> ApiResult<VectorIndexParams> {
        let metric = match self
            .distance_type
            .as_deref()
            .or(self.metric_type.as_deref())
        {
            Some(d) => DistanceType::try_from(d.to_ascii_lowercase().as_str()).map_err(|_| {
                ApiError::invalid(format!(
                    "unknown distance_type '{d}': use l2, cosine, dot or hamming"
                ))
            })?,
            None => DistanceType::L2,
        };
        let mut ivf = IvfBuildParams::default();
        if let Some(n) = positive("num_partitions", self.num_partitions)? {
            ivf.num_partitions = Some(n);
        }
        if let Some(n) = positive("target_partition_size", self.target_partition_size)? {
            if self.num_partitions.is_some() {
                return Err(ApiError::invalid(
                    "give num_partitions or target_partition_size, not both",
                ));
            }
            ivf.target_partition_size = Some(n);
        }
        if let Some(n) = positive("sample_rate", self.sample_rate)? {
            ivf.sample_rate = n;
        }
        if let Some(n) = positive("max_iterations", self.max_iterations)? {
            ivf.max_iters = n;
        }
        let mut pq = PQBuildParams::default();
        if let Some(n) = positive("num_sub_vectors", self.num_sub_vectors)? {
            pq.num_sub_vectors = n;
        }
        if let Some(n) = positive("num_bits", self.num_bits)? {
            pq.num_bits = n;
        }
        let mut hnsw = HnswBuildParams::default();
        if let Some(n) = positive("m", self.m)? {
            hnsw = hnsw.num_edges(n);
        }
        if let Some(n) = positive("ef_construction", self.ef_construction)? {
            hnsw = hnsw.ef_construction(n);
        }
        Ok(match kind {
            IndexType::IvfFlat => VectorIndexParams::with_ivf_flat_params(metric, ivf),
            IndexType::IvfPq => VectorIndexParams::with_ivf_pq_params(metric, ivf, pq),
            IndexType::IvfSq => {
                VectorIndexParams::with_ivf_sq_params(metric, ivf, SQBuildParams::default())
            }
            IndexType::IvfHnswFlat => VectorIndexParams::ivf_hnsw(metric, ivf, hnsw),
            IndexType::IvfHnswSq => VectorIndexParams::with_ivf_hnsw_sq_params(
                metric,
                ivf,
                hnsw,
                SQBuildParams::default(),
            ),
            IndexType::IvfHnswPq => {
                VectorIndexParams::with_ivf_hnsw_pq_params(metric, ivf, hnsw, pq)
            }
            IndexType::IvfRq => {
                let mut rq = RQBuildParams::default();
                if let Some(n) = positive("num_bits", self.num_bits)? {
                    rq.num_bits = u8::try_from(n).map_err(|_| {
                        ApiError::invalid(format!("num_bits must be at most 255, got {n}"))
                    })?;
                }
                VectorIndexParams::with_ivf_rq_params(metric, ivf, rq)
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "{other} is not a vector index type"
                )));
            }
        })
    }
}

fn index_error(err: lance_core::Error, name: &str) -> ApiError {
    let api = ApiError::from(err);
    if api.message.contains("already exists") {
        return ApiError::new(
            ErrorCode::TableIndexAlreadyExists,
            format!("index '{name}' already exists"),
        );
    }
    api
}

impl Store {
    pub async fn create_index(
        &self,
        location: &str,
        branch: Option<&str>,
        opts: &IndexOptions,
    ) -> ApiResult<u64> {
        let (kind, params) = opts.build()?;
        let _guard = self.write_lock(location, branch).await;
        let mut ds = (*self.latest(location, branch).await?).clone();
        crate::field_path::resolve(ds.schema(), &opts.column)?;
        let name = opts.name.clone().filter(|n| !n.is_empty());
        if !opts.replace.unwrap_or(false)
            && let Some(n) = &name
            && ds
                .load_indices_by_name(n)
                .await
                .map(|v| !v.is_empty())
                .unwrap_or(false)
        {
            return Err(ApiError::new(
                ErrorCode::TableIndexAlreadyExists,
                format!("index '{n}' already exists"),
            ));
        }
        ds.create_index(
            &[opts.column.as_str()],
            kind,
            name.clone(),
            params.as_ref(),
            opts.replace.unwrap_or(false),
        )
        .await
        .map_err(|e| index_error(e, name.as_deref().unwrap_or(&opts.column)))?;
        let version = ds.version().version;
        self.remember(location, branch, Arc::new(ds));
        Ok(version)
    }

    pub async fn drop_index(
        &self,
        location: &str,
        branch: Option<&str>,
        name: &str,
    ) -> ApiResult<u64> {
        let _guard = self.write_lock(location, branch).await;
        let mut ds = (*self.latest(location, branch).await?).clone();
        if ds
            .load_indices_by_name(name)
            .await
            .map(|v| v.is_empty())
            .unwrap_or(true)
        {
            return Err(ApiError::new(
                ErrorCode::TableIndexNotFound,
                format!("index not found: {name}"),
            ));
        }
        ds.drop_index(name).await.map_err(ApiError::from)?;
        let version = ds.version().version;
        self.remember(location, branch, Arc::new(ds));
        Ok(version)
    }

    /// Index entries (spec 2.7), sorted by name.
    pub async fn list_indexes(&self, location: &str, at: &At) -> ApiResult<Vec<(String, Value)>> {
        let ds = self.read(location, at).await?;
        let mut out = Vec::new();
        for d in ds.describe_indices(None).await.map_err(ApiError::from)? {
            if d.metadata().first().is_none_or(is_system_index) {
                continue;
            }
            let columns: Vec<String> = d
                .field_ids()
                .iter()
                .filter_map(|id| {
                    i32::try_from(*id)
                        .ok()
                        .and_then(|id| ds.schema().field_path_minimal(id).ok())
                })
                .collect();
            let (indexed, unindexed) = super::upkeep::coverage(&ds, d.metadata());
            let segments = d.segments();
            let created_at = segments
                .iter()
                .filter_map(|s| s.created_at)
                .min()
                .map(|t| t.to_rfc3339());
            let entry = json!({
                "index_name": d.name(),
                "index_uuid": d.metadata()[0].uuid.to_string(),
                "columns": columns,
                // Refined by the HTTP layer, which knows about upkeep jobs.
                "status": if unindexed == 0 { "SUCCEEDED" } else { "PENDING" },
                "index_type": d.index_type().to_string(),
                "type_url": d.type_url(),
                "num_indexed_rows": indexed,
                "num_unindexed_rows": unindexed,
                "size_bytes": d.total_size_bytes(),
                "num_segments": segments.len(),
                "created_at": created_at,
                "index_version": segments.first().map(|s| s.index_version),
                "index_details": d.details().ok(),
            });
            out.push((d.name().to_string(), entry));
        }
        Ok(out)
    }

    /// lance's own statistics, with the spec 4.8 fields lifted to the top level.
    pub async fn index_stats(&self, location: &str, at: &At, name: &str) -> ApiResult<Value> {
        let ds = self.read(location, at).await?;
        require_index(&ds, name).await?;
        let text = ds.index_statistics(name).await.map_err(ApiError::from)?;
        let stats: Value =
            serde_json::from_str(&text).map_err(|e| ApiError::internal(e.to_string()))?;
        let distance = stats
            .get("distance_type")
            .cloned()
            .or_else(|| stats.pointer("/indices/0/metric_type").cloned())
            .unwrap_or(Value::Null);
        Ok(json!({
            "index_type": stats.get("index_type"),
            "distance_type": distance,
            "num_indexed_rows": stats.get("num_indexed_rows"),
            "num_unindexed_rows": stats.get("num_unindexed_rows"),
            "num_indices": stats.get("num_indices"),
        }))
    }
}

/// 404 unless `name` is a user index of `ds` (lance's system indexes are not shown).
pub(super) async fn require_index(ds: &lance::Dataset, name: &str) -> ApiResult<()> {
    let found = ds
        .load_indices_by_name(name)
        .await
        .map_err(ApiError::from)?;
    if found.is_empty() || found.first().is_some_and(is_system_index) {
        return Err(ApiError::new(
            ErrorCode::TableIndexNotFound,
            format!("index not found: {name}"),
        ));
    }
    Ok(())
}
