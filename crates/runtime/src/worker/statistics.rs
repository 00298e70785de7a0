//! The worker keeps the statistics of growing tables (see
//! `agentenkit_store`'s `statistics`): plans follow the tables from their
//! first rows.

use tokio_util::sync::CancellationToken;

use super::Worker;

impl Worker {
    /// Analyzes the tables that grew past their statistics, every
    /// `statistics_every`, until `stop` (see `agentenkit_store`'s
    /// `statistics`): plans follow the tables from the first rows.
    pub(super) fn keep_statistics(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let store = self.inner.store().clone();
        let every = self.inner.config.statistics_every;
        tokio::spawn(async move {
            let Some(every) = every else { return };
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                match store.analyze_grown_tables().await {
                    Ok(tables) if !tables.is_empty() => {
                        tracing::info!(?tables, "analyzed tables that outgrew their statistics")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "could not check the tables' statistics"),
                }
            }
        })
    }
}
