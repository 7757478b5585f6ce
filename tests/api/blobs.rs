//! Blob columns (lance blob v2): `fetch_blobs` (whole values as Arrow) and
//! `GET blob/{column}/{row_id}/bytes` (byte ranges), as the lancedb client reads them.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, Int64Array, LargeBinaryArray, RecordBatch, StringArray, StructArray,
    UInt64Array,
};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, Fields, Schema};
use serde_json::json;

use crate::common::*;

fn blob_fields() -> Fields {
    Fields::from(vec![
        Field::new("data", DataType::LargeBinary, true),
        Field::new("uri", DataType::Utf8, true),
        Field::new("position", DataType::UInt64, true),
        Field::new("size", DataType::UInt64, true),
    ])
}

/// Rows `ids` with blob values `values` (None: a null blob), as a lance blob v2 column.
fn blob_rows(ids: &[i64], values: &[Option<Vec<u8>>]) -> RecordBatch {
    let n = values.len();
    let data = LargeBinaryArray::from_iter(values.iter().map(|v| v.as_deref()));
    let children: Vec<ArrayRef> = vec![
        Arc::new(data),
        Arc::new(StringArray::new_null(n)),
        Arc::new(UInt64Array::new_null(n)),
        Arc::new(UInt64Array::new_null(n)),
    ];
    let nulls = NullBuffer::from(values.iter().map(Option::is_some).collect::<Vec<_>>());
    let blob = StructArray::new(blob_fields(), children, Some(nulls));
    let field =
        Field::new("img", DataType::Struct(blob_fields()), true).with_metadata(HashMap::from([
            (
                "ARROW:extension:name".to_string(),
                "lance.blob.v2".to_string(),
            ),
            ("ARROW:extension:metadata".to_string(), String::new()),
        ]));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        field,
    ]));
    RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from(ids.to_vec())), Arc::new(blob)],
    )
    .unwrap()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

async fn fetch(s: &Handle, body: serde_json::Value) -> (u16, Vec<u8>) {
    let r = s
        .client
        .post(s.url("/v1/table/b/fetch_blobs"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
}

fn decode(bytes: &[u8]) -> Vec<Option<Vec<u8>>> {
    let reader = arrow_ipc::reader::StreamReader::try_new(bytes, None).unwrap();
    let mut out = Vec::new();
    for batch in reader {
        let batch = batch.unwrap();
        let col = batch.column_by_name("img").unwrap();
        let col = col.as_any().downcast_ref::<LargeBinaryArray>().unwrap();
        for i in 0..col.len() {
            out.push(col.is_valid(i).then(|| col.value(i).to_vec()));
        }
    }
    out
}

async fn range(s: &Handle, path: &str, range: Option<&str>) -> reqwest::Response {
    let mut req = s.client.get(s.url(path));
    if let Some(r) = range {
        req = req.header("range", r);
    }
    req.send().await.unwrap()
}

fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test]
async fn blobs_are_read_whole_or_by_range_at_a_pinned_version() {
    let s = Server::start().await;
    let big = pattern(3000, 1);
    let values = vec![
        Some(b"hello".to_vec()),
        None,
        Some(Vec::new()),
        Some(big.clone()),
    ];
    let (st, b) = s
        .post_arrow("/v1/table/b/create", &blob_rows(&[0, 1, 2, 3], &values))
        .await;
    assert_eq!(st, 200, "{b}");

    // Whole values, in the order asked (repeats too), nulls kept apart from empty values.
    let (st, body) = fetch(&s, json!({"column": "img", "row_ids": [3, 0, 1, 2, 0]})).await;
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let got = decode(&body);
    assert_eq!(
        got,
        vec![
            Some(big.clone()),
            Some(b"hello".to_vec()),
            None,
            Some(Vec::new()),
            Some(b"hello".to_vec())
        ]
    );

    // Byte ranges: the size probe the client sends, an open range, a suffix, whole.
    let path = "/v1/table/b/blob/img/3/bytes";
    let r = range(&s, path, Some("bytes=0-0")).await;
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(header(&r, "content-range"), "bytes 0-0/3000");
    assert_eq!(header(&r, "x-lancedb-version"), "1");
    assert_eq!(r.bytes().await.unwrap().to_vec(), big[..1].to_vec());
    let r = range(&s, path, Some("bytes=1000-")).await;
    assert_eq!(header(&r, "content-range"), "bytes 1000-2999/3000");
    assert_eq!(r.bytes().await.unwrap().to_vec(), big[1000..].to_vec());
    let r = range(&s, path, Some("bytes=-10")).await;
    assert_eq!(r.bytes().await.unwrap().to_vec(), big[2990..].to_vec());
    let r = range(&s, path, None).await;
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.bytes().await.unwrap().to_vec(), big);
    // A null blob is 204; any range of an empty one (or past an end) is 416 with the size.
    let r = range(&s, "/v1/table/b/blob/img/1/bytes", Some("bytes=0-0")).await;
    assert_eq!(r.status().as_u16(), 204);
    let r = range(&s, "/v1/table/b/blob/img/2/bytes", Some("bytes=0-0")).await;
    assert_eq!(r.status().as_u16(), 416);
    assert_eq!(header(&r, "content-range"), "bytes */0");
    let r = range(&s, path, Some("bytes=3000-")).await;
    assert_eq!(r.status().as_u16(), 416);
    assert_eq!(header(&r, "content-range"), "bytes */3000");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], 416, "{body}");

    // A new version replaces the rows; the old one is still read when named.
    let (st, b) = s
        .post_arrow(
            "/v1/table/b/insert?mode=overwrite",
            &blob_rows(&[7], &[Some(b"new".to_vec())]),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let r = range(
        &s,
        "/v1/table/b/blob/img/0/bytes?version=1",
        Some("bytes=0-"),
    )
    .await;
    assert_eq!(r.bytes().await.unwrap().to_vec(), b"hello".to_vec());
    let (st, body) = fetch(&s, json!({"column": "img", "row_ids": [3], "version": 1})).await;
    assert_eq!(st, 200);
    assert_eq!(decode(&body), vec![Some(big)]);
    // Row ids are lance's: the overwrite's row lives in a new fragment.
    let batches = s
        .query(
            "b",
            json!({"columns": ["id"], "with_row_id": true, "k": 10}),
        )
        .await;
    let row_id = batches[0]
        .column_by_name("_rowid")
        .unwrap()
        .as_any()
        .downcast_ref::<UInt64Array>()
        .unwrap()
        .value(0);
    assert_ne!(row_id, 0);
    let (st, body) = fetch(&s, json!({"column": "img", "row_ids": [row_id]})).await;
    assert_eq!(st, 200);
    assert_eq!(decode(&body), vec![Some(b"new".to_vec())]);
    let (st, _) = fetch(&s, json!({"column": "img", "row_ids": [0]})).await;
    assert_eq!(st, 400, "row 0 is gone at the latest version");
}

