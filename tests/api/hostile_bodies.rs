//! Arrow bodies that declare more than they hold. Before lancet-ipc, a 3-row stream whose
//! record batch claimed a 1 PiB body made arrow-ipc allocate 1 PiB and the process abort
//! ("memory allocation of 1125899906842624 bytes failed"); a buffer pointing past the body was
//! a caught panic (500). Each must now be a 400 in the spec's error shape, create no table,
//! and leave the server answering.

use arrow_ipc::CompressionType;
use arrow_ipc::writer::{FileWriter, IpcWriteOptions, StreamWriter};
use lancet_ipc::testing::{Kind, sites};
use serde_json::json;

use crate::common::*;

/// `bytes` with the first field of `kind` in the record batch (stream message 1, or file
/// block 0) set to `value`.
fn patched(bytes: &[u8], kind: Kind, value: i64) -> Vec<u8> {
    let site = sites(bytes)
        .expect("a valid body")
        .into_iter()
        .find(|s| s.kind == kind && s.message == usize::from(!bytes.starts_with(b"ARROW1")))
        .unwrap_or_else(|| panic!("no {kind:?} field"));
    let mut out = bytes.to_vec();
    site.write(&mut out, value);
    out
}

/// A 3-row stream whose record batch declares a body of 1 PiB.
fn huge_body_length() -> Vec<u8> {
    patched(&ipc_stream(&sample(0, 3)), Kind::BodyLength, 1 << 50)
}

/// A 3-row stream whose first non-empty buffer starts where the body ends.
fn buffer_past_body() -> Vec<u8> {
    let mut bytes = ipc_stream(&sample(0, 3));
    let fields = sites(&bytes).unwrap();
    let body = fields
        .iter()
        .find(|s| s.kind == Kind::BodyLength)
        .unwrap()
        .read(&bytes);
    // Buffer descriptors are (offset, length) pairs: the offset's length field follows it.
    let offset = fields
        .iter()
        .zip(&fields[1..])
        .find(|(o, l)| {
            o.kind == Kind::BufferOffset && l.kind == Kind::BufferLength && l.read(&bytes) > 0
        })
        .unwrap()
        .0;
    offset.write(&mut bytes, body);
    bytes
}

/// A stream of 100,000 compressed zeros whose values buffer claims 1 PiB decompressed.
fn compressed_petabyte(codec: CompressionType) -> Vec<u8> {
    let zeros = arrow_array::RecordBatch::try_from_iter([(
        "id",
        std::sync::Arc::new(arrow_array::Int64Array::from(vec![0; 100_000]))
            as arrow_array::ArrayRef,
    )])
    .unwrap();
    let options = IpcWriteOptions::default()
        .try_with_compression(Some(codec))
        .unwrap();
    let mut out = Vec::new();
    let mut w = StreamWriter::try_new_with_options(&mut out, &zeros.schema(), options).unwrap();
    w.write(&zeros).unwrap();
    w.finish().unwrap();
    patched(&out, Kind::UncompressedLength, 1 << 50)
}

/// A file-format body whose footer length points before the start of the file.
fn bad_footer() -> Vec<u8> {
    let mut out = Vec::new();
    let batch = sample(0, 3);
    let mut w = FileWriter::try_new(&mut out, &batch.schema()).unwrap();
    w.write(&batch).unwrap();
    w.finish().unwrap();
    patched(&out, Kind::FooterLength, i32::MAX as i64)
}

/// A 400 in the spec's error shape whose detail names the problem.
fn refused(status: u16, body: &serde_json::Value, detail: &str) {
    assert_error(status, body, 400, 13);
    assert_eq!(body["type"], "/errors/bad-request", "{body}");
    assert_eq!(body["title"], "Malformed request", "{body}");
    let text = body["detail"].as_str().unwrap();
    assert!(text.contains(detail), "detail {text:?} lacks {detail:?}");
}

async fn still_serving(s: &Server) {
    let (st, _) = s.get("/healthz").await;
    assert_eq!(st, 200, "the server stopped answering");
    assert_eq!(s.count("t", json!({})).await, 3);
}

async fn absent(s: &Server, table: &str) {
    let (st, b) = s
        .post(&format!("/v1/table/{table}/exists"), json!({}))
        .await;
    assert_eq!(st, 404, "a refused body created {table}: {b}");
}

#[tokio::test]
async fn a_huge_body_length_is_a_400_on_every_arrow_route() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let bytes = huge_body_length();
    let want = "record batch 0 declares a body of 1125899906842624 bytes but only";
    let (st, b) = s.post_bytes("/v1/table/new/create", bytes.clone()).await;
    refused(st, &b, want);
    absent(&s, "new").await;
    let (st, b) = s.post_bytes("/v1/table/t/insert", bytes.clone()).await;
    refused(st, &b, want);
    let (st, b) = s
        .post_bytes(
            "/v1/table/t/merge_insert?on=id&when_matched_update_all=true&when_not_matched_insert_all=true",
            bytes.clone(),
        )
        .await;
    refused(st, &b, want);
    let (st, b) = s.post_bytes("/v1/tables/new2", bytes).await;
    refused(st, &b, want);
    absent(&s, "new2").await;
    assert_eq!(s.version("t").await, 1);
    still_serving(&s).await;
}

#[tokio::test]
async fn a_buffer_past_the_body_is_a_400() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let bytes = buffer_past_body();
    let (st, b) = s.post_bytes("/v1/table/new/create", bytes.clone()).await;
    refused(st, &b, "lies outside the");
    absent(&s, "new").await;
    let (st, b) = s.post_bytes("/v1/table/t/insert", bytes).await;
    refused(st, &b, "lies outside the");
    still_serving(&s).await;
}

#[tokio::test]
async fn a_compressed_buffer_claiming_a_petabyte_is_a_400() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    for (name, codec) in [
        ("lz4", CompressionType::LZ4_FRAME),
        ("zstd", CompressionType::ZSTD),
    ] {
        let bytes = compressed_petabyte(codec);
        let (st, b) = s
            .post_bytes(&format!("/v1/table/{name}/create"), bytes)
            .await;
        refused(
            st,
            &b,
            "declares 1125899906842624 bytes decompressed, over the limit",
        );
        absent(&s, name).await;
    }
    still_serving(&s).await;
}

#[tokio::test]
async fn a_file_with_a_bad_footer_is_a_400() {
    let s = Server::start().await;
    s.create_table("t", 3).await;
    let (st, b) = s.post_bytes("/v1/table/new/create", bad_footer()).await;
    refused(
        st,
        &b,
        "not a valid Arrow IPC file: the file footer declares 2147483647 bytes",
    );
    absent(&s, "new").await;
    still_serving(&s).await;
}
