//! What the server does for each request: connect, disconnect, notify.

use super::conn::{Close, Phase, SessionState};
use super::event_loop::Loop;
use super::shared::SessionEntry;
use super::{status, NOTIFY_QUEUE_CAP};
use crate::wire::{ConnectMsg, DisconnectMsg, Frame, MsgType, NotifyMsg, StatusMsg, WireError};
use std::sync::atomic::Ordering;
use std::time::Instant;

fn status_frame(code: u32) -> Vec<u8> {
    Frame::new(
        MsgType::Status,
        &StatusMsg {
            error_code: code,
            error_message: String::new(),
        },
    )
    .expect("a status fits in a frame")
    .encode()
}

impl Loop {
    /// Acts on the request frame that connection `key` sent.
    pub(super) fn on_request(&mut self, key: usize, frame: Frame) -> Result<(), Close> {
        match MsgType::from_raw(frame.msg_type) {
            Some(MsgType::Connect) => self.on_connect(key, &frame),
            Some(MsgType::Disconnect) => self.on_disconnect(key, &frame),
            Some(MsgType::SendNotify) => self.on_notify(key, &frame),
            Some(MsgType::Segments) => self.on_segments(key, &frame),
            _ => Err(Close::Malformed(WireError::UnexpectedType {
                found: frame.msg_type,
            })),
        }
    }

    fn session_key(&self, channel_id: &str) -> Option<usize> {
        self.shared.sessions.lock().get(channel_id).map(|e| e.key)
    }

    /// Answers with the share list and SUCCESS once the session exists, or with an empty list
    /// and a failure status.
    fn on_connect(&mut self, key: usize, frame: &Frame) -> Result<(), Close> {
        let req: ConnectMsg = frame
            .parse(MsgType::Connect, "connect request")
            .map_err(Close::Malformed)?;
        if let Some(old) = self.session_key(&req.channel_id) {
            self.probe(old);
        }
        let refusal = |code| {
            let mut out = Frame::new(MsgType::Connect, &ConnectMsg::response(&req, Vec::new()))
                .expect("an empty response fits in a frame")
                .encode();
            out.extend_from_slice(&status_frame(code));
            out
        };
        let now = Instant::now();
        let (bytes, session) = if self.session_key(&req.channel_id).is_some() {
            tracing::warn!(channel = %req.channel_id, "connect refused: channel id already has a session");
            (refusal(status::ALREADY_CONNECTED), None)
        } else {
            let entries = self.shared.handler.share_handles();
            let mut offered: Vec<u64> = entries.iter().map(|e| e.va_addr).collect();
            offered.sort_unstable();
            let mut resp = ConnectMsg::response(&req, entries);
            resp.segment_names = self.shared.handler.segment_names();
            match Frame::new(MsgType::Connect, &resp) {
                Ok(resp) => {
                    let mut out = resp.encode();
                    out.extend_from_slice(&status_frame(status::SUCCESS));
                    (out, Some(offered))
                }
                Err(e) => {
                    tracing::error!(error = %e, "share-handle list does not fit in one frame");
                    (refusal(status::RESOURCE_EXHAUSTED), None)
                }
            }
        };
        let Some(conn) = self.conns.get_mut(&key) else {
            return Ok(());
        };
        let Some(offered) = session else {
            conn.queue(&bytes);
            return conn.finish(now);
        };
        // The handler has seen the session before it is listed, and it exists before
        // SUCCESS is queued.
        self.shared.handler.session_opened(&req.channel_id);
        self.shared.sessions.lock().insert(
            req.channel_id.clone(),
            SessionEntry {
                key,
                last_heartbeat: now,
            },
        );
        self.shared
            .counters
            .sessions
            .fetch_add(1, Ordering::Relaxed);
        self.shared.metrics.sessions.increment(1.0);
        conn.phase = Phase::Session(SessionState {
            channel_id: req.channel_id.clone(),
            offered,
            last_heartbeat: now,
            updates: false,
        });
        tracing::debug!(channel = %req.channel_id, peer = %conn.peer, "session opened");
        conn.queue(&bytes);
        conn.flush()
    }

    /// Answers a connected client's request for the export list now (a session of its id must
    /// exist: anyone else gets an empty list and NOT_CONNECTED); what it is offered counts as
    /// offered to its session from now on (a revocation of it closes the session).
    fn on_segments(&mut self, key: usize, frame: &Frame) -> Result<(), Close> {
        let req: ConnectMsg = frame
            .parse(MsgType::Segments, "segments request")
            .map_err(Close::Malformed)?;
        let mut resp = ConnectMsg::response(&req, Vec::new());
        let mut code = status::NOT_CONNECTED;
        if let Some(session) = self.session_key(&req.channel_id) {
            let entries = self.shared.handler.share_handles();
            // A session being revoked is not told more (its client is on its way out).
            let open = self.conns.get_mut(&session).filter(|c| !c.revoked());
            if let Some(Phase::Session(s)) = open.map(|c| &mut c.phase) {
                s.offered.extend(entries.iter().map(|e| e.va_addr));
                s.offered.sort_unstable();
                s.offered.dedup();
                resp.share_handles = entries;
                resp.segment_names = self.shared.handler.segment_names();
                code = status::SUCCESS;
            }
        }
        let mut out = match Frame::new(MsgType::Segments, &resp) {
            Ok(f) => f.encode(),
            Err(e) => {
                tracing::error!(error = %e, "share-handle list does not fit in one frame");
                code = status::RESOURCE_EXHAUSTED;
                Frame::new(MsgType::Segments, &ConnectMsg::response(&req, Vec::new()))
                    .expect("an empty response fits in a frame")
                    .encode()
            }
        };
        out.extend_from_slice(&status_frame(code));
        let Some(conn) = self.conns.get_mut(&key) else {
            return Ok(());
        };
        conn.queue(&out);
        conn.finish(Instant::now())
    }

    /// Closes the named session before answering, so a client that sees the status knows the
    /// server has let go of it.
    fn on_disconnect(&mut self, key: usize, frame: &Frame) -> Result<(), Close> {
        let msg: DisconnectMsg = frame
            .parse(MsgType::Disconnect, "disconnect request")
            .map_err(Close::Malformed)?;
        if let Some(old) = self.session_key(&msg.channel_id) {
            tracing::debug!(channel = %msg.channel_id, "session closed by disconnect request");
            self.close(old, Close::Disconnected);
        }
        let Some(conn) = self.conns.get_mut(&key) else {
            return Ok(());
        };
        conn.queue(&status_frame(status::SUCCESS));
        conn.finish(Instant::now())
    }

    /// Queues the notify; there is no reply.
    fn on_notify(&mut self, key: usize, frame: &Frame) -> Result<(), Close> {
        let msg: NotifyMsg = frame
            .parse(MsgType::SendNotify, "notify")
            .map_err(Close::Malformed)?;
        msg.validate().map_err(Close::Malformed)?;
        {
            let mut q = self.shared.notifies.lock();
            if q.len() >= NOTIFY_QUEUE_CAP {
                tracing::warn!("notify queue full; notify dropped");
            } else {
                q.push_back(msg);
            }
        }
        match self.conns.get_mut(&key) {
            Some(conn) => conn.finish(Instant::now()),
            None => Ok(()),
        }
    }
}
