//! ascend-fabric: a one-sided Fabric Mem transfer engine for Ascend, built on ascend-mem's
//! types and wire-compatible with HIXL's FabricMem control plane.
//!
//! KV-cache blocks move one-sided between NPU HBM and pooled host DRAM: each engine registers
//! memory (exported as FABRIC share handles), peers connect over TCP and import what it offers
//! into a VA pool, and transfers are `aclrtMemcpyAsync` copies between local registered memory
//! and the imported peer segments (runs of host-device copies batched), spread over a few
//! streams and completed through a pinned host flag per stream that the stream writes
//! (events on a runtime without those calls).
//!
//! ```text
//! Engine ── Registry ── Registration ── Block (MappingRef or VA-pool alias, FABRIC export)
//!   │  └─ ControlServer (offers the Registry's blocks; keepalive sessions)
//!   ├── Channel per peer ── Import (imported PhysicalMem mapped in a VA-pool slot)
//!   │        └─ keepalive socket (reader thread: EOF = peer lost), heartbeats
//!   └── SlotPool ── Slot (task_stream_num streams from a StreamPool + flags)
//! TransferRequest ── Pending (slot, used registrations, the channel's in-flight table) until done
//!   └─ waker / CompletionQueue, told by whoever sees it end (the engine's progress thread)
//! ```
//!
//! | HIXL | here |
//! |---|---|
//! | `Initialize(local_engine, options)` | [`Engine::new`], [`Engine::from_hixl`] |
//! | `MallocMem` | [`Engine::alloc_device`], [`Engine::alloc_host`] |
//! | `RegisterMem` / `DeregisterMem` | [`Engine::register`], [`Engine::register_raw`] / [`Engine::deregister`] or drop |
//! | `Connect` / `Disconnect` | [`Engine::connect`] / [`Engine::disconnect`] |
//! | `TransferSync` / `TransferAsync` | [`Engine::transfer_sync`] / [`Engine::transfer_async`] |
//! | NIXL's prepared descriptor lists | [`Engine::prepare_local`], [`Engine::prepare_remote`], [`Engine::transfer_prepared_async`] |
//! | `GetTransferStatus` | [`TransferRequest::status`], [`TransferRequest::wait`], `.await` |
//! | `TransferArgs::user_data`, batched `GetTransferStatus` | [`CompletionQueue`] |
//! | `ConnectAsync` | [`Engine::connect_async`] |
//! | (none: back-pressure, cancellation) | [`Engine::post`], [`Engine::transfer`]; drop to cancel |
//! | (none: the same for prepared lists) | [`Engine::post_prepared`], [`Engine::transfer_prepared`] |
//! | (none: a peer's registrations made since the connect) | [`Engine::refresh_segments`] |
//! | `SendNotify` / `GetNotifies` | [`Engine::send_notify`] / [`Engine::take_notifies`] |
//! | `Finalize` | dropping the last [`Engine`] clone |
//!
//! Every way to transfer comes in the same forms, named the same way for raw descriptors
//! and prepared lists: blocking (`transfer_sync`, `transfer_prepared_sync`), a handle that
//! fails at once when every stream slot is busy (`transfer_async[_with]`,
//! `transfer_prepared_async[_with]`), a future that waits for a slot and resolves to the
//! handle (`post`, `post_prepared`), and a future of the outcome (`transfer[_with]`,
//! `transfer_prepared[_with]`). The `_with` forms and the futures take the same
//! [`TransferOptions`]; user data for completions goes with [`CompletionQueue::push`].
//!
//! [`options`] holds the typed configuration and HIXL's option map read into it (its types
//! are re-exported here). The control plane, the codec of HIXL's frames and messages with the
//! control server and client calls that speak it, is the engine's own (see
//! [below](#the-control-plane)); what a caller meets of it is here: [`ClientError`] and
//! [`WireError`] (inside [`Error::Control`] and [`Error::Wire`]) and the limits
//! [`MAX_NOTIFY_FIELD`] and [`MAX_SEGMENT_NAME`]. The unstable feature `protocol-internals`
//! makes its modules, `wire` and `control`, public for this crate's own tests: nothing in
//! them is covered by semver.
//!
//! # Does
//! * check every descriptor against local registrations and the peer's offered segments
//!   before any copy (errors name the descriptor index and address);
//! * keep every byte a copy touches mapped until the copy is observed complete or aborted;
//! * offer transfers as futures for any executor (no runtime dependency): awaiting a request,
//!   waiting in turn for a stream slot instead of failing ([`Engine::post`]), connecting
//!   without blocking the caller; dropping a future cancels it at once, with the same
//!   guarantee as above (its copies are aborted, and the engine's progress thread lets go of
//!   what they touch once the runtime says their streams are done: the drop never waits); a
//!   stall deadline per request ([`TransferOptions`]); a completion queue with user data
//!   ([`CompletionQueue`]);
//! * detect a dead peer through its keepalive socket (EOF, as its kernel closes it) and
//!   heartbeats, and a lost host (powered off, cut off: nothing closes) by a heartbeat left
//!   unacknowledged for [`EngineOptions::peer_timeout`], fail its in-flight transfers with [`Error::PeerLost`], abort their streams
//!   and unmap and free its imports, all of it before the peer leaves [`Engine::peers`] and
//!   before any waiter sees the error (so a caller that sees a peer gone may rely on its VA
//!   being back);
//! * revoke what it deregisters: the sessions of peers that imported memory no registration
//!   covers any more are closed, and [`Engine::deregister`] returns once those peers have let
//!   go of it (peers of this crate tear their channel down first), or after 3 s;
//! * quarantine a VA slot whose unmap failed instead of handing it out again;
//! * identify itself to peers by its engine string, as HIXL does, when it listens on a host
//!   address (so a server knows an engine restarted at the same address), and by an id unique
//!   to the engine instance (its address and 64 random bits) when it has no port or listens
//!   on an unspecified address, so such engines never take each other's session
//!   ([`Engine::channel_id`]).
//!
//! # Does not
//! * encrypt or integrity-protect control traffic: the shared secret controls who may connect,
//!   disconnect and notify, but the share-handle list and everything after the handshake
//!   travel in clear;
//! * run HIXL's AICPU path (an option map asking for it runs the host path, with a WARN line;
//!   see [`EngineOptions::from_hixl`]) or implement
//!   HIXL's HCCL engines itself (its C client/server API, HixlCS, is wrapped by the ascend-cs
//!   crate over the runtime's own library; [`HixlCode`] comes from there, [`MemKind`] from
//!   ascend-mem);
//! * reconnect on its own unless `AutoConnect` is on: then a transfer to a peer it is not
//!   connected to connects first (3 s timeout), and a transfer whose copies failed
//!   disconnects its peer, as in HIXL (argument errors, caught before any copy, do not).
//!
//! # The control plane
//! A listening engine serves HIXL's FabricMem control protocol on its `ip:port`, from one
//! event-loop thread: connect requests are answered with the export list and keep their socket
//! as the session's keepalive channel; disconnects and notifies ([`Engine::send_notify`]) each
//! come on a connection of their own, as HIXL's do. The server bounds what peers can make it
//! hold: at most 4,096 connections open and 256 from one address (one more is refused with a
//! `RESOURCE_EXHAUSTED` status naming the cap, which a connect or disconnect of this crate
//! reports as [`ClientError::Status`]; a notify reads no answer, so one over the cap is lost,
//! as a HIXL notify is when nobody takes it), 3 s from accepting a connection to having its
//! whole request (a silent or trickling sender is closed then), at most 4,096 notifies waiting
//! for [`Engine::take_notifies`] (more are dropped), and a session with no heartbeat for
//! [`EngineOptions::session_heartbeat_timeout`] is closed. Anything malformed closes that one
//! connection.
//!
//! With [`EngineOptions::shared_secret`] set, every connection, whatever it asks for (connect,
//! disconnect or notify), first runs a mutual HMAC-SHA256 challenge-response over fresh nonces
//! of both sides: a client never sends its request to a server that cannot prove it knows the
//! secret (it fails with [`ClientError::ServerAuth`]), and a server closes a connection without
//! a valid proof before acting on its request. The secret itself never crosses the wire, and a
//! recorded exchange is useless later. What the secret protects: who may open a session (and
//! so receive the share handles), who may close one by disconnect request, who may queue a
//! notify, and each side's proof that the other knows the secret. What it does not: the bytes
//! after the handshake are neither encrypted nor integrity-protected. Someone on the path can
//! read the share-handle list and notifies, and can tamper with or inject bytes into an
//! authenticated connection. Use it on a trusted network, or under a tunnel that provides
//! confidentiality and integrity. Without a secret the wire is HIXL's, byte for byte, and
//! anyone who can reach the port may connect, disconnect any channel it can name, and notify.
//!
//! # Engine directory (feature `etcd`)
//! [`directory`] lets engines find each other by name instead of `ip:port`: a
//! [`directory::Member`] publishes an engine under `<prefix>/engines/<name>` (control address,
//! device, product, the segments it offers, a version) with a lease it keeps alive, connects to
//! peers with [`directory::Member::connect_by_name`], and watches the directory. A peer whose
//! key disappears (deleted, or its lease expired because its process died) has its channel
//! ended like a closed keepalive: in-flight transfers fail with [`Error::PeerLost`], reason
//! [`LostReason::DirectoryLeft`]. An etcd outage does not touch established channels; the
//! client logs, counts and retries with backoff, and reports what changed once etcd is back.
//! The trait and the member are always built; `directory::EtcdDirectory` needs the `etcd`
//! feature, which brings `etcd-client` 0.21 and `tokio`: that feature needs Rust 1.88 (its
//! gRPC stack, tonic 0.14) and `protoc` with protobuf's own `.proto` files at build time
//! (Debian: `protobuf-compiler` and `libprotobuf-dev`); the crate without it stays on the
//! workspace's Rust 1.81.
//!
//! Load on etcd, measured with 64 engines in one process against one local etcd (the
//! `directory_scale` test; debug build, lease TTL 2 s, two shared cores): publishing (connect,
//! first read, lease, conditional put) took 40 ms per engine; 4,032 lookups (a full mesh) ran
//! at 1,480/s; lease keep-alives came at 92/s (1.44/s per engine: one every third of the TTL);
//! one departure cost 64 watch events (one per watching client) and all 63 others saw it within
//! 0.6 s; an entry with one segment is a 24-byte key and a 145-byte value (about 45 bytes more
//! per segment). A killed engine left the directory 1.8 to 2.5 s after the kill with the 2 s
//! TTL (etcd checks for expired leases every 500 ms). Scaled by those figures, with the
//! default TTL of 10 s:
//!
//! | | 64 (measured, TTL 2 s) | 384 (an A3 supernode) | 4,096 |
//! |---|---|---|---|
//! | keys (one per engine) | 64, ~11 KB | 384, ~65 KB | 4,096, ~0.7 MB |
//! | keep-alives per second (3 N / TTL) | 92 | 115 | 1,229 |
//! | watch events per departure or arrival (N − 1, one per watcher) | 63 | 383 | 4,095 |
//! | entries read when all N start (each reads the directory once) | 4 K | 147 K (~25 MB) | 16.8 M (~2.8 GB) |
//! | lookups for a full mesh of connections (N (N − 1)) | 4,032 | 147 K | 16.8 M |
//!
//! Keep-alives stay modest at any size (etcd's leader answers them without a consensus round);
//! what grows as N² is the fan-out of a fleet-wide start and of a full mesh of lookups. Up to a
//! supernode, one directory is fine; for thousands of engines, give each group of engines that
//! transfer among themselves its own prefix (a `directory::EtcdOptions::prefix` per group),
//! and start them in waves.
#![deny(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod capabilities;
mod channel;
mod connect;
// The control plane (`control`, `wire`): crate-private, public only with the unstable
// `protocol-internals` feature (for this crate's own tests; see the module docs).
#[cfg(feature = "protocol-internals")]
#[cfg_attr(docsrs, doc(cfg(feature = "protocol-internals")))]
pub mod control;
#[cfg(not(feature = "protocol-internals"))]
mod control;
pub mod directory;
mod engine;
mod error;
mod future;
mod heartbeat;
pub mod metrics;
mod names;
pub mod options;
mod plan;
mod pool;
mod prepared;
mod progress;
mod queue;
mod ranges;
mod refresh;
mod registry;
mod remote;
mod request;
mod segment;
mod slots;
mod stats;
mod submit;
mod summary;
mod transfer;
mod transfer_request;
#[cfg(feature = "protocol-internals")]
#[cfg_attr(docsrs, doc(cfg(feature = "protocol-internals")))]
pub mod wire;
#[cfg(not(feature = "protocol-internals"))]
mod wire;

