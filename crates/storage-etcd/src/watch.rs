//! Watches: one etcd watch stream per [`WatchStream`], read by a task of its own that
//! translates etcd events and hands them over through a bounded channel.
//!
//! The task never waits for the reader: when the channel is full it ends the watch
//! ("watcher fell behind"), so a reader that stalls costs a bounded buffer and nothing
//! else. Errors that end a watch travel beside the channel (a oneshot), so they come
//! out after every event already buffered, as the last item. Dropping the stream
//! aborts the task, which drops (and so cancels) the etcd watch.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use etcd_client::{EventType, WatchClient, WatchOptions, WatchResponse};
use ferrokube_storage::{KeyValue, Result, Revision, StorageError, WatchEvent, WatchStream};
use futures::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;

use crate::error::plain;
use crate::keys::user_key;

pub(crate) struct Params {
    pub start_key: Vec<u8>,
    pub end_key: Vec<u8>,
    pub storage_prefix: String,
    /// The caller's revision (events after it), for error messages.
    pub from_revision: Revision,
    /// etcd's start revision: the first revision delivered.
    pub start_revision: Revision,
    pub buffer: usize,
    pub create_timeout: Duration,
}

/// Creates the etcd watch, waits until etcd confirms it, and starts the forwarding task.
pub(crate) async fn start(mut client: WatchClient, params: Params) -> Result<WatchStream> {
    let options = WatchOptions::new()
        .with_range(params.end_key.clone())
        .with_start_revision(params.start_revision)
        .with_prev_key()
        .with_progress_notify();
    let created = async {
        let mut stream = client
            .watch(params.start_key.clone(), Some(options))
            .await
            .map_err(plain)?;
        let first = stream.message().await.map_err(plain)?;
        Ok::<_, StorageError>((stream, first))
    };
    let (stream, first) = tokio::time::timeout(params.create_timeout, created)
        .await
        .map_err(|_| StorageError::Unavailable("etcd did not confirm a new watch".into()))??;
    let translator = Translator {
        storage_prefix: params.storage_prefix,
        from_revision: params.from_revision,
    };
    let first = first.ok_or_else(|| StorageError::Unavailable("etcd closed a new watch".into()))?;
    if let Some(err) = translator.ended(&first) {
        return Err(err);
    }
    let (events_tx, events_rx) = mpsc::channel(params.buffer);
    let (end_tx, end_rx) = oneshot::channel();
    let task = tokio::spawn(forward(stream, translator, first, events_tx, end_tx));
    Ok(Box::pin(EventStream {
        events: events_rx,
        end: Some(end_rx),
        task: task.abort_handle(),
    }))
}

struct Translator {
    storage_prefix: String,
    from_revision: Revision,
}

impl Translator {
    fn convert(&self, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
        let key = user_key(&self.storage_prefix, kv.key()).ok_or_else(|| {
            StorageError::Internal(format!(
                "etcd watch delivered key {:?} outside the storage prefix",
                String::from_utf8_lossy(kv.key())
            ))
        })?;
        Ok(KeyValue {
            key,
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
        })
    }

    /// The error a response ends the watch with, if it does.
    fn ended(&self, resp: &WatchResponse) -> Option<StorageError> {
        if resp.compact_revision() != 0 {
            return Some(StorageError::Expired {
                requested: self.from_revision,
                compacted: resp.compact_revision(),
            });
        }
        if resp.canceled() {
            return Some(StorageError::Unavailable(format!(
                "etcd canceled the watch: {}",
                resp.cancel_reason()
            )));
        }
        None
    }

