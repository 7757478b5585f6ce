//! The Flight SQL service: statements, prepared statements with parameters, catalog calls,
//! SQL info, cancellation; everything else is answered `unimplemented` by arrow-flight.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any,
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandPreparedStatementQuery, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse,
    IpcMessage, SchemaAsIpc, Ticket,
};
use arrow_schema::{Field, Schema};
use base64::Engine;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use super::handle::Handle;
use super::{caller, http_status, status};
use crate::App;
use crate::http::pipeline::overload::Admitted;
use crate::sql::{self, Limits, listing, names::CATALOG};

type DoGetStream = <SqlService as FlightService>::DoGetStream;

/// The Flight SQL service: its [`State`], which is `Send + Sync` (proven below).
pub struct SqlService(State);

// arrow-flight implements `FlightService` for every `FlightSqlService`, and that trait needs
// `Send + Sync`: the signature of each method (its stream types go through that impl) makes
// rustc prove them again, and it does not share the proof between method bodies. Structurally
// that proof walks all of `App` (lance, DataFusion, wasmtime, ONNX Runtime...): ~6 s of type
// checking per method, 2 of the 5 minutes this crate takes to compile (`-Z self-profile`,
// 2026-11-29). So it is proven once, here, of `State`, which holds every field...
const _: () = {
    fn send_sync<T: Send + Sync>() {}
    let _ = send_sync::<State>;
};
// SAFETY: ...and `SqlService` is nothing but a `State`, so it is `Send` and `Sync` as `State`
// is, which the assertion above checks at compile time.
unsafe impl Send for SqlService {}
// SAFETY: as for `Send` above.
unsafe impl Sync for SqlService {}

impl std::ops::Deref for SqlService {
    type Target = State;
    fn deref(&self) -> &State {
        &self.0
    }
}

/// What the service holds.
pub struct State {
    pub(super) app: Arc<App>,
    limits: Limits,
    /// Runs in progress on this node, by handle id, for cancellation.
    running: Arc<Mutex<HashMap<String, CancellationToken>>>,
    /// Statements cancelled before they ran (a client may cancel what it submitted before it
    /// fetches the answer), by handle id, with when; forgotten after [`CANCELLED_FOR`].
    cancelled: Mutex<HashMap<String, std::time::Instant>>,
    planned: Mutex<HashMap<String, Planned>>,
}

const CANCELLED_FOR: std::time::Duration = std::time::Duration::from_secs(3600);

/// How long a plan made for a FlightInfo waits for its DoGet, and how many wait at most.
const PLANNED_FOR: std::time::Duration = std::time::Duration::from_secs(30);
const MAX_PLANNED: usize = 256;

/// A statement planned for a FlightInfo, kept for the DoGet that usually follows at once, so
/// that a statement is planned once rather than twice. Only the same caller (tenant,
/// credential, database, default namespace) may take it; anyone else's DoGet plans anew.
struct Planned {
    owner: String,
    at: std::time::Instant,
    prepared: sql::Prepared,
}

fn owner(
    caller: &crate::http::pipeline::auth::Caller,
    metadata: &tonic::metadata::MetadataMap,
) -> String {
    format!(
        "{}\u{1f}{}\u{1f}{:?}\u{1f}{:?}",
        caller.tenant(),
        caller.grant.principal,
        caller.database,
        super::default_namespace(metadata)
    )
}

impl SqlService {
    pub fn new(app: Arc<App>, limits: Limits) -> Self {
        Self(State {
            app,
            limits,
            running: Default::default(),
            cancelled: Default::default(),
            planned: Default::default(),
        })
    }

    pub fn into_server(self) -> FlightServiceServer<super::front::Front> {
        FlightServiceServer::new(super::front::Front(Arc::new(self)))
    }

    /// Cancels the statements `info`'s tickets name: a run in progress on this node stops with
    /// a cancellation error, one not started yet will not start (on this node). Whether
    /// `info` named any statement of this server.
    pub(super) fn cancel(&self, info: &FlightInfo) -> bool {
        let mut found = false;
        for endpoint in &info.endpoint {
            let Some(ticket) = &endpoint.ticket else {
                continue;
            };
            let Some(handle) = ticket_handle(&ticket.ticket) else {
                continue;
            };
            found = true;
            if let Some(token) = self.running.lock().unwrap().get(&handle.id) {
                token.cancel();
                continue;
            }
            let mut cancelled = self.cancelled.lock().unwrap();
            cancelled.retain(|_, at| at.elapsed() < CANCELLED_FOR);
            cancelled.insert(handle.id.clone(), std::time::Instant::now());
        }
        found
    }