pub use ascend_cs::HixlCode;
pub use ascend_mem::{Addr, MemKind};
pub use capabilities::{EngineCapabilities, Need};
pub use control::ClientError;
pub use engine::Engine;
pub use error::{Error, LostReason, Result, Side};
pub use future::{Connect, Post, Transfer};
pub use options::{EngineAddr, EngineOptions, EngineOptionsBuilder, OptionError};
pub use plan::SUBMIT_THREAD_MIN_COPIES;
pub use pool::SLOT as POOL_SLOT;
pub use prepared::{LocalBlocks, RemoteBlocks, SegmentRef};
pub use queue::{Completion, CompletionQueue, Next};
pub use ranges::RangeError;
pub use registry::{Registrable, Registration};
pub use segment::RemoteSegment;
pub use slots::STREAM_BUDGET;
pub use stats::PeerStats;
pub use transfer::{TransferDesc, TransferOp, TransferOptions, TransferStatus};
pub use transfer_request::TransferRequest;
pub use wire::{WireError, MAX_NOTIFY_FIELD, MAX_SEGMENT_NAME};

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Engine>();
    send_sync::<Registration>();
    send_sync::<TransferRequest>();
    send_sync::<LocalBlocks>();
    send_sync::<RemoteBlocks>();
    send_sync::<Transfer>();
    send_sync::<Post>();
    send_sync::<Connect>();
    send_sync::<CompletionQueue<u64>>();
    send_sync::<Error>();
};
