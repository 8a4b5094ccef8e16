//! Publishing: an entry put under a fresh lease only if the name is free, and the task that
//! keeps the lease alive (and publishes again, under a new lease, if etcd lost it).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};

use super::{bump, Backoff, Ctx, Shared};
use crate::directory::entry::{check_name, EngineEntry};
use crate::directory::{DirectoryError, Publication};

/// Whole seconds of the lease TTL (checked to be whole at connect).
fn ttl_secs(ctx: &Ctx) -> i64 {
    ctx.ttl.as_secs().try_into().unwrap_or(i64::MAX)
}

/// Grants a lease and puts `value` at `key` under it if no key is there; on any failure the
/// lease is revoked again (best effort). Returns the lease.
async fn put_new(ctx: &Ctx, name: &str, key: &str, value: Vec<u8>) -> Result<i64, DirectoryError> {
    let mut c = ctx.client.clone();
    let id = ctx
        .call("publish (lease grant)", c.lease_grant(ttl_secs(ctx), None))
        .await?
        .id();
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(id)),
        )])
        .or_else([TxnOp::get(key, None)]);
    let r = ctx.call("publish (put)", c.txn(txn)).await;
    let err = match r {
        Ok(t) if t.succeeded() => return Ok(id),
        Ok(t) => {
            let holder = t
                .op_responses()
                .into_iter()
                .find_map(|o| match o {
                    TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
                    _ => None,
                })
                .and_then(|v| EngineEntry::decode(key, &v).ok())
                .map_or_else(|| "?".to_owned(), |e| e.addr);
            DirectoryError::NameTaken {
                name: name.to_owned(),
                holder,
            }
        }
        Err(e) => e,
    };
    if let Err(e) = ctx.call("publish (lease revoke)", c.lease_revoke(id)).await {
        tracing::debug!(error = %e, "lease of a failed publication not revoked; it runs out");
    }
    Err(err)
}

pub(super) fn publish(
    shared: Arc<Shared>,
    name: &str,
    entry: &EngineEntry,
) -> Result<Publication, DirectoryError> {
    check_name(name)?;
    let ctx = shared.ctx.clone();
    let key = ctx.key(name);
    let value = entry.encode(&key)?;
    let id = shared.block_on(put_new(&ctx, name, &key, value))?;
    tracing::info!(name, key = %key, lease = id, ttl = ?ctx.ttl, "published in the engine directory");
    let lease = Arc::new(AtomicI64::new(id));
    let task = shared.rt.spawn(keep_alive(
        ctx,
        name.to_owned(),
        key.clone(),
        entry.clone(),
        lease.clone(),
    ));
    Ok(Publication::new(name, move || {
        // The task is gone before the lease is read: it cannot grant another one after.
        shared.block_on(async {
            task.abort();
            let _ = task.await;
        });
        let id = lease.load(Ordering::Acquire);
        let mut c = shared.ctx.client.clone();
        match shared.block_on(shared.ctx.call("withdraw", c.lease_revoke(id))) {
            Ok(_) => tracing::info!(key = %key, "withdrawn from the engine directory"),
            Err(e) => {
                tracing::warn!(key = %key, error = %e, "withdraw failed; the entry goes when its lease runs out")
            }
        }
    }))
}

/// How a keep-alive stream ended.
enum End {
    /// etcd answered that the lease is gone (it expired during an outage).
    LeaseGone,
    Failed(String),
}

/// Keeps `lease` alive every third of the TTL, forever (the task is aborted to stop).
/// Failures are logged, counted and retried with backoff (at most a third of the TTL apart,
/// so a short outage costs no lease); a lost lease is replaced by publishing again.
async fn keep_alive(
    ctx: Ctx,
    name: String,
    key: String,
    mut entry: EngineEntry,
    lease: Arc<AtomicI64>,
) {
    let every = ctx.ttl / 3;
    let mut backoff = Backoff::new(Duration::from_millis(50), every);
    loop {
        let id = lease.load(Ordering::Acquire);
        match stream(&ctx, id, every, &mut backoff).await {
            End::Failed(reason) => {
                tracing::warn!(key = %key, lease = id, reason, "lease keep-alive failed; retrying");
            }
            End::LeaseGone => {
                tracing::warn!(key = %key, lease = id, "lease lost; publishing again");
                entry.version += 1;
                let put = match entry.encode(&key) {
                    Ok(v) => put_new(&ctx, &name, &key, v).await,
                    Err(e) => Err(e),
                };
                match put {
                    Ok(new) => {
                        lease.store(new, Ordering::Release);
                        bump(&ctx.stats.republished);
                        tracing::info!(key = %key, lease = new, "published again");
                        backoff.reset();
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(key = %key, error = %e, "publishing again failed; retrying")
                    }
                }
            }
        }
        backoff.wait().await;
        bump(&ctx.stats.reconnects);
    }
}

/// One keep-alive stream for lease `id`, until it fails or the lease is gone.
async fn stream(ctx: &Ctx, id: i64, every: Duration, backoff: &mut Backoff) -> End {
    let mut c = ctx.client.clone();
    let (mut keeper, mut answers) = match ctx.call("keep-alive", c.lease_keep_alive(id)).await {
        Ok(s) => s,
        Err(e) => return End::Failed(e.to_string()),
    };
    loop {
        if let Err(e) = ctx.call("keep-alive", keeper.keep_alive()).await {
            return End::Failed(e.to_string());
        }
        match ctx.call("keep-alive", answers.message()).await {
            Ok(Some(r)) if r.ttl() > 0 => {
                bump(&ctx.stats.keepalives);
                backoff.reset();
            }
            Ok(Some(_)) => return End::LeaseGone,
            Ok(None) => {
                ctx.count_error();
                return End::Failed("the keep-alive stream ended".into());
            }
            Err(e) => return End::Failed(e.to_string()),
        }
        tokio::time::sleep(every).await;
    }
}
