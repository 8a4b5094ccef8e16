//! The shared-secret proofs: fresh nonces and HMAC-SHA256 over both of them.
//!
//! Each side proves it knows the secret by a MAC over `label ‖ client_nonce ‖ server_nonce`;
//! the labels differ by role, so one side's proof can never be replayed as the other's, and
//! the nonces are fixed-length, so the concatenation is unambiguous. Checks run in constant
//! time (`Mac::verify_slice`).

use crate::wire::{AUTH_MAC_LEN, AUTH_NONCE_LEN};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io;

type HmacSha256 = Hmac<Sha256>;

/// Which side a proof is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Server,
    Client,
}

impl Role {
    fn label(self) -> &'static [u8] {
        match self {
            Role::Server => b"ascend-fabric/control/server",
            Role::Client => b"ascend-fabric/control/client",
        }
    }
}

/// A nonce pair as both sides see it after the first two messages.
#[derive(Debug, Clone, Copy)]
pub(super) struct Nonces {
    pub(super) client: [u8; AUTH_NONCE_LEN],
    pub(super) server: [u8; AUTH_NONCE_LEN],
}

impl Nonces {
    fn keyed(&self, secret: &str, role: Role) -> HmacSha256 {
        // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
        let mut m = <HmacSha256 as Mac>::new_from_slice(secret.as_bytes())
            .expect("HMAC takes keys of any length");
        m.update(role.label());
        m.update(&self.client);
        m.update(&self.server);
        m
    }

    /// `role`'s proof of knowing `secret`.
    pub(super) fn prove(&self, secret: &str, role: Role) -> [u8; AUTH_MAC_LEN] {
        self.keyed(secret, role).finalize().into_bytes().into()
    }

    /// Whether `mac` is `role`'s proof of knowing `secret` (constant-time comparison).
    pub(super) fn check(&self, secret: &str, role: Role, mac: &[u8]) -> bool {
        self.keyed(secret, role).verify_slice(mac).is_ok()
    }
}

/// Fills `buf` from the kernel's random source. Opened per call (not cached) so that no
/// descriptor outlives its user.
fn os_random(buf: &mut [u8]) -> io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// A fresh nonce from the kernel's random source.
pub(super) fn nonce() -> io::Result<[u8; AUTH_NONCE_LEN]> {
    let mut n = [0u8; AUTH_NONCE_LEN];
    os_random(&mut n)?;
    Ok(n)
}

/// 64 random bits for making identifiers unique (an engine's channel id). Taken from the
/// kernel's random source; should that fail, from std's randomly keyed hasher over the time,
/// the process id and a counter, which is still unique in practice.
pub fn unique_suffix() -> u64 {
    let mut b = [0u8; 8];
    if os_random(&mut b).is_ok() {
        return u64::from_ne_bytes(b);
    }
    use std::hash::{BuildHasher, Hash, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    std::time::SystemTime::now().hash(&mut h);
    std::process::id().hash(&mut h);
    COUNTER.fetch_add(1, Ordering::Relaxed).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_role_secret_and_both_nonces() {
        let n = Nonces {
            client: [1; 32],
            server: [2; 32],
        };
        let server = n.prove("k", Role::Server);
        assert!(n.check("k", Role::Server, &server));
        assert!(!n.check("k", Role::Client, &server), "roles differ");
        assert!(!n.check("k2", Role::Server, &server), "secrets differ");
        let other = Nonces {
            client: [1; 32],
            server: [3; 32],
        };
        assert!(!other.check("k", Role::Server, &server), "nonces differ");
        assert!(!n.check("k", Role::Server, &server[..31]), "short MAC");
        assert_ne!(nonce().unwrap(), nonce().unwrap());
        assert_ne!(unique_suffix(), unique_suffix());
    }
}
