//! In-process watch fan-out: the writer publishes each committed batch's events to
//! every watcher whose prefix matches, without ever blocking. Each watcher has a
//! bounded queue; one that is full is ended with [`StorageError::Unavailable`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use ferrokube_storage::{Result, Revision, StorageError, WatchEvent, WatchStream};
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::Shared;
use crate::read::{REPLAY_PAGE, replay_page};
use crate::util::KeyRange;

type Item = Result<WatchEvent>;

struct Subscriber {
    prefix: String,
    tx: mpsc::Sender<Item>,
}

/// The watchers of one store.
pub(crate) struct Hub {
    subscribers: Mutex<Vec<Subscriber>>,
    /// Every event with a revision up to this has been handed to the subscribers.
    published: AtomicI64,
    /// Events a watcher may hold unread before it is ended.
    buffer: usize,
}

impl Hub {
    pub fn new(published: Revision, buffer: usize) -> Hub {
        Hub {
            subscribers: Mutex::new(Vec::new()),
            published: AtomicI64::new(published),
            buffer: buffer.max(1),
        }
    }

    pub fn published(&self) -> Revision {
        self.published.load(Ordering::Acquire)
    }

    /// Registers a watcher; it receives every event published from now on.
    fn subscribe(&self, prefix: &str) -> mpsc::Receiver<Item> {
        // One slot more than the buffer, kept for the error that ends a full watcher.
        let (tx, rx) = mpsc::channel(self.buffer + 1);
        self.subscribers.lock().push(Subscriber {
            prefix: prefix.to_string(),
            tx,
        });
        rx
    }

    /// Hands a committed batch's events (in revision order) to the watchers; never
    /// blocks. Called by the writer only, so a watcher's free capacity cannot shrink
    /// between the check and the send.
    pub fn publish(&self, events: &[WatchEvent], revision: Revision) {
        {
            let mut subscribers = self.subscribers.lock();
            subscribers.retain(|sub| {
                if sub.tx.is_closed() {
                    return false;
                }
                for event in events {
                    if !event.key().is_some_and(|key| key.starts_with(&sub.prefix)) {
                        continue;
                    }
                    if sub.tx.capacity() <= 1 {
                        let _ = sub.tx.try_send(Err(StorageError::Unavailable(format!(
                            "watcher fell behind: more than {} events unread",
                            self.buffer
                        ))));
                        return false;
                    }
                    if sub.tx.try_send(Ok(event.clone())).is_err() {
                        return false;
                    }
                }
                true
            });
        }
        self.published.fetch_max(revision, Ordering::AcqRel);
    }

    /// Ends every watch (the store is closing): their streams end with an error.
    pub fn close(&self) {
        self.subscribers.lock().clear();
    }
}

/// One watch: history replay from the database, then live events, no gap, no
/// duplicate.
struct Cursor {
    shared: Arc<Shared>,
    range: KeyRange,
    rx: mpsc::Receiver<Item>,
    /// While replaying: the revision after which history is still to be read.
    replay_after: Option<Revision>,
    pending: VecDeque<WatchEvent>,
    /// The newest revision delivered (or skipped as not ours); later items only.
    last: Revision,
    progress_every: Option<Duration>,
    done: bool,
}

/// Starts a watch of `prefix` from `from_revision` (0: from now).
pub(crate) fn watch(shared: Arc<Shared>, prefix: &str, from_revision: Revision) -> WatchStream {
    // Subscribe first, then read history: every event is in one of the two.
    let rx = shared.hub.subscribe(prefix);
    let (replay_after, last) = if from_revision <= 0 {
        (None, shared.hub.published())
    } else {
        (Some(from_revision), from_revision)
    };
    let cursor = Cursor {
        range: KeyRange::prefix(prefix),
        progress_every: shared.options.progress_interval,
        shared,
        rx,
        replay_after,
        pending: VecDeque::new(),
        last,
        done: false,
    };
    futures::stream::unfold(cursor, |mut cursor| async move {
        let item = cursor.next().await?;
        Some((item, cursor))
    })
    .boxed()
}

impl Cursor {
    async fn next(&mut self) -> Option<Item> {
        loop {
            if self.done {
                return None;
            }
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            if let Some(after) = self.replay_after {
                let range = self.range.clone();
                let page = self
                    .shared
                    .read(move |tx| replay_page(tx, &range, after))
                    .await;
                match page {
                    Ok(events) => {
                        self.replay_after = (events.len() >= REPLAY_PAGE)
                            .then(|| events.last().map(WatchEvent::revision))
                            .flatten();
                        if let Some(event) = events.last() {
                            self.last = self.last.max(event.revision());
                        }
                        self.pending.extend(events);
                        continue;
                    }
                    Err(err) => return Some(self.end(err)),
                }
            }
            let received = match self.progress_every {
                None => self.rx.recv().await,
                Some(every) => match tokio::time::timeout(every, self.rx.recv()).await {
                    Ok(received) => received,
                    Err(_) => {
                        // Read the published mark before checking the queue: events up
                        // to it are in the queue by then, so an empty queue means none
                        // of ours is outstanding.
                        let published = self.shared.hub.published();
                        match self.rx.try_recv() {
                            Ok(item) => Some(item),
                            Err(mpsc::error::TryRecvError::Empty) => {
                                if published > self.last {
                                    self.last = published;
                                    return Some(Ok(WatchEvent::Progress(published)));
                                }
                                continue;
                            }
                            Err(mpsc::error::TryRecvError::Disconnected) => None,
                        }
                    }
                },
            };
            match received {
                Some(Ok(event)) => {
                    if event.revision() > self.last {
                        self.last = event.revision();
                        return Some(Ok(event));
                    }
                }
                Some(Err(err)) => return Some(self.end(err)),
                None => {
                    return Some(self.end(StorageError::Unavailable(
                        "the store was closed".to_string(),
                    )));
                }
            }
        }
    }

    fn end(&mut self, err: StorageError) -> Item {
        self.done = true;
        Err(err)
    }
}
