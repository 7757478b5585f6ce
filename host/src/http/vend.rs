//! `vend_credentials` on describe/declare: the storage options a client needs to read a table
//! directly (pylance on the same store). Handed out only when the server runs with
//! `--vend-storage-options`: this server's `--storage-option`s plus the provider variables of
//! its environment for the root's scheme (`AWS_*` for s3, `GOOGLE_*` for gs, `AZURE_*` for az),
//! as lance's option keys (`aws_endpoint`, ...). These are the server's own credentials, not
//! scoped ones: turn it on only where every client may hold them.

use std::collections::HashMap;

use crate::App;
use crate::error::{ApiError, ApiResult};

/// The options to answer for `vend_credentials` (`None`: not asked, answer as usual).
pub fn storage_options(
    app: &App,
    vend_credentials: Option<bool>,
) -> ApiResult<Option<HashMap<String, String>>> {
    if vend_credentials != Some(true) {
        return Ok(None);
    }
    if app.root.is_local() {
        // A local directory needs no credentials.
        return Ok(Some(HashMap::new()));
    }
    if !app.vend_storage_options {
        return Err(ApiError::invalid(
            "vend_credentials: this server does not hand out storage options (start it with \
             --vend-storage-options to allow it)",
        ));
    }
    let uri = app.root.uri();
    let prefixes: &[&str] = match uri.split("://").next().unwrap_or_default() {
        "s3" | "s3a" => &["AWS_"],
        "gs" | "gcs" => &["GOOGLE_"],
        "az" | "abfs" | "abfss" | "azure" => &["AZURE_"],
        _ => &[],
    };
    let mut options: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| prefixes.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.to_ascii_lowercase(), v))
        .collect();
    options.extend(app.store.storage_options().clone());
    Ok(Some(options))
}
