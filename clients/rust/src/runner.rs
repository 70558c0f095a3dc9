//! Run-while-leader and run-while-holding: Curator's `LeaderSelector` with auto-requeue, for a
//! gateway fleet. After a loss they campaign (or queue) again — on the next endpoint when the
//! reason was `unavailable` or `silence`, on the same one otherwise — after the shared backoff.

use std::future::Future;

use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::{Client, Endpoint, Error, Leader, LockOptions, LossReason};

/// What leader-only work gets.
#[derive(Debug, Clone)]
pub struct LeaderContext {
    /// Pass it downstream with every write: a later leader always has a larger one.
    pub fencing_token: u64,
    pub leader: Leader,
    /// Cancelled the moment leadership is lost: for tasks the work spawned.
    pub lost: CancellationToken,
    /// The gateway the campaign runs on.
    pub endpoint: Endpoint,
}

/// What lock-holder-only work gets.
#[derive(Debug, Clone)]
pub struct HoldContext {
    pub fencing_token: u64,
    pub lost: CancellationToken,
    pub endpoint: Endpoint,
}

/// The loss reason for a hold that ended with `e` before it was granted.
fn reason_of(e: &Error) -> LossReason {
    match e {
        Error::Lost(r) => *r,
        Error::Status(s) => crate::hold::classify(s),
        _ => LossReason::Ended,
    }
}

impl Client {
    fn after_loss(&self, reason: LossReason, ep: &Endpoint) {
        tracing::info!(%reason, endpoint = %ep, "hold lost; queueing again");
        if reason.moves_endpoint() {
            self.fail_over_from(ep);
        }
    }

    /// Campaigns in `election` and runs `work` while leader, again and again: when leadership
    /// is lost, the work's future is dropped at once (and `lost` cancelled), and the client
    /// campaigns again. When `work` returns by itself, the candidacy is resigned and this
    /// returns `Ok`. Dropping the returned future resigns too (the stream is cancelled).
    ///
    /// # Errors
    /// Only refusals that campaigning again cannot fix ([`Error::is_permanent`]).
    pub async fn run_while_leader<F, Fut>(
        &self,
        election: &str,
        candidate: &str,
        value: &[u8],
        mut work: F,
    ) -> Result<(), Error>
    where
        F: FnMut(LeaderContext) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut backoff = Backoff::default();
        loop {
            match self.campaign(election, candidate, value).await {
                Err(e) if e.is_permanent() => return Err(e),
                Err(e) => tracing::info!(error = %e, "campaign failed; trying again"),
                Ok(lead) => {
                    backoff.reset();
                    let ep = lead.endpoint().clone();
                    match lead.elected().await {
                        Ok(leader) => {
                            let ctx = LeaderContext {
                                fencing_token: leader.fencing_token,
                                leader,
                                lost: lead.lost_token(),
                                endpoint: ep.clone(),
                            };
                            tokio::select! {
                                () = work(ctx) => {
                                    lead.resign().await;
                                    return Ok(());
                                }
                                reason = lead.lost() => self.after_loss(reason, &ep),
                            }
                        }
                        Err(Error::Lost(reason)) => self.after_loss(reason, &ep),
                        Err(e) if e.is_permanent() => return Err(e),
                        Err(e) => self.after_loss(reason_of(&e), &ep),
                    }
                }
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// [`Client::run_while_leader`] for a lock: queues, runs `work` while holding, queues
    /// again after a loss. `options.wait_timeout` applies to each round; a round that times
    /// out is tried again.
    ///
    /// # Errors
    /// Only refusals that queueing again cannot fix (a permits mismatch, a bad name).
    pub async fn run_while_holding<F, Fut>(
        &self,
        options: LockOptions,
        mut work: F,
    ) -> Result<(), Error>
    where
        F: FnMut(HoldContext) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut backoff = Backoff::default();
        loop {
            match self.queue_lock(options.clone()).await {
                Err(e) if e.is_permanent() => return Err(e),
                Err(e) => tracing::info!(error = %e, "lock request failed; trying again"),
                Ok(hold) => {
                    backoff.reset();
                    let ep = hold.endpoint().clone();
                    match hold.acquired().await {
                        Ok(fencing_token) => {
                            let ctx = HoldContext {
                                fencing_token,
                                lost: hold.lost_token(),
                                endpoint: ep.clone(),
                            };
                            tokio::select! {
                                () = work(ctx) => {
                                    hold.release().await;
                                    return Ok(());
                                }
                                reason = hold.lost() => self.after_loss(reason, &ep),
                            }
                        }
                        Err(Error::Lost(reason)) => self.after_loss(reason, &ep),
                        Err(e) if e.is_permanent() => return Err(e),
                        Err(e) => self.after_loss(reason_of(&e), &ep),
                    }
                }
            }
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }
}
