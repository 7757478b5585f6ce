//! `request_bench --hold R --ab`: one read three ways in one process, one call of each in
//! turn on one task: lance on a dataset opened here (in-process), lance on the dataset the
//! server's store holds (in-store: Lancet's session, object-store wrappers and consistency
//! check, no request path) and the whole request service (in-service). Each call's CPU (this
//! process's, every thread) is summed per path. Separate processes differ from run to run by
//! more than the differences sought here (the same lance work by +-15%); in one process that
//! spread falls on all paths alike. A fourth path (`--ab-paths 1,2,3` picks paths) sends a
//! count with no predicate (`--ab-healthz`: `GET /healthz`) through the service and then
//! reads in-store: the request path as it costs between two reads, with the caches a read
//! leaves behind, rather than back to back. A fifth (path 4) reads in-store through Lancet's
//! query code (`QuerySpec::stream`) and sends the answer through Arrow IPC and back: the
//! query route's work without the request path or the body's parsing.

use std::time::{Duration, Instant};

use lance::Dataset;

use super::{Read, app};

pub async fn run(read: Read, location: &str, data: &str, stop: Instant) {
    let ds = Dataset::open(location).await.unwrap();
    let app = app(data).await;
    let service = lancet::http::service(app.clone(), 64 << 20, Duration::from_secs(30));
    let latest = lancet::store::At {
        branch: None,
        version: None,
    };
    let mut cpu = [0u64; 5];
    let mut polls = [0u64; 5];
    // `--ab-paths 1,2`: only those paths (0 in-process, 1 in-store, 2 in-service, 3 the
    // request path alone then in-store, 4 in-store through Lancet's query code).
    let paths: Vec<usize> = std::env::args()
        .skip_while(|a| a != "--ab-paths")
        .nth(1)
        .map_or(vec![0, 1, 2], |l| {
            l.split(',').map(|p| p.parse().unwrap()).collect()
        });
    let healthz = std::env::args().any(|a| a == "--ab-healthz");
    let mut rounds = 0u64;
    let mut i = 0;
    while Instant::now() < stop {
        // Each round starts at the next path, so none always follows the same one.
        for k in 0..paths.len() {
            let path = paths[(k + rounds as usize) % paths.len()];
            let polled = Polls::default();
            let before = process_cpu_ns();
            match path {
                0 => polled.count(read.in_process(&ds, i)).await,
                1 => {
                    polled
                        .count(async {
                            let ds = app.store.read(location, &latest).await.unwrap();
                            read.in_process(&ds, i).await
                        })
                        .await
                }
                2 => polled.count(read.in_service(&service, i)).await,
                // The read in-store through Lancet's own query code (`QuerySpec::stream`:
                // its scanner, the flat-search check) and its answer through Arrow IPC and
                // back, without the request path or the body's parsing.
                4 => {
                    polled
                        .count(async {
                            let ds = app.store.read(location, &latest).await.unwrap();
                            match super::bare::spec(&read.query(i)) {
                                Some(spec) => {
                                    use futures::TryStreamExt as _;
                                    let stream = spec.stream(&ds, &app.store).await;
                                    let stream = stream.unwrap();
                                    let schema = stream.schema();
                                    let batches: Vec<arrow_array::RecordBatch> =
                                        stream.try_collect().await.unwrap();
                                    // The answer as Arrow IPC and read back, as the handler
                                    // encodes it and the in-service loop decodes it.
                                    let mut bytes = Vec::new();
                                    let mut writer = arrow_ipc::writer::StreamWriter::try_new(
                                        &mut bytes, &schema,
                                    )
                                    .unwrap();
                                    for b in &batches {
                                        writer.write(b).unwrap();
                                    }
                                    writer.finish().unwrap();
                                    drop(writer);
                                    read.rows(&bytes)
                                }
                                None => read.in_process(&ds, i).await,
                            }
                        })
                        .await
                }
                // The request path alone (a count with no predicate; `--ab-healthz`: `GET
                // /healthz`) and then the read on the store's dataset outside it: what
                // in-service would cost if the two only added.
                _ => {
                    polled
                        .count(async {
                            request(&service, healthz).await;
                            let ds = app.store.read(location, &latest).await.unwrap();
                            read.in_process(&ds, i).await
                        })
                        .await
                }
            };
            cpu[path] += process_cpu_ns() - before;
            polls[path] += polled.0.get();
        }
        rounds += 1;
        i += 1;
    }
    let per = |n: u64| n as f64 / rounds.max(1) as f64;
    println!(
        "CPU µs per call, {rounds} rounds: in-process {:.1}, in-store {:.1}, in-service {:.1}, \
         request path alone + in-store {:.1}, in-store via Lancet's query code and IPC {:.1}",
        per(cpu[0]) / 1e3,
        per(cpu[1]) / 1e3,
        per(cpu[2]) / 1e3,
        per(cpu[3]) / 1e3,
        per(cpu[4]) / 1e3
    );
    // More than one poll would mean the read waited (on another thread, a timer or I/O).
    println!(
        "polls per call: in-process {:.1}, in-store {:.1}, in-service {:.1}",
        per(polls[0]),
        per(polls[1]),
        per(polls[2])
    );
}

/// How many times a future was polled.
#[derive(Default)]
struct Polls(std::cell::Cell<u64>);

impl Polls {
    async fn count<T>(&self, f: impl Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(|cx| {
            self.0.set(self.0.get() + 1);
            f.as_mut().poll(cx)
        })
        .await
    }
}

/// Nanoseconds of CPU this process has used, all threads.
fn process_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `POST /v1/table/t/count_rows` with no predicate (or `GET /healthz`) through `service`.
async fn request(service: &lancet::http::Service, healthz: bool) {
    let (method, path) = match healthz {
        true => ("GET", "/healthz"),
        false => ("POST", "/v1/table/t/count_rows"),
    };
    let response = super::call_service(service, method, path, b"{}".to_vec()).await;
    assert!(response.status().is_success());
}
