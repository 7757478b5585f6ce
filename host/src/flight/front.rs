//! The Flight service as clients reach it: Flight SQL ([`SqlService`], through arrow-flight's
//! dispatch) plus what that dispatch leaves out and the lancedb client uses: `PollFlightInfo`
//! (its SQL submits a statement by polling) and the `CancelFlightInfo` action.

use std::sync::Arc;

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, Criteria,
    Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo, SchemaResult,
    Ticket,
};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use super::SqlService;

pub struct Front(pub Arc<SqlService>);

type Sql = SqlService;

#[tonic::async_trait]
impl FlightService for Front {
    type HandshakeStream = <Sql as FlightService>::HandshakeStream;
    type ListFlightsStream = <Sql as FlightService>::ListFlightsStream;
    type DoGetStream = <Sql as FlightService>::DoGetStream;
    type DoPutStream = <Sql as FlightService>::DoPutStream;
    type DoExchangeStream = <Sql as FlightService>::DoExchangeStream;
    type DoActionStream = <Sql as FlightService>::DoActionStream;
    type ListActionsStream = <Sql as FlightService>::ListActionsStream;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        FlightService::handshake(&*self.0, request).await
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        FlightService::list_flights(&*self.0, request).await
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        FlightService::get_flight_info(&*self.0, request).await
    }

    /// Planning is all a statement's FlightInfo needs (it runs when its ticket is fetched),
    /// so the first poll already answers it complete: no further descriptor to poll.
    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        let info = FlightService::get_flight_info(&*self.0, request)
            .await?
            .into_inner();
        Ok(Response::new(PollInfo {
            info: Some(info),
            flight_descriptor: None,
            progress: Some(1.0),
            expiration_time: None,
        }))
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        FlightService::get_schema(&*self.0, request).await
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        FlightService::do_get(&*self.0, request).await
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        FlightService::do_put(&*self.0, request).await
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        FlightService::do_exchange(&*self.0, request).await
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        if request.get_ref().r#type == "CancelFlightInfo" {
            let cancel = CancelFlightInfoRequest::decode(&*request.get_ref().body)
                .map_err(|_| Status::invalid_argument("CancelFlightInfo needs a FlightInfo"))?;
            super::caller(&self.0.app, request.metadata()).await?;
            let info = cancel.info.unwrap_or_default();
            let status = if self.0.cancel(&info) {
                CancelStatus::Cancelled
            } else {
                CancelStatus::NotCancellable
            };
            let result = CancelFlightInfoResult {
                status: status as i32,
            };
            let body = arrow_flight::Result {
                body: result.encode_to_vec().into(),
            };
            return Ok(Response::new(Box::pin(futures::stream::iter([Ok(body)]))));
        }
        FlightService::do_action(&*self.0, request).await
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let listed = FlightService::list_actions(&*self.0, request).await?;
        let mut actions: Vec<Result<ActionType, Status>> =
            futures::StreamExt::collect(listed.into_inner()).await;
        actions.push(Ok(ActionType {
            r#type: "CancelFlightInfo".into(),
            description: "Cancel a running statement, named by its FlightInfo".into(),
        }));
        Ok(Response::new(Box::pin(futures::stream::iter(actions))))
    }
}
