//! What a session does beside calls: a server's tasks (the Tasks
//! extension, SEP-2663: `tasks/get`, `tasks/update`, `tasks/cancel`), and
//! hearing that its tools changed (`subscriptions/listen`).

use rmcp::model::{
    CancelTaskParams, DetailedTask, GetTaskParams, InputResponses, UpdateTaskParams,
};

use super::{Server, ServerError, Session};

impl Server {
    /// `tasks/get`: where the server's task `task_id` stands.
    pub async fn get_task(&self, task_id: &str) -> Result<DetailedTask, ServerError> {
        let params = GetTaskParams::new(task_id);
        let got = self
            .request("tasks/get", |session| async move {
                session.service.get_task(params).await
            })
            .await?;
        Ok(got.task)
    }

    /// `tasks/update`: a person's replies to what task `task_id` asked.
    pub async fn update_task(
        &self,
        task_id: &str,
        responses: InputResponses,
    ) -> Result<(), ServerError> {
        let params = UpdateTaskParams::new(task_id, responses);
        self.request("tasks/update", |session| async move {
            session.service.update_task(params).await
        })
        .await
    }

    /// `tasks/cancel`: asks the server to give task `task_id` up.
    pub async fn cancel_task(&self, task_id: &str) -> Result<(), ServerError> {
        let params = CancelTaskParams::new(task_id);
        self.request("tasks/cancel", |session| async move {
            session.service.cancel_task(params).await
        })
        .await
    }

    /// For as long as `session` lasts, hears the server say its tools
    /// changed (`subscriptions/listen`, 2026-07-28), when it says it
    /// would. (A session of an earlier revision is not listened to.)
    pub(super) fn listen(&self, session: &Session) {
        let says = session.service.peer_info().is_some_and(|info| {
            info.capabilities
                .tools
                .as_ref()
                .and_then(|tools| tools.list_changed)
                == Some(true)
        });
        if !says || !session.modern {
            return;
        }
        let peer = session.service.peer().clone();
        let changed = self.tools_changed.clone();
        let server = self.name.clone();
        tokio::spawn(async move {
            let mut filter = rmcp::model::SubscriptionFilter::new();
            filter.tools_list_changed = Some(true);
            let mut subscription = match peer.listen(filter).await {
                Ok(subscription) => subscription,
                Err(e) => {
                    tracing::info!(mcp.server = %server, "its tool changes cannot be heard: {e}");
                    return;
                }
            };
            while let Ok(Some(notification)) = subscription.next().await {
                if matches!(
                    notification,
                    rmcp::model::ServerNotification::ToolListChangedNotification(_)
                ) {
                    tracing::info!(mcp.server = %server, "the server's tools changed");
                    changed.send_modify(|n| *n += 1);
                }
            }
        });
    }
}
