//! The worker and agent versions: a run served on its own version, moved
//! to the worker's newer one where its agent says so, or handed on when
//! this worker cannot build its version.

use std::sync::Arc;

use agentenkit_store::RunContext;

use super::{Disposition, Worker};
use crate::agent::Registry;
use crate::metrics;

impl Worker {
    /// `on_deploy = "upgrade"`: a run whose agent (as its version says)
    /// takes newer versions moves to this worker's version of it when that
    /// one was first seen later and can take the run's open calls. The
    /// switch is journaled (and added to the segment's replay); a run that
    /// cannot move stays on its version.
    pub(super) async fn take_newer_version(
        &self,
        pinned: Arc<Registry>,
        ctx: &mut RunContext,
    ) -> Arc<Registry> {
        let inner = &self.inner;
        let agent = ctx.lease.run_name.clone();
        // The registry this worker serves new turns from, as of now.
        let current = inner.registry();
        let (Some(from), Some(ours)) = (ctx.agent_version.clone(), current.agent_version(&agent))
        else {
            return pinned;
        };
        let upgrades = pinned
            .agent(&agent)
            .is_some_and(|a| a.on_deploy == crate::config::OnDeploy::Upgrade);
        if !upgrades || ours.hash == from {
            return pinned;
        }
        match inner.store().is_newer_version(&ours.hash, &from).await {
            Ok(true) => {}
            Ok(false) => return pinned,
            Err(e) => {
                tracing::warn!(error = %e, "could not compare agent versions; the run stays on its own");
                return pinned;
            }
        }
        let switched = async {
            let Some(locked) = inner.store().lock_for_switch(&ctx.lease, &from).await? else {
                return Ok(Err("the lease was lost".to_owned()));
            };
            // Judged here, on the calls read under the run's lock.
            if let Err(reason) = crate::upgrade::compatible(&current, &agent, locked.open_calls()) {
                locked.release().await?;
                return Ok(Err(reason));
            }
            locked.move_to(&ours.hash, "on_deploy").await.map(Ok)
        };
        match switched.await {
            Ok(Ok(entry)) => {
                tracing::info!(from = %from, to = %ours.hash, "the run moved to this worker's version of its agent");
                ::metrics::counter!(metrics::VERSION_SWITCHES).increment(1);
                ctx.journal.push(entry);
                ctx.agent_version = Some(ours.hash.clone());
                current
            }
            Ok(Err(reason)) => {
                tracing::info!(to = %ours.hash, reason = %reason, "the run stays on its version");
                pinned
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not move the run to this worker's version");
                pinned
            }
        }
    }

    /// This worker cannot serve the run's agent version: the segment goes
    /// back for a worker that can, the lease free at once and no takeover
    /// counted; once workers have handed the run back for
    /// `unserved_timeout`, it fails with the reason.
    pub(super) async fn unserved(
        &self,
        ctx: &RunContext,
        why: crate::versions::Unserved,
    ) -> Disposition {
        ::metrics::counter!(metrics::UNSERVED_VERSIONS).increment(1);
        let inner = &self.inner;
        let unserved_for = match inner.store().let_go(&ctx.lease).await {
            Ok(Some(unserved_for)) => unserved_for,
            // Taken over or stopped meanwhile: not this worker's to judge.
            Ok(None) => return Disposition::Ack,
            Err(e) => {
                tracing::warn!(error = %e, "could not give the lease back; it runs out");
                return Disposition::Requeue;
            }
        };
        if unserved_for < inner.config.unserved_timeout {
            tracing::warn!(error = %why, "this worker cannot serve the run's agent version; segment handed back");
            return Disposition::Requeue;
        }
        let error = format!(
            "no worker served this run for {}s: {why}",
            unserved_for.as_secs()
        );
        tracing::error!(error = %error, "failing a run no worker serves");
        self.fail_run(ctx.lease.run_id, &error).await
    }
}
