//! Notifications of new events (LISTEN agentenkit_events), so a process can
//! stream a thread's events live whichever process wrote them.

use agentenkit_core::ThreadId;
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::{AsyncMessage, NoTls};

use crate::{Result, Store};

/// The channel the `events_notify` trigger notifies.
pub const EVENTS_CHANNEL: &str = "agentenkit_events";

impl Store {
    /// Opens a dedicated connection listening for new events; yields the
    /// thread of each. The receiver ends when the connection is lost: the
    /// caller reconnects (and reads what it may have missed from the table).
    pub async fn listen_events(&self) -> Result<mpsc::Receiver<ThreadId>> {
        let (client, mut connection) = self.pg.connect(NoTls).await?;
        let (sender, receiver) = mpsc::channel(1024);
        // The connection lives as long as its client; the driver task keeps
        // the client once LISTEN has run, and ends (dropping the sender, so
        // the receiver sees the end) when the connection is lost or the
        // receiver is dropped.
        let (give_client, mut take_client) = oneshot::channel::<tokio_postgres::Client>();
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        tokio::spawn(async move {
            let mut client = None;
            loop {
                tokio::select! {
                    given = &mut take_client, if client.is_none() => match given {
                        Ok(c) => client = Some(c),
                        Err(_) => return,
                    },
                    _ = sender.closed() => return,
                    message = messages.next() => match message {
                        Some(Ok(AsyncMessage::Notification(n))) => {
                            if let Ok(thread) = n.payload().parse::<ThreadId>() {
                                if sender.send(thread).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "event listener connection lost");
                            return;
                        }
                        None => return,
                    },
                }
            }
        });
        client
            .batch_execute(&format!("LISTEN {EVENTS_CHANNEL}"))
            .await?;
        let _ = give_client.send(client);
        Ok(receiver)
    }
}
