//! `lancet admin`: the operator's command line, a client of `/v1/admin/...` (docs/hosting.md).
//! It prints the server's JSON answers; a refusal or failure prints the error and exits 1.

use clap::Subcommand;
use serde_json::{Value, json};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[derive(clap::Args)]
pub struct AdminArgs {
    /// The server.
    #[arg(
        long,
        env = "LANCET_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    url: String,
    /// The operator's key (`lancet admin operator-key create` makes one).
    #[arg(
        long,
        env = "LANCET_OPERATOR_KEY",
        global = true,
        hide_env_values = true
    )]
    operator_key: Option<String>,
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Tenants: list, create, describe, update, suspend, resume, delete.
    #[command(subcommand)]
    Tenants(TenantsCommand),
    /// A tenant's keys: list, create, rotate, revoke.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Search the audit log, or verify its hash chains.
    Audit(AuditArgs),
    /// Usage by tenant and hour.
    Usage {
        #[arg(long)]
        tenant: Option<String>,
        /// RFC 3339.
        #[arg(long)]
        since: Option<String>,
        /// RFC 3339.
        #[arg(long)]
        until: Option<String>,
        /// json or csv.
        #[arg(long, default_value = "json")]
        format: String,
    },
}

#[derive(Subcommand)]
enum TenantsCommand {
    /// Every tenant with its state, settings, bytes and tables.
    List,
    /// Register a tenant with its settings (JSON: quota, udf, native_python, ...).
    Create {
        name: String,
        #[arg(long, default_value = "{}")]
        settings: String,
    },
    /// One tenant: settings, keys with their last use, open jobs.
    Describe { name: String },
    /// Change settings (merged; a field set to null is removed); live on every replica.
    Update {
        name: String,
        #[arg(long)]
        settings: String,
    },
    /// Refuse every request of the tenant (403) and pause its jobs.
    Suspend { name: String },
    /// Serve the tenant again and resume the jobs its suspension paused.
    Resume { name: String },
    /// Remove every byte the tenant owns; its keys stay as revoked tombstones.
    Delete {
        name: String,
        /// Required: deletion cannot be undone.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// A tenant's keys (never the keys themselves).
    List { tenant: String },
    /// Make a key and print it (shown once).
    Create {
        tenant: String,
        /// read, write or admin.
        #[arg(long, default_value = "read")]
        role: String,
        /// The namespace subtree it covers (repeat per level).
        #[arg(long)]
        namespace: Vec<String>,
        #[arg(long, default_value = "")]
        description: String,
        /// How long it is valid (`30d`, `12h`); default: until revoked.
        #[arg(long)]
        expires_in: Option<String>,
    },
    /// A new key for the same tenant, role and namespace; the old one stays valid `--overlap`.
    Rotate {
        id: String,
        #[arg(long, default_value = "1h")]
        overlap: String,
    },
    /// Revoke a key (kept as a tombstone).
    Revoke { id: String },
}

#[derive(clap::Args)]
struct AuditArgs {
    /// `verify`: check every writer's hash chain (exit 1 when broken).
    action: Option<String>,
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    principal: Option<String>,
    #[arg(long = "action")]
    on: Option<String>,
    /// RFC 3339.
    #[arg(long)]
    since: Option<String>,
    /// RFC 3339.
    #[arg(long)]
    until: Option<String>,
    #[arg(long, default_value_t = 100)]
    limit: u32,
}

struct Client {
    http: reqwest::Client,
    url: String,
    key: String,
}

impl Client {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.url.trim_end_matches('/')))
            .header("x-api-key", &self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await?;
        let status = response.status();
        let text = response.text().await?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if !status.is_success() {
            let detail = value["detail"].as_str().unwrap_or_default();
            return Err(format!("{status}: {detail}").into());
        }
        Ok(value)
    }
    async fn get(&self, path: &str) -> Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }
    async fn post(&self, path: &str, body: Value) -> Result<Value> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }
}

fn json_arg(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| format!("--settings is not JSON: {e}").into())
}

fn seg(s: &str) -> String {
    url_escape(s)
}

