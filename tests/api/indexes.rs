use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn vector_scalar_and_fts_indexes() {
    let s = Server::start().await;
    s.create_table("ix", 300).await;
    s.ok(
        "/v1/table/ix/create_scalar_index",
        json!({"column": "id", "name": "id_idx"}),
    )
    .await;
    let v = s.ok("/v1/table/ix/create_index", json!({"column": "vec", "index_type": "IVF_FLAT", "name": "vec_idx", "num_partitions": 2, "distance_type": "l2"})).await;
    assert_eq!(v["version"], 3);
    s.ok(
        "/v1/table/ix/create_index",
        json!({"column": "text", "index_type": "INVERTED", "name": "text_idx", "lower_case": true}),
    )
    .await;

    let list = s.ok("/v1/table/ix/index/list", json!({})).await;
    let names: Vec<&str> = list["indexes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["index_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["id_idx", "text_idx", "vec_idx"]);
    for i in list["indexes"].as_array().unwrap() {
        assert_eq!(i["status"], "SUCCEEDED");
        assert_eq!(i["num_indexed_rows"], 300, "{i}");
        assert_eq!(i["num_unindexed_rows"], 0);
    }
    let page = s.ok("/v1/table/ix/index/list", json!({"limit": 2})).await;
    assert_eq!(page["indexes"].as_array().unwrap().len(), 2);
    let rest = s
        .ok(
            "/v1/table/ix/index/list",
            json!({"limit": 2, "page_token": page["page_token"]}),
        )
        .await;
    assert_eq!(rest["indexes"][0]["index_name"], "vec_idx");

    // Rows written after the build are still searched, unless fast_search.
    s.post_arrow("/v1/table/ix/insert", &sample(300, 10)).await;
    let stats = s.ok("/v1/table/ix/index/vec_idx/stats", json!({})).await;
    assert_eq!(stats["num_indexed_rows"], 300, "{stats}");
    assert_eq!(stats["num_unindexed_rows"], 10, "{stats}");
    assert_eq!(stats["distance_type"], "l2", "{stats}");
    assert!(
        stats["index_type"].as_str().unwrap().contains("IVF"),
        "{stats}"
    );
    let rows = s
        .query(
            "ix",
            json!({"vector": [305.0, 0.0, 1.0, 2.0], "k": 1, "nprobes": 2}),
        )
        .await;
    assert_eq!(ids(&rows), vec![305]);
    let rows = s
        .query(
            "ix",
            json!({"vector": [305.0, 0.0, 1.0, 2.0], "k": 1, "nprobes": 2, "fast_search": true}),
        )
        .await;
    assert_ne!(ids(&rows), vec![305]);
    let rows = s.query("ix", json!({"vector": [305.0, 0.0, 1.0, 2.0], "k": 1, "bypass_vector_index": true, "distance_type": "l2"})).await;
    assert_eq!(ids(&rows), vec![305]);
    // Filtered vector search, pre- and post-filter.
    let rows = s.query("ix", json!({"vector": [5.0, 0.0, 1.0, 2.0], "k": 3, "filter": "id > 100", "prefilter": true, "nprobes": 2})).await;
    assert!(ids(&rows).iter().all(|id| *id > 100));

    // Full text, string and structured, alone and with a filter.
    let rows = s.query("ix", json!({"full_text_query": {"string_query": {"query": "7", "columns": ["text"]}}, "k": 10})).await;
    assert_eq!(ids(&rows), vec![7]);
    let rows = s.query("ix", json!({"full_text_query": {"structured_query": {"query": {"match": {"column": "text", "terms": "42"}}}}, "k": 10})).await;
    assert_eq!(ids(&rows), vec![42]);
    let rows = s.query("ix", json!({"full_text_query": {"query": "row", "columns": ["text"]}, "filter": "id < 3", "k": 10})).await;
    let mut got = ids(&rows);
    got.sort();
    assert_eq!(got, vec![0, 1, 2]);

    // Drop.
    s.ok("/v1/table/ix/index/id_idx/drop", json!({})).await;
    let list = s.ok("/v1/table/ix/index/list", json!({})).await;
    assert_eq!(list["indexes"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn index_bad_input_and_branches() {
    let s = Server::start().await;
    s.create_table("ib", 50).await;
    let (st, b) = s
        .post(
            "/v1/table/ib/create_index",
            json!({"column": "vec", "index_type": "SUPER_FAST"}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s
        .post(
            "/v1/table/ib/create_index",
            json!({"column": "nosuch", "index_type": "BTREE"}),
        )
        .await;
    assert_error(st, &b, 400, 12);
    let (st, b) = s
        .post(
            "/v1/table/ib/create_index",
            json!({"column": "vec", "index_type": "IVF_FLAT", "num_partitions": -1}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    let (st, b) = s
        .post(
            "/v1/table/ib/create_index",
            json!({"column": "vec", "index_type": "IVF_FLAT", "distance_type": "manhattan"}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    s.ok(
        "/v1/table/ib/create_scalar_index",
        json!({"column": "id", "name": "i"}),
    )
    .await;
    let (st, b) = s
        .post(
            "/v1/table/ib/create_scalar_index",
            json!({"column": "id", "name": "i"}),
        )
        .await;
    assert_error(st, &b, 409, 7);
    let (st, b) = s.post("/v1/table/ib/index/none/stats", json!({})).await;
    assert_error(st, &b, 404, 6);
    let (st, b) = s.post("/v1/table/ib/index/none/drop", json!({})).await;
    assert_error(st, &b, 404, 6);
    // Query bad input.
    for (body, want) in [
        (json!({"vector": [1.0, 2.0], "k": 3}), 400),
        (
            json!({"vector": {"multi_vector": [[1.0, 2.0]]}, "k": 3}),
            400,
        ),
        (
            json!({"vector": [1.0, 0.0, 0.0, 0.0], "vector_column": "nosuch"}),
            400,
        ),
        (json!({"vector": [1.0, 0.0, 0.0, 0.0], "k": -1}), 400),
        (json!({"vector": [1.0, 0.0, 0.0, 0.0], "offset": -2}), 400),
        // An unknown column is invalid input (code 12), not a 404 the SDKs read as "no table".
        (json!({"filter": "nosuch > 1"}), 400),
    ] {
        let (st, b) = s.post("/v1/table/ib/query", body.clone()).await;
        assert_eq!(st, want, "{body} -> {b}");
    }
    // An index built on a branch does not appear on main.
    s.ok("/v1/table/ib/branches/create", json!({"name": "dev"}))
        .await;
    s.ok(
        "/v1/table/ib/create_scalar_index",
        json!({"column": "text", "name": "t", "index_type": "BITMAP", "branch": "dev"}),
    )
    .await;
    assert_eq!(
        s.ok("/v1/table/ib/index/list", json!({"branch": "dev"}))
            .await["indexes"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        s.ok("/v1/table/ib/index/list", json!({})).await["indexes"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(s.version("ib").await, 2);
}

#[tokio::test]
async fn ivf_rq_and_target_partition_size() {
    use std::sync::Arc;

    use arrow_array::{FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    let s = Server::start().await;
    // 4-d vectors: IVF_RQ needs a multiple of 8 dimensions, and says so.
    s.create_table("small", 10).await;
    let (st, b) = s
        .post(
            "/v1/table/small/create_index",
            json!({"column": "vec", "index_type": "IVF_RQ"}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("vec", DataType::FixedSizeList(item.clone(), 8), true),
    ]));
    let values: Vec<f32> = (0..400)
        .flat_map(|i| {
            let i = i as f32;
            [
                i,
                1.0,
                (i * 0.37).sin(),
                (i * 0.11).cos(),
                i % 7.0,
                2.0,
                i / 50.0,
                0.5,
            ]
        })
        .collect();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..400)),
            Arc::new(
                FixedSizeListArray::try_new(item, 8, Arc::new(Float32Array::from(values)), None)
                    .unwrap(),
            ),
        ],
    )
    .unwrap();
    let (st, b) = s.post_arrow("/v1/table/rq/create", &batch).await;
    assert_eq!(st, 200, "{b}");
    s.ok(
        "/v1/table/rq/create_index",
        json!({"column": "vec", "index_type": "IVF_RQ", "name": "rq_idx", "target_partition_size": 100, "num_bits": 1}),
    )
    .await;
    let stats = s.ok("/v1/table/rq/index/rq_idx/stats", json!({})).await;
    assert_eq!(stats["num_indexed_rows"], 400, "{stats}");
    let index = s.ok("/v1/table/rq/index/list", json!({})).await["indexes"][0].clone();
    assert!(
        index["index_type"].as_str().unwrap().contains("RQ"),
        "{index}"
    );
    // Row 7's own vector finds row 7 first: every partition probed and every candidate
    // re-ranked by exact distance (1-bit codes alone order near neighbours loosely).
    let hits = s
        .query(
            "rq",
            json!({"vector": [7.0, 1.0, (7.0f32 * 0.37).sin(), (7.0f32 * 0.11).cos(), 0.0, 2.0, 7.0 / 50.0, 0.5], "k": 1, "columns": ["id"], "nprobes": 16, "refine_factor": 400}),
        )
        .await;
    assert_eq!(ids(&hits), vec![7]);
    let (st, b) = s
        .post(
            "/v1/table/rq/create_index",
            json!({"column": "vec", "index_type": "IVF_PQ", "num_partitions": 2, "target_partition_size": 100}),
        )
        .await;
    assert_error(st, &b, 400, 13);
}

/// Every scalar index lance 14 builds without optional features, on the columns it suits;
/// each is listed with its type and filtered queries still answer the right rows.
#[tokio::test]
async fn every_scalar_index_type_builds() {
    let s = Server::start().await;
    s.create_table("x", 40).await;
    for (column, index_type, listed) in [
        ("id", "BTREE", "BTree"),
        ("id", "ZONEMAP", "ZoneMap"),
        ("id", "BLOOMFILTER", "BloomFilter"),
        ("text", "BITMAP", "Bitmap"),
        ("text", "NGRAM", "NGram"),
        ("text", "FM", "Fm"),
        ("text", "MINHASH_LSH", "MinHashLsh"),
        ("text", "FTS", "Inverted"),
    ] {
        let name = format!("{}_{}", column, index_type.to_lowercase());
        let (st, b) = s
            .post(
                "/v1/table/x/create_index",
                json!({"column": column, "index_type": index_type, "name": name}),
            )
            .await;
        assert_eq!(st, 200, "{index_type}: {b}");
        let list = s.ok("/v1/table/x/index/list", json!({})).await;
        let found = list["indexes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["index_name"] == name.as_str())
            .unwrap_or_else(|| panic!("{name} not listed: {list}"))
            .clone();
        assert_eq!(found["index_type"], listed, "{found}");
    }
    assert_eq!(s.count("x", json!({"predicate": "id < 10"})).await, 10);
    assert_eq!(
        s.count("x", json!({"predicate": "text = 'row 7'"})).await,
        1
    );
    let (st, b) = s
        .post(
            "/v1/table/x/create_index",
            json!({"column": "text", "index_type": "RTREE"}),
        )
        .await;
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("geospatial"), "{b}");
}

/// Counts a scalar index answers (store/index_count.rs) agree with the rows, through
/// deletions, rows appended since the build, and a pinned earlier version.
#[tokio::test]
async fn counts_through_a_scalar_index_match_the_rows() {
    let s = Server::start().await;
    s.create_table("cx", 300).await;
    s.ok(
        "/v1/table/cx/create_scalar_index",
        json!({"column": "id", "index_type": "BTREE", "name": "id_idx"}),
    )
    .await;
    let indexed = s.version("cx").await;
    s.ok("/v1/table/cx/delete", json!({"predicate": "id % 7 = 0"}))
        .await;
    let live = |ids: &mut dyn Iterator<Item = i64>| ids.filter(|i| i % 7 != 0).count() as u64;
    let cases: [(&str, u64); 6] = [
        ("id < 100", live(&mut (0..100))),
        ("id >= 250 OR id = 3", live(&mut (250..300)) + 1),
        ("NOT (id < 290)", live(&mut (290..300))),
        ("id IN (1, 7, 14, 15, 999)", 2),
        ("id = 7", 0),
        ("id > 1000", 0),
    ];
    for (predicate, want) in cases {
        let got = s.count("cx", json!({"predicate": predicate})).await;
        assert_eq!(got, want, "{predicate}");
    }
    // The state before the deletions, pinned.
    let before = s
        .count("cx", json!({"predicate": "id < 100", "version": indexed}))
        .await;
    assert_eq!(before, 100);
    // Rows the index has not seen are counted too.
    s.post_arrow("/v1/table/cx/insert", &sample(300, 10)).await;
    assert_eq!(
        s.count("cx", json!({"predicate": "id >= 295"})).await,
        live(&mut (295..300)) + 10
    );
    assert_eq!(s.count("cx", json!({})).await, live(&mut (0..300)) + 10);
}

/// Searches without a filter of a local table read the page-cached bytes of its files in place
/// (`--inline-local-reads`, on by default): the same rows, ids, texts and order as with it off,
/// and filtered queries and plain scans as before.
#[tokio::test]
async fn searches_read_cached_table_files_in_place_and_answer_the_same() {
    use crate::operability::{metric, scrape};
    let s = Server::start_with(
        tempfile::tempdir().unwrap(),
        &[("LANCET_INLINE_LOCAL_READS", "false")],
    )
    .await;
    s.create_table("lr", 300).await;
    s.ok("/v1/table/lr/create_index", json!({"column": "vec", "index_type": "IVF_FLAT", "name": "vec_idx", "num_partitions": 2, "distance_type": "l2"})).await;
    s.ok(
        "/v1/table/lr/create_index",
        json!({"column": "text", "index_type": "INVERTED", "name": "text_idx"}),
    )
    .await;
    // Rows the indexes have not seen, and deleted rows.
    s.post_arrow("/v1/table/lr/insert", &sample(300, 10)).await;
    s.ok("/v1/table/lr/delete", json!({"predicate": "id % 7 = 0"}))
        .await;
    let searches = [
        (
            json!({"vector": [305.0, 0.0, 1.0, 2.0], "k": 2, "nprobes": 2, "columns": ["id", "text"]}),
            vec![305, 304],
        ),
        (
            json!({"vector": [14.0, 0.0, 1.0, 2.0], "k": 1, "nprobes": 2, "columns": ["id", "text"]}),
            vec![13],
        ),
        (
            json!({"full_text_query": {"string_query": {"query": "43"}}, "k": 10, "columns": ["id", "text"]}),
            vec![43],
        ),
        (
            json!({"full_text_query": {"string_query": {"query": "305"}}, "k": 10, "columns": ["id", "text"]}),
            vec![305],
        ),
        (
            json!({"full_text_query": {"string_query": {"query": "14"}}, "k": 10, "columns": ["id", "text"]}),
            vec![],
        ),
        (
            json!({"filter": "id >= 298", "columns": ["id", "text"]}),
            vec![298, 299, 300, 302, 303, 304, 305, 306, 307, 309],
        ),
        (
            json!({"k": 5, "columns": ["id", "text"]}),
            vec![1, 2, 3, 4, 5],
        ),
    ];
    let searches = &searches;
    let answers = |s: Server| async move {
        let mut out = Vec::new();
        for (body, want) in searches {
            let rows = s.query("lr", body.clone()).await;
            assert_eq!(&ids(&rows), want, "{body}");
            let texts = strings(&rows, "text");
            let want_texts: Vec<_> = want.iter().map(|i| Some(format!("row {i}"))).collect();
            assert_eq!(texts, want_texts, "{body}");
            out.push(rows);
        }
        let text = scrape(&s).await;
        let inline = metric(&text, "lancet_local_reads_inline_total").unwrap();
        (s, out, inline)
    };
    let (s, off, inline) = answers(s).await;
    assert_eq!(inline, 0.0, "nothing read in place with the knob off");
    let (_s, on, inline) = answers(s.restart().await).await;
    assert!(inline >= 4.0, "searches read in place: {inline}");
    assert_eq!(off, on);
}