    /// Plans `sql` for the caller of `metadata`, admitted like an HTTP request (in-flight
    /// bounds, then a fair run slot for the planning, which reads the tables' manifests).
    async fn prepare(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        sql: &str,
    ) -> Result<(sql::Prepared, Admitted), Status> {
        let caller = caller(&self.app, metadata).await?;
        self.prepare_for(&caller, metadata, sql).await
    }

    async fn prepare_for(
        &self,
        caller: &crate::http::pipeline::auth::Caller,
        metadata: &tonic::metadata::MetadataMap,
        sql: &str,
    ) -> Result<(sql::Prepared, Admitted), Status> {
        let started = std::time::Instant::now();
        let planned = self.plan(caller, metadata, sql).await;
        let code = match &planned {
            Ok(_) => 200,
            Err(e) => http_status(e),
        };
        let seconds = started.elapsed().as_secs_f64();
        self.app
            .metrics
            .record("flight/plan", caller.tenant(), code, seconds);
        planned
    }

    async fn plan(
        &self,
        caller: &crate::http::pipeline::auth::Caller,
        metadata: &tonic::metadata::MetadataMap,
        sql: &str,
    ) -> Result<(sql::Prepared, Admitted), Status> {
        let admitted = self.admit(caller.tenant())?;
        let default_namespace = super::default_namespace(metadata);
        let _run = self
            .app
            .admission
            .run_slot(caller.tenant())
            .await
            .ok_or_else(|| {
                Status::unavailable(format!(
                    "tenant '{}' waited too long for the server to be free; slow down",
                    caller.tenant()
                ))
            })?;
        let prepared = sql::prepare(&self.app, caller, &default_namespace, sql, &self.limits)
            .await
            .map_err(status)?;
        Ok((prepared, admitted))
    }

    /// Plans `sql` for a FlightInfo and keeps the plan for the DoGet of `id`.
    async fn plan_for_info(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        sql: &str,
        id: &str,
    ) -> Result<arrow_schema::SchemaRef, Status> {
        let caller = caller(&self.app, metadata).await?;
        let (prepared, _admitted) = self.prepare_for(&caller, metadata, sql).await?;
        let schema = prepared.schema();
        let mut planned = self.planned.lock().unwrap();
        planned.retain(|_, p| p.at.elapsed() < PLANNED_FOR);
        if planned.len() < MAX_PLANNED {
            let owner = owner(&caller, metadata);
            let at = std::time::Instant::now();
            planned.insert(
                id.to_string(),
                Planned {
                    owner,
                    at,
                    prepared,
                },
            );
        }
        Ok(schema)
    }

    fn admit(&self, tenant: &str) -> Result<Admitted, Status> {
        let limit = self
            .app
            .auth
            .keys()
            .tenant_settings(tenant)
            .and_then(|s| s.max_in_flight);
        self.app
            .admission
            .admit(&self.app.metrics, tenant, limit)
            .map_err(Status::unavailable)
    }

    /// A FlightInfo whose one endpoint's ticket is `ticket`, answering `schema`.
    fn info(
        schema: &Schema,
        ticket: Vec<u8>,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let info = FlightInfo::new()
            .try_with_schema(schema)
            .map_err(|e| Status::internal(e.to_string()))?
            .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
            .with_descriptor(descriptor);
        Ok(Response::new(info))
    }