fn url_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub async fn run(args: AdminArgs) -> Result<()> {
    let key = args
        .operator_key
        .filter(|k| !k.is_empty())
        .ok_or("no operator key: set LANCET_OPERATOR_KEY or --operator-key")?;
    let c = Client {
        http: reqwest::Client::new(),
        url: args.url,
        key,
    };
    let out = match args.command {
        AdminCommand::Tenants(t) => match t {
            TenantsCommand::List => c.get("/v1/admin/tenants").await?,
            TenantsCommand::Create { name, settings } => {
                let path = format!("/v1/admin/tenants/{}/create", seg(&name));
                c.post(&path, json_arg(&settings)?).await?
            }
            TenantsCommand::Describe { name } => {
                c.get(&format!("/v1/admin/tenants/{}", seg(&name))).await?
            }
            TenantsCommand::Update { name, settings } => {
                let path = format!("/v1/admin/tenants/{}/update", seg(&name));
                c.post(&path, json_arg(&settings)?).await?
            }
            TenantsCommand::Suspend { name } => {
                let path = format!("/v1/admin/tenants/{}/suspend", seg(&name));
                c.post(&path, json!({})).await?
            }
            TenantsCommand::Resume { name } => {
                let path = format!("/v1/admin/tenants/{}/resume", seg(&name));
                c.post(&path, json!({})).await?
            }
            TenantsCommand::Delete { name, yes } => {
                if !yes {
                    return Err(format!(
                        "deleting tenant '{name}' removes all its data for good: add --yes"
                    )
                    .into());
                }
                let path = format!("/v1/admin/tenants/{}/delete", seg(&name));
                c.post(&path, json!({})).await?
            }
        },
        AdminCommand::Keys(k) => match k {
            KeysCommand::List { tenant } => {
                c.get(&format!("/v1/admin/tenants/{}/keys", seg(&tenant)))
                    .await?
            }
            KeysCommand::Create {
                tenant,
                role,
                namespace,
                description,
                expires_in,
            } => {
                let path = format!("/v1/admin/tenants/{}/keys/create", seg(&tenant));
                let body = json!({"role": role, "namespace": namespace,
                    "description": description, "expires_in": expires_in});
                c.post(&path, body).await?
            }
            KeysCommand::Rotate { id, overlap } => {
                let path = format!("/v1/admin/keys/{}/rotate", seg(&id));
                c.post(&path, json!({"overlap": overlap})).await?
            }
            KeysCommand::Revoke { id } => {
                let path = format!("/v1/admin/keys/{}/revoke", seg(&id));
                c.post(&path, json!({})).await?
            }
        },
        AdminCommand::Usage {
            tenant,
            since,
            until,
            format,
        } => {
            let mut query = vec![format!("format={}", url_escape(&format))];
            for (k, v) in [("tenant", tenant), ("since", since), ("until", until)] {
                if let Some(v) = v {
                    query.push(format!("{k}={}", url_escape(&v)));
                }
            }
            let out = c
                .get(&format!("/v1/admin/usage?{}", query.join("&")))
                .await?;
            match out {
                Value::String(text) => print!("{text}"),
                other => println!("{}", serde_json::to_string_pretty(&other)?),
            }
            return Ok(());
        }
        AdminCommand::Audit(a) => match a.action.as_deref() {
            Some("verify") => {
                let report = c.get("/v1/admin/audit/verify").await?;
                println!("{}", serde_json::to_string_pretty(&report)?);
                if report["ok"] != true {
                    return Err("the audit log does not verify".into());
                }
                return Ok(());
            }
            Some(other) => return Err(format!("unknown audit action '{other}' (verify)").into()),
            None => {
                let mut query = vec![format!("limit={}", a.limit)];
                for (k, v) in [
                    ("tenant", a.tenant),
                    ("principal", a.principal),
                    ("action", a.on),
                    ("since", a.since),
                    ("until", a.until),
                ] {
                    if let Some(v) = v {
                        query.push(format!("{k}={}", url_escape(&v)));
                    }
                }
                c.get(&format!("/v1/admin/audit?{}", query.join("&")))
                    .await?
            }
        },
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}
