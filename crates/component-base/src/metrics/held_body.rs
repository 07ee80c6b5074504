//! A response body that holds a value until the body is done with: written out, or
//! dropped when the client went away. The servers' request metrics put their
//! in-flight guard or their end-of-request observation there, so that a streamed
//! answer (a watch, a followed log) counts for as long as it streams, as upstream's
//! handlers, which run until they have written their answer.

use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, SizeHint};

/// `body`, with `held` dropped when it is. Everything hyper asks of a body is the
/// inner body's answer, its size hint too: without it a response of known length
/// would go out chunked.
pub struct HeldBody<B, H> {
    body: B,
    _held: H,
}

impl<B, H> HeldBody<B, H> {
    pub fn new(body: B, held: H) -> Self {
        HeldBody { body, _held: held }
    }
}

impl<B: Body + Unpin, H: Unpin> Body for HeldBody<B, H> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_size_is_the_inner_bodys_and_the_value_goes_with_the_body() {
        let dropped = Arc::new(AtomicBool::new(false));
        let body = HeldBody::new(
            http_body_util::Full::new(bytes::Bytes::from_static(b"twelve bytes")),
            Flag(dropped.clone()),
        );
        assert_eq!(body.size_hint().exact(), Some(12));
        assert!(!body.is_end_stream());
        assert!(!dropped.load(Ordering::SeqCst));
        drop(body);
        assert!(dropped.load(Ordering::SeqCst));
    }
}