    /// Runs `handle` for the caller of `metadata` and streams its answer as Flight data.
    async fn run(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        handle: Handle,
    ) -> Result<Response<DoGetStream>, Status> {
        if self.cancelled.lock().unwrap().contains_key(&handle.id) {
            return Err(Status::cancelled("the statement was cancelled"));
        }
        let caller = caller(&self.app, metadata).await?;
        let kept = self.planned.lock().unwrap().remove(&handle.id);
        let (prepared, admitted) = match kept {
            Some(p) if p.owner == owner(&caller, metadata) && p.at.elapsed() < PLANNED_FOR => {
                (p.prepared, self.admit(caller.tenant())?)
            }
            _ => self.prepare_for(&caller, metadata, &handle.sql).await?,
        };
        let schema = prepared.schema();
        let batches = prepared.execute(handle.values()?).await.map_err(status)?;
        let token = CancellationToken::new();
        // Held, with the in-flight slots, for as long as the answer streams.
        let tenant = caller.grant.tenant.clone();
        let run = Running::new(
            self.running.clone(),
            handle.id.clone(),
            token.clone(),
            admitted,
        )
        .counted(self.app.clone(), tenant);
        // A statement is a request of the tenant's usage, its rows rows read.
        let usage = self.app.hosting.counters(caller.tenant());
        if let Some(u) = &usage {
            u.add(lancet_hosting::usage::Measure::Requests, 1);
        }
        let batches = batches
            .inspect_ok(move |b| {
                if let Some(u) = &usage {
                    u.add(
                        lancet_hosting::usage::Measure::RowsRead,
                        b.num_rows() as u64,
                    );
                }
            })
            .map_err(|e| FlightError::Tonic(Box::new(status(e))))
            .boxed();
        // Ends at the last batch, or with an error at a cancellation; `run` leaves the
        // registry when the stream is dropped, however it ends.
        let cut = futures::stream::unfold(
            (batches, run, false),
            |(mut batches, run, done)| async move {
                if done {
                    return None;
                }
                tokio::select! {
                    _ = run.token.cancelled() => {
                        let err = FlightError::Tonic(Box::new(Status::cancelled(
                            "the statement was cancelled",
                        )));
                        run.outcome.store(499, std::sync::atomic::Ordering::Relaxed);
                        Some((Err(err), (batches, run, true)))
                    }
                    next = batches.next() => {
                        let code = match &next {
                            None => Some(200),
                            Some(Err(FlightError::Tonic(status))) => Some(http_status(status)),
                            Some(Err(_)) => Some(500),
                            Some(Ok(_)) => None,
                        };
                        if let Some(code) = code {
                            run.outcome.store(code, std::sync::atomic::Ordering::Relaxed);
                        }
                        next.map(|item| (item, (batches, run, false)))
                    }
                }
            },
        );
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(cut)
            .map_err(|e| match e {
                FlightError::Tonic(s) => *s,
                other => Status::internal(other.to_string()),
            });
        Ok(Response::new(Box::pin(stream)))
    }

    /// The FlightInfo of a catalog call: its answer's schema, and the command itself as the
    /// ticket (answered from the catalog when it is fetched). Callers must hold a credential.
    async fn catalog_info(
        &self,
        request: Request<FlightDescriptor>,
        schema: &Schema,
        command: Any,
    ) -> Result<Response<FlightInfo>, Status> {
        caller(&self.app, request.metadata()).await?;
        Self::info(schema, command.encode_to_vec(), request.into_inner())
    }

    fn encoded(
        schema: arrow_schema::SchemaRef,
        batch: Result<arrow_array::RecordBatch, FlightError>,
    ) -> Response<DoGetStream> {
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(futures::stream::once(async move { batch }))
            .map_err(|e| Status::internal(e.to_string()));
        Response::new(Box::pin(stream))
    }
}

fn table_types_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new(
        "table_type",
        arrow_schema::DataType::Utf8,
        false,
    )]))
}

/// A run in the registry of cancellable runs, for as long as its answer streams.
struct Running {
    registry: Arc<Mutex<HashMap<String, CancellationToken>>>,
    id: String,
    token: CancellationToken,
    _admitted: Admitted,
    /// Where the run is counted when it ends (`flight/run`), and how it ended: 200, the
    /// status of the error that cut it, or 499 when cancelled (or the client went away).
    metrics: Option<(Arc<App>, String, std::time::Instant)>,
    outcome: std::sync::atomic::AtomicU16,
}

impl Running {
    fn new(
        registry: Arc<Mutex<HashMap<String, CancellationToken>>>,
        id: String,
        token: CancellationToken,
        admitted: Admitted,
    ) -> Self {
        registry.lock().unwrap().insert(id.clone(), token.clone());
        Self {
            registry,
            id,
            token,
            _admitted: admitted,
            metrics: None,
            // Dropped before its last batch: the client went away.
            outcome: std::sync::atomic::AtomicU16::new(499),
        }
    }

    fn counted(mut self, app: Arc<App>, tenant: String) -> Self {
        self.metrics = Some((app, tenant, std::time::Instant::now()));
        self
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.registry.lock().unwrap().remove(&self.id);
        if let Some((app, tenant, started)) = &self.metrics {
            let code = self.outcome.load(std::sync::atomic::Ordering::Relaxed);
            let seconds = started.elapsed().as_secs_f64();
            app.metrics.record("flight/run", tenant, code, seconds);
        }
    }
}

