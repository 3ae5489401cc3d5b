//! The gateway's HTTP service ([`App`]): the router, and beside it the one route most
//! requests take — reading a value of the default namespace, `GET`/`HEAD
//! /v1/objects/{*key}` — reached without it.
//!
//! The router finds a route by matching the path in a tree, records the match and the
//! path's parameters in the request, and sends it through boxed clones of the route's
//! services (one for the handler, one for each `route_layer`): on a 1 KiB read, a sixth of
//! the gateway's user-space instructions (`bench/instructions.sh`: 35.6k a request
//! through the router, 29.8k with the read route reached directly). Here the read route is
//! one concrete stack built from what the router's route is built from — the same
//! [`Outer`] layers, the same [`Edge`], the route's own authorisation ([`auth::admit`]
//! with the guard the route table gives it) and request slots, then the same handlers —
//! so what a request meets does not depend on the way it came (the unit tests in
//! `http::lanes` compare the two answer by answer). Only when the gateway is not in a
//! cluster: a member's reads pass the forwarding layers the router puts around its routes.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::Router;
use futures_util::future::Either;
use tower::{Layer, Service};

use super::auth::{self, Guard};
use super::edge::{self, Edge, EdgeChecks, Outer};
use super::{objects, AppState};
use crate::slots::{SlotService, Slots};

/// The path pattern of the route reached directly, as the route table spells it.
pub(super) const READ_ROUTE: &str = "/v1/objects/{*key}";

/// What the read route's requests start with (followed by a key of at least one byte).
const READ_PREFIX: &str = "/v1/objects/";

/// The read route's stack, outermost first.
type ReadLane = Outer<Edge<Guarded<SlotService<ReadValue>>>>;

/// Every route through the router, and the read route also reached directly.
#[derive(Clone)]
pub struct App {
    routed: Outer<Router>,
    read: Option<ReadLane>,
}

/// What the read route is built from: the guard of each method (none on an open
/// gateway) and the request slots the route table gives it, and the handlers' state.
pub(super) struct ReadRoute {
    /// `GET`'s guard.
    pub(super) get: Option<Guard>,
    /// `HEAD`'s guard.
    pub(super) head: Option<Guard>,
    /// The route's request slots.
    pub(super) slots: Slots,
    /// The handlers' state.
    pub(super) state: AppState,
}

impl App {
    /// `router` with [`Edge`] on every route inside the [`Outer`] layers, and, when
    /// `read` is given, the read route's stack beside it.
    pub(super) fn new(router: Router, checks: EdgeChecks, read: Option<ReadRoute>) -> Self {
        let read = read.map(|route| {
            let guarded = Guarded {
                get: route.get,
                head: route.head,
                inner: route.slots.layer(ReadValue(route.state)),
            };
            edge::outer(checks.around(READ_ROUTE, guarded))
        });
        Self {
            read,
            routed: edge::outer(router.layer(checks)),
        }
    }
}

/// Whether the router would send `req` to the read route: `GET` or `HEAD` of
/// `/v1/objects/` followed by a key (an empty key has a route of its own).
pub(super) fn reads_a_value(req: &Request) -> bool {
    matches!(*req.method(), Method::GET | Method::HEAD)
        && req
            .uri()
            .path()
            .strip_prefix(READ_PREFIX)
            .is_some_and(|key| !key.is_empty())
}

#[cfg(test)]
impl App {
    /// The same service with every request through the router.
    pub(super) fn routed_only(&self) -> Self {
        Self {
            routed: self.routed.clone(),
            read: None,
        }
    }
}

impl Service<Request> for App {
    type Response = <Outer<Router> as Service<Request>>::Response;
    type Error = Infallible;
    type Future =
        Either<<ReadLane as Service<Request>>::Future, <Outer<Router> as Service<Request>>::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        if Service::<Request>::poll_ready(&mut self.routed, cx).is_pending() {
            return Poll::Pending;
        }
        match &mut self.read {
            Some(read) => read.poll_ready(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, req: Request) -> Self::Future {
        match &mut self.read {
            Some(read) if reads_a_value(&req) => Either::Left(read.call(req)),
            _ => Either::Right(self.routed.call(req)),
        }
    }
}

/// The read route's authorisation: [`auth::admit`] with the route's guard for the
/// request's method, as the router's `from_fn` layer calls it.
#[derive(Clone)]
pub struct Guarded<S> {
    get: Option<Guard>,
    head: Option<Guard>,
    inner: S,
}

impl<S> Service<Request> for Guarded<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, Ready<Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let guard = match *req.method() {
            Method::HEAD => self.head.as_ref(),
            _ => self.get.as_ref(),
        };
        match guard.and_then(|g| auth::admit(g, &mut req)) {
            None => Either::Left(self.inner.call(req)),
            Some(refusal) => Either::Right(ready(Ok(refusal))),
        }
    }
}

/// The read route's handlers.
#[derive(Clone)]
pub struct ReadValue(AppState);

impl Service<Request> for ReadValue {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let state = State(self.0.clone());
        Box::pin(async move {
            let resp = match *req.method() {
                Method::HEAD => objects::head_object(state, req).await,
                _ => objects::get_object(state, req).await,
            };
            Ok(resp.into_response())
        })
    }
}