#[tokio::test]
async fn bad_blob_requests_are_refused_with_the_reason() {
    let s = Server::start().await;
    let (st, b) = s
        .post_arrow(
            "/v1/table/b/create",
            &blob_rows(&[0], &[Some(vec![1, 2, 3])]),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let fail = |st: u16, body: Vec<u8>| -> (u16, serde_json::Value) {
        (st, serde_json::from_slice(&body).unwrap())
    };

    let (st, b) = fetch(&s, json!({"column": "id", "row_ids": [0]})).await;
    let (st, b) = fail(st, b);
    assert_error(st, &b, 400, 13);
    assert!(
        b["error"].as_str().unwrap().contains("not a blob column"),
        "{b}"
    );
    let (st, b) = fetch(&s, json!({"column": "nope", "row_ids": [0]})).await;
    let (st, b) = fail(st, b);
    assert_error(st, &b, 400, 12);
    let ids: Vec<u64> = (0..1025).collect();
    let (st, b) = fetch(&s, json!({"column": "img", "row_ids": ids})).await;
    let (st, b) = fail(st, b);
    assert_error(st, &b, 400, 13);
    assert!(
        b["error"]
            .as_str()
            .unwrap()
            .contains("at most 1024 row IDs"),
        "{b}"
    );
    let (st, b) = fetch(&s, json!({"column": "img", "row_ids": [0], "shape": 1})).await;
    let (st, b) = fail(st, b);
    assert_error(st, &b, 400, 13);
    assert!(b["error"].as_str().unwrap().contains("shape"), "{b}");
    let (st, b) = fetch(&s, json!({"column": "img", "row_ids": [0], "version": 9})).await;
    let (st, b) = fail(st, b);
    assert_error(st, &b, 404, 11);
    let (st, b) = fetch(&s, json!({"column": "img", "row_ids": [99]})).await;
    let (st, b) = fail(st, b);
    assert_error(st, &b, 400, 13);

    for (path, r) in [
        ("/v1/table/b/blob/img/x/bytes", Some("bytes=0-0")),
        ("/v1/table/b/blob/img/0/bytes", Some("bytes=2-1")),
        ("/v1/table/b/blob/img/0/bytes", Some("bytes=0-1,2-3")),
        ("/v1/table/b/blob/id/0/bytes", Some("bytes=0-0")),
    ] {
        let resp = range(&s, path, r).await;
        assert_eq!(resp.status().as_u16(), 400, "{path} {r:?}");
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["code"], 13, "{body}");
    }
    let resp = range(&s, "/v1/table/missing/blob/img/0/bytes", None).await;
    assert_eq!(resp.status().as_u16(), 404);
}

/// `fetch_blobs` assembles its answer in memory: that memory is drawn from the request-memory
/// budget (`--max-body-memory-mb`), and an answer that does not fit is a 503 to retry, not an
/// unbounded allocation.
#[tokio::test]
async fn a_blob_answer_is_charged_to_the_memory_budget() {
    let data = tempfile::tempdir().unwrap();
    let s = Server::start_with(data, &[("LANCET_MAX_BODY_MEMORY_MB", "3")]).await;
    let big = pattern(1 << 20, 3);
    let (st, b) = s
        .post_arrow(
            "/v1/table/b/create",
            &blob_rows(&[0, 1], &[Some(big.clone()), Some(big)]),
        )
        .await;
    assert_eq!(st, 200, "{b}");
    let (st, body) = fetch(&s, json!({"column": "img", "row_ids": [0]})).await;
    assert_eq!(st, 200, "one blob fits");
    assert_eq!(decode(&body)[0].as_ref().map(Vec::len), Some(1 << 20));
    let (st, body) = fetch(&s, json!({"column": "img", "row_ids": [0, 1]})).await;
    let b: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_error(st, &b, 503, 17);
    // The byte-range route streams: it needs no such reservation.
    let r = range(&s, "/v1/table/b/blob/img/1/bytes", None).await;
    assert_eq!(r.bytes().await.unwrap().len(), 1 << 20);
}
