//! UDF modules under the data root (`_udfs/modules/<sha256>.wasm`), for an object-store root:
//! the runtime publishes every module it stores there and fetches the ones it lacks, so a
//! column defined through one node computes on any other. (A local root needs none of this:
//! the runtime's module directory is that same folder.)

use std::sync::Arc;

use super::RootStore;

pub struct RootModules {
    root: Arc<RootStore>,
    runtime: tokio::runtime::Handle,
}

fn key(sha256: &str) -> String {
    format!("_udfs/modules/{sha256}.wasm")
}

impl RootModules {
    pub fn new(root: Arc<RootStore>, runtime: tokio::runtime::Handle) -> Self {
        Self { root, runtime }
    }

    fn block<T: Send>(
        &self,
        work: impl std::future::Future<Output = crate::error::ApiResult<T>> + Send,
    ) -> Result<T, String> {
        block_on(&self.runtime, work).map_err(|e| e.message)
    }
}

/// Runs async `work` to its end from synchronous code, often called on an async worker
/// thread. There the worker hands its queued tasks to another thread first
/// (`block_in_place`): the store's connection tasks may sit in its queue, and waiting on them
/// without that never ends. Elsewhere (a blocking-pool thread) it just waits.
pub fn block_on<T: Send>(
    runtime: &tokio::runtime::Handle,
    work: impl std::future::Future<Output = crate::error::ApiResult<T>> + Send,
) -> crate::error::ApiResult<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| runtime.block_on(work)),
        // A current-thread runtime cannot lend its thread: a thread of its own then.
        Ok(_) => std::thread::scope(|s| {
            s.spawn(|| runtime.block_on(work))
                .join()
                .unwrap_or_else(|_| Err(crate::error::ApiError::internal("blocked task panicked")))
        }),
        Err(_) => runtime.block_on(work),
    }
}

impl lancet_udf::SharedModules for RootModules {
    fn fetch(&self, sha256: &str) -> Result<Option<Vec<u8>>, String> {
        let key = key(sha256);
        self.block(async { Ok(self.root.get(&key).await?.map(|v| v.bytes.to_vec())) })
    }

    fn publish(&self, sha256: &str, bytes: &[u8]) -> Result<(), String> {
        let key = key(sha256);
        let bytes = bytes::Bytes::copy_from_slice(bytes);
        self.block(async {
            // Content-addressed: whoever wrote it first wrote the same bytes.
            self.root.create(&key, bytes).await.map(|_| ())
        })
    }
}
