//! `--max-concurrent-requests`, for both fronts: a request takes one of a listener's
//! slots while it is handled (until its response is made; the body is sent without one),
//! or, when none is free, gets the front's refusal at once rather than a place in a queue.
//! A tower layer with a named future: no allocation a request.

use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use futures_util::future::Either;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The layer: the listener's slots, and what a request finds when none is free (the
/// front's `503`, counted by the front).
#[derive(Clone)]
pub struct Slots {
    slots: Arc<Semaphore>,
    refuse: fn() -> Response,
}

impl Slots {
    /// Requests take slots of `slots`; one that finds none is answered `refuse()`.
    pub fn new(slots: Arc<Semaphore>, refuse: fn() -> Response) -> Self {
        Self { slots, refuse }
    }
}

impl<S> tower::Layer<S> for Slots {
    type Service = SlotService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SlotService {
            slots: self.clone(),
            inner,
        }
    }
}

/// A service behind [`Slots`].
#[derive(Clone)]
pub struct SlotService<S> {
    slots: Slots,
    inner: S,
}

impl<S> tower::Service<Request> for SlotService<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<Held<S::Future>, Ready<Result<Response, Infallible>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        match Arc::clone(&self.slots.slots).try_acquire_owned() {
            Ok(slot) => Either::Left(Held {
                serving: self.inner.call(req),
                _slot: slot,
            }),
            Err(_) => Either::Right(ready(Ok((self.slots.refuse)()))),
        }
    }
}

pin_project_lite::pin_project! {
    /// A request being handled, holding its slot until the response is made.
    pub struct Held<F> {
        #[pin]
        serving: F,
        _slot: OwnedSemaphorePermit,
    }
}

impl<F: Future> Future for Held<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().serving.poll(cx)
    }
}