    /// The events of one response (a progress notification when it has none).
    fn events(&self, resp: &WatchResponse) -> Result<Vec<WatchEvent>> {
        if resp.events().is_empty() {
            if resp.created() {
                return Ok(Vec::new());
            }
            let revision = resp.header().map_or(0, |h| h.revision());
            return Ok(vec![WatchEvent::Progress(revision)]);
        }
        resp.events()
            .iter()
            .map(|event| {
                let kv = event
                    .kv()
                    .ok_or_else(|| StorageError::Internal("etcd event without a key".into()))?;
                let current = self.convert(kv)?;
                let previous = || {
                    event
                        .prev_kv()
                        .map(|kv| self.convert(kv))
                        .unwrap_or_else(|| {
                            Err(StorageError::Internal(format!(
                                "etcd event at revision {} without the previous value",
                                kv.mod_revision()
                            )))
                        })
                };
                Ok(match event.event_type() {
                    EventType::Put if current.create_revision == current.mod_revision => {
                        WatchEvent::Added(current)
                    }
                    EventType::Put => WatchEvent::Modified {
                        current,
                        previous: previous()?,
                    },
                    EventType::Delete => WatchEvent::Deleted {
                        revision: kv.mod_revision(),
                        previous: previous()?,
                    },
                })
            })
            .collect()
    }
}

/// Reads etcd until the watch ends or the reader goes away; sends the reason it ended.
async fn forward(
    mut stream: etcd_client::WatchStream,
    translator: Translator,
    first: WatchResponse,
    events: mpsc::Sender<WatchEvent>,
    end: oneshot::Sender<StorageError>,
) {
    let mut resp = first;
    let reason = loop {
        if let Some(err) = translator.ended(&resp) {
            break err;
        }
        match translator.events(&resp) {
            Ok(batch) => {
                for event in batch {
                    match events.try_send(event) {
                        Ok(()) => {}
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            tracing::warn!(
                                from_revision = translator.from_revision,
                                "etcd watch ended: the watcher fell behind"
                            );
                            // Sent as the last item, after the buffered events.
                            let _ =
                                end.send(StorageError::Unavailable("watcher fell behind".into()));
                            return;
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
            }
            Err(err) => break err,
        }
        resp = tokio::select! {
            _ = events.closed() => return,
            message = stream.message() => match message {
                Ok(Some(next)) => next,
                Ok(None) => break StorageError::Unavailable("etcd closed the watch stream".into()),
                Err(err) => break StorageError::Unavailable(format!("etcd watch broken: {err}")),
            },
        };
    };
    tracing::debug!(from_revision = translator.from_revision, %reason, "etcd watch ended");
    let _ = end.send(reason);
}

/// The [`WatchStream`] handed out: buffered events, then the reason the watch ended.
struct EventStream {
    events: mpsc::Receiver<WatchEvent>,
    end: Option<oneshot::Receiver<StorageError>>,
    task: AbortHandle,
}

impl Stream for EventStream {
    type Item = Result<WatchEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match this.events.poll_recv(cx) {
            Poll::Ready(Some(event)) => return Poll::Ready(Some(Ok(event))),
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => {}
        }
        let Some(end) = this.end.as_mut() else {
            return Poll::Ready(None);
        };
        match Pin::new(end).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(reason) => {
                this.end = None;
                Poll::Ready(reason.ok().map(Err))
            }
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn buffered_events_come_before_the_ending_error() {
        let (tx, rx) = mpsc::channel(4);
        let (end_tx, end_rx) = oneshot::channel();
        let task = tokio::spawn(async {});
        let mut stream = EventStream {
            events: rx,
            end: Some(end_rx),
            task: task.abort_handle(),
        };
        tx.send(WatchEvent::Progress(3)).await.unwrap();
        tx.send(WatchEvent::Progress(4)).await.unwrap();
        end_tx
            .send(StorageError::Unavailable("watcher fell behind".into()))
            .unwrap();
        drop(tx);
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            WatchEvent::Progress(3)
        );
        assert_eq!(
            stream.next().await.unwrap().unwrap(),
            WatchEvent::Progress(4)
        );
        assert!(matches!(
            stream.next().await,
            Some(Err(StorageError::Unavailable(_)))
        ));
        assert!(stream.next().await.is_none());
    }

    #[tokio::test]
    async fn a_watch_ended_without_reason_just_ends() {
        let (tx, rx) = mpsc::channel::<WatchEvent>(1);
        let (end_tx, end_rx) = oneshot::channel::<StorageError>();
        let task = tokio::spawn(async {});
        let mut stream = EventStream {
            events: rx,
            end: Some(end_rx),
            task: task.abort_handle(),
        };
        drop((tx, end_tx));
        assert!(stream.next().await.is_none());
    }
}
