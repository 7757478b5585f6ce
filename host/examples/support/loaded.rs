//! The request bench's table: 100k rows (`--rows`) loaded through Lancet in 40 inserts (40
//! fragments) with IVF_PQ on `vec`, FTS on `text` and BTREE on `category`; or, with
//! `--data DIR` naming a directory an earlier run loaded, that table as it is (setting up
//! takes ~25 s a run; many short runs of `--hold` then fit in a session). A reused table is
//! taken as it is: `--rows` only applies to the run that loads it.

use serde_json::json;

use crate::rows::batch;

/// The data directory: a fresh temporary one, or `--data DIR` (kept after the run).
pub enum Data {
    Fresh(tempfile::TempDir),
    Kept(std::path::PathBuf),
}

impl Data {
    pub fn from_args() -> Self {
        let args: Vec<String> = std::env::args().collect();
        match args.iter().position(|a| a == "--data") {
            Some(at) => {
                let dir = std::path::PathBuf::from(args.get(at + 1).expect("--data DIR"));
                std::fs::create_dir_all(&dir).unwrap();
                Data::Kept(dir)
            }
            None => Data::Fresh(tempfile::tempdir().unwrap()),
        }
    }

    pub fn path(&self) -> &str {
        match self {
            Data::Fresh(dir) => dir.path().to_str().unwrap(),
            Data::Kept(dir) => dir.to_str().unwrap(),
        }
    }
}

/// Table `t` on the server at `base`, loaded unless it is there already; answers its location.
pub async fn table(http: &reqwest::Client, base: &str, rows: usize) -> String {
    let describe = format!("{base}/v1/table/t/describe");
    let existing = http.post(&describe).json(&json!({})).send().await.unwrap();
    if !existing.status().is_success() {
        load(http, base, rows).await;
    }
    crate::post(http, &describe, json!({})).await["location"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn load(http: &reqwest::Client, base: &str, rows: usize) {
    let per = rows / 40;
    for k in 0..40 {
        let ids: Vec<i64> = ((k * per) as i64..((k + 1) * per) as i64).collect();
        let op = if k == 0 { "create" } else { "insert" };
        let r = http
            .post(format!("{base}/v1/table/t/{op}"))
            .header("content-type", "application/vnd.apache.arrow.stream")
            .body(batch(&ids, 0))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{op}: {}", r.text().await.unwrap());
    }
    for body in [
        json!({"column": "vec", "index_type": "IVF_PQ", "num_partitions": 16, "num_sub_vectors": 8}),
        json!({"column": "text", "index_type": "FTS"}),
        json!({"column": "category", "index_type": "BTREE"}),
    ] {
        crate::post(http, &format!("{base}/v1/table/t/create_index"), body).await;
    }
}

/// Lancet's `optimize` on `t`, waited for until the table is one fragment.
pub async fn compact(http: &reqwest::Client, base: &str) {
    crate::post(http, &format!("{base}/v1/table/t/optimize"), json!({})).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let stats = crate::post(http, &format!("{base}/v1/table/t/stats"), json!({})).await;
        if stats["fragment_stats"]["num_fragments"].as_u64() == Some(1) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "optimize did not compact"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