fn sql_info() -> &'static SqlInfoData {
    static INFO: std::sync::OnceLock<SqlInfoData> = std::sync::OnceLock::new();
    INFO.get_or_init(|| {
        let mut b = SqlInfoDataBuilder::new();
        b.append(SqlInfo::FlightSqlServerName, "Lancet");
        b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
        b.append(SqlInfo::FlightSqlServerArrowVersion, "1.5");
        b.append(SqlInfo::FlightSqlServerReadOnly, true);
        b.append(SqlInfo::FlightSqlServerSql, true);
        b.append(SqlInfo::FlightSqlServerSubstrait, false);
        b.append(SqlInfo::FlightSqlServerTransaction, 0i32);
        b.append(SqlInfo::FlightSqlServerCancel, true);
        b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
        b.append(SqlInfo::SqlDdlCatalog, false);
        b.append(SqlInfo::SqlDdlSchema, false);
        b.append(SqlInfo::SqlDdlTable, false);
        b.build().expect("static SQL info builds")
    })
}

#[tonic::async_trait]
impl FlightSqlService for SqlService {
    type FlightService = SqlService;

    /// HTTP Basic with the API key as password (any user name): the answer hands the key back
    /// as the bearer token clients send from then on. Bearer credentials are checked too.
    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .trim()
            .to_string();
        let key = if let Some(basic) = header.strip_prefix("Basic ") {
            // Padded or not (Go's Flight client sends it unpadded).
            let decoded = base64::engine::general_purpose::STANDARD_NO_PAD
                .decode(basic.trim().trim_end_matches('='))
                .map_err(|_| Status::unauthenticated("Basic credentials are not base64"))?;
            let text = String::from_utf8(decoded)
                .map_err(|_| Status::unauthenticated("Basic credentials are not text"))?;
            text.split_once(':')
                .map(|(_, password)| password.to_string())
                .ok_or_else(|| Status::unauthenticated("Basic credentials need 'user:key'"))?
        } else if let Some(token) = header.strip_prefix("Bearer ") {
            token.trim().to_string()
        } else {
            return Err(Status::unauthenticated(
                "handshake with 'authorization: Basic <user:key>' or 'Bearer <key>'",
            ));
        };
        self.app
            .auth
            .bearer(&key)
            .map_err(|e| Status::unauthenticated(e.0))?;
        let answer = HandshakeResponse {
            protocol_version: 0,
            payload: Default::default(),
        };
        let mut response: Response<
            Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>,
        > = Response::new(Box::pin(futures::stream::iter([Ok(answer)])));
        let value = format!("Bearer {key}")
            .parse()
            .map_err(|_| Status::unauthenticated("the key is not valid header text"))?;
        response.metadata_mut().insert("authorization", value);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let handle = Handle::new(query.query);
        let schema = self
            .plan_for_info(request.metadata(), &handle.sql, &handle.id)
            .await?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.encode(),
        };
        Self::info(
            &schema,
            ticket.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let handle = Handle::decode(&ticket.statement_handle)?;
        self.run(request.metadata(), handle).await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let (prepared, _admitted) = self.prepare(request.metadata(), &query.query).await?;
        let params = prepared.parameters().map_err(status)?;
        let param_schema = Schema::new(
            params
                .iter()
                .map(|(name, ty)| {
                    Field::new(
                        name,
                        ty.clone().unwrap_or(arrow_schema::DataType::Null),
                        true,
                    )
                })
                .collect::<Vec<_>>(),
        );
        let ipc = |schema: &Schema| -> Result<bytes::Bytes, Status> {
            let IpcMessage(bytes) = SchemaAsIpc::new(schema, &Default::default())
                .try_into()
                .map_err(|e: arrow_schema::ArrowError| Status::internal(e.to_string()))?;
            Ok(bytes)
        };
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: Handle::new(query.query).encode(),
            dataset_schema: ipc(&prepared.schema())?,
            parameter_schema: ipc(&param_schema)?,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        // Handles hold no server state.
        Ok(())
    }

    /// Binds parameters: the answer is a new handle carrying them (Flight SQL's stateless
    /// prepared statements), which the client runs from then on.
    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let handle = Handle::decode(&query.prepared_statement_handle)?;
        caller(&self.app, request.metadata()).await?;
        let batches = super::handle::read_parameters(request.into_inner()).await?;
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let bound = match batches.into_iter().find(|b| b.num_rows() > 0) {
            Some(batch) if rows == 1 => handle.bind(&batch)?,
            Some(_) => {
                return Err(Status::invalid_argument(format!(
                    "bind one row of parameters ({rows} given): Lancet runs one set at a time"
                )));
            }
            None => handle,
        };
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(bound.encode()),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let mut handle = Handle::decode(&query.prepared_statement_handle)?;
        // Each run gets its own id, so one can be cancelled without the others.
        handle.id = uuid::Uuid::new_v4().simple().to_string();
        let schema = self
            .plan_for_info(request.metadata(), &handle.sql, &handle.id)
            .await?;
        let ticket = CommandPreparedStatementQuery {
            prepared_statement_handle: handle.encode(),
        };
        Self::info(
            &schema,
            ticket.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let handle = Handle::decode(&query.prepared_statement_handle)?;
        self.run(request.metadata(), handle).await
    }

    async fn do_put_statement_update(
        &self,
        _query: CommandStatementUpdate,
        _request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        Err(Status::invalid_argument(
            "SQL is read-only here: DDL and DML statements are refused (write through the \
             REST API)",
        ))
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        _request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        // ActionCancelQueryResult.CancelResult (the enum is not re-exported by arrow-flight).
        const CANCELLED: i32 = 1;
        const NOT_CANCELLABLE: i32 = 3;
        let info = FlightInfo::decode(&*query.info).map_err(|_| {
            Status::invalid_argument("CancelQuery needs the statement's FlightInfo")
        })?;
        let found = self.cancel(&info);
        // Not found: not running here (done, not started yet, or on another replica).
        let result = if found { CANCELLED } else { NOT_CANCELLABLE };
        Ok(ActionCancelQueryResult { result })
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.into_builder().schema();
        self.catalog_info(request, &schema, query.as_any()).await
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        caller(&self.app, request.metadata()).await?;
        let mut builder = query.into_builder();
        builder.append(CATALOG);
        let schema = builder.schema();
        Ok(Self::encoded(schema, builder.build()))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.catalog_info(request, &schema, query.as_any()).await
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = caller(&self.app, request.metadata()).await?;
        let mut builder = query.into_builder();
        for schema in listing::schemas(&caller).await.map_err(status)? {
            builder.append(CATALOG, schema);
        }
        let schema = builder.schema();
        Ok(Self::encoded(schema, builder.build()))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder().schema();
        self.catalog_info(request, &schema, query.as_any()).await
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let caller = caller(&self.app, request.metadata()).await?;
        let with_schema = query.include_schema;
        let mut builder = query.into_builder();
        for (schema, table) in listing::tables(&caller).await.map_err(status)? {
            let table_schema = if with_schema {
                let id = caller
                    .resolve(&listing::table_id(&schema, &table))
                    .map_err(status)?;
                let location = caller.catalog.locate(&id).await.map_err(status)?;
                let ds = self
                    .app
                    .store
                    .read(&location, &crate::store::At::default())
                    .await
                    .map_err(status)?;
                Schema::from(ds.schema())
            } else {
                Schema::empty()
            };
            builder
                .append(CATALOG, &schema, &table, "TABLE", &table_schema)
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        let schema = builder.schema();
        Ok(Self::encoded(schema, builder.build()))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = table_types_schema();
        self.catalog_info(request, &schema, query.as_any()).await
    }

    async fn do_get_table_types(
        &self,
        _query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        caller(&self.app, request.metadata()).await?;
        let schema = table_types_schema();
        let batch = arrow_array::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow_array::StringArray::from(vec!["TABLE"]))],
        )
        .map_err(FlightError::from);
        Ok(Self::encoded(schema, batch))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(sql_info()).schema();
        Self::info(
            &schema,
            query.as_any().encode_to_vec(),
            request.into_inner(),
        )
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let builder = query.into_builder(sql_info());
        let schema = builder.schema();
        Ok(Self::encoded(schema, builder.build()))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}

/// The statement handle inside a ticket this service issued, if it is one.
fn ticket_handle(ticket: &[u8]) -> Option<Handle> {
    let any = Any::decode(ticket).ok()?;
    if let Ok(Some(t)) = any.unpack::<TicketStatementQuery>() {
        return Handle::decode(&t.statement_handle).ok();
    }
    if let Ok(Some(p)) = any.unpack::<CommandPreparedStatementQuery>() {
        return Handle::decode(&p.prepared_statement_handle).ok();
    }
    None
}
