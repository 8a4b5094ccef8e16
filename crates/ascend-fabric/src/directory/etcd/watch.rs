//! Watching the directory: a first read, then a watch from the revision after it; after any
//! failure, a new read (with backoff) whose difference from what was known is reported, and a
//! new watch from there. So departures during an outage are reported when etcd is back, and a
//! watch that fell behind a compaction recovers.

use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::time::Duration;

use etcd_client::{EventType, WatchOptions};

use super::{bump, Backoff, Ctx, Shared};
use crate::directory::entry::EngineEntry;
use crate::directory::{DirectoryEvent, Watch};

type Known = BTreeMap<String, EngineEntry>;

/// The receiver is gone: the watch ends.
struct Closed;

pub(super) fn start(shared: &Shared) -> Result<Watch, crate::directory::DirectoryError> {
    let ctx = shared.ctx.clone();
    let (known, rev) = shared.block_on(ctx.read("watch", ""))?;
    let (tx, rx) = std::sync::mpsc::channel();
    for (name, entry) in &known {
        let _ = tx.send(DirectoryEvent::Joined {
            name: name.clone(),
            entry: entry.clone(),
        });
    }
    let task = shared.rt.spawn(run(ctx, tx, known, rev));
    let abort = task.abort_handle();
    Ok(Watch::new(rx, move || abort.abort()))
}

async fn run(ctx: Ctx, tx: Sender<DirectoryEvent>, mut known: Known, mut rev: i64) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    loop {
        match follow(&ctx, &tx, &mut known, rev, &mut backoff).await {
            Err(Closed) => return,
            Ok(reason) => {
                tracing::warn!(endpoint = %ctx.endpoint, reason, "directory watch broken; reading again")
            }
        }
        // Read again until etcd answers, then report what changed meanwhile.
        loop {
            backoff.wait().await;
            bump(&ctx.stats.reconnects);
            match ctx.read("watch (read again)", "").await {
                Ok((now, r)) => {
                    if diff(&tx, &known, &now).is_err() {
                        return;
                    }
                    known = now;
                    rev = r;
                    break;
                }
                Err(e) => tracing::debug!(error = %e, "directory still unreachable"),
            }
        }
    }
}

/// Events that turn `old` into `new`.
fn diff(tx: &Sender<DirectoryEvent>, old: &Known, new: &Known) -> Result<(), Closed> {
    for name in old.keys().filter(|n| !new.contains_key(*n)) {
        send(tx, DirectoryEvent::Left { name: name.clone() })?;
    }
    for (name, entry) in new {
        if old.get(name) != Some(entry) {
            send(
                tx,
                DirectoryEvent::Joined {
                    name: name.clone(),
                    entry: entry.clone(),
                },
            )?;
        }
    }
    Ok(())
}

fn send(tx: &Sender<DirectoryEvent>, ev: DirectoryEvent) -> Result<(), Closed> {
    tx.send(ev).map_err(|_| Closed)
}

/// Watches from `rev + 1` until the stream fails (the reason) or the receiver is gone.
async fn follow(
    ctx: &Ctx,
    tx: &Sender<DirectoryEvent>,
    known: &mut Known,
    rev: i64,
    backoff: &mut Backoff,
) -> Result<String, Closed> {
    let mut c = ctx.client.clone();
    let opts = WatchOptions::new()
        .with_prefix()
        .with_start_revision(rev + 1);
    let mut stream = match ctx.call("watch", c.watch(&*ctx.dir, Some(opts))).await {
        Ok(s) => s,
        Err(e) => return Ok(e.to_string()),
    };
    loop {
        let resp = match stream.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return Ok(count(ctx, "the watch stream ended".into())),
            Err(e) => return Ok(count(ctx, e.to_string())),
        };
        if resp.canceled() {
            let why = format!(
                "watch canceled by etcd ({}; compacted to {})",
                resp.cancel_reason(),
                resp.compact_revision()
            );
            return Ok(count(ctx, why));
        }
        backoff.reset();
        for ev in resp.events() {
            bump(&ctx.stats.watch_events);
            let Some(kv) = ev.kv() else { continue };
            let change = match ev.event_type() {
                EventType::Put => match ctx.parse(kv.key(), kv.value()) {
                    Ok((name, entry)) if known.get(&name) != Some(&entry) => {
                        known.insert(name.clone(), entry.clone());
                        Some(DirectoryEvent::Joined { name, entry })
                    }
                    Ok(_) => None,
                    Err(e) => {
                        ctx.malformed(&e);
                        // A valid entry overwritten by a malformed one is gone for readers.
                        ctx.name_of(kv.key())
                            .ok()
                            .and_then(|n| known.remove(&n).map(|_| n))
                            .map(|name| DirectoryEvent::Left { name })
                    }
                },
                EventType::Delete => ctx
                    .name_of(kv.key())
                    .ok()
                    .and_then(|n| known.remove(&n).map(|_| n))
                    .map(|name| DirectoryEvent::Left { name }),
            };
            if let Some(ev) = change {
                send(tx, ev)?;
            }
        }
    }
}

fn count(ctx: &Ctx, reason: String) -> String {
    ctx.count_error();
    reason
}
