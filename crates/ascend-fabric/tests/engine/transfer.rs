//! Multi-process WRITE and READ through the Fabric Mem engine: this process connects to a peer
//! engine in a child process and moves data between every kind of local and remote memory
//! (device HBM, host DRAM, and a foreign range of two allocations, so ops span segments), in
//! many sizes; the peer checks what arrived in its own memory.

use std::time::Duration;

use crate::peer::*;
use crate::util::*;
use ascend_fabric::{Engine, TransferDesc, TransferOp, TransferStatus};
use ascend_testkit::{role, test_name, Spawn};

const T: Duration = Duration::from_secs(10);

/// The child side of the test here, by role.
fn child_main(role: &str) {
    let rt = ascend_mem::Runtime::emulated().unwrap();
    match role {
        "peer" => peer_role(&rt),
        r => panic!("unknown role {r}"),
    }
}

/// (local offset, remote offset, len): small, unaligned, page-sized, over 1 MiB, and across
/// the 2 MiB boundary of the split regions.
const CASES: &[(usize, usize, usize)] = &[
    (0, 0, 1),
    (13, 777, 4095),
    (4096, 8192, 4096),
    (100, 65_536 + 5, 65_537),
    (MIB2 - 1000, MIB2 - 3000, 5000),
    (1, MIB2 - 7, (1 << 20) + 3),
    (0, 0, REGION),
    (MIB2 + 5, 9, MIB2 - 100),
];

#[test]
fn write_and_read_every_memory_kind_across_processes() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let name = test_name!(write_and_read_every_memory_kind_across_processes);
    let env = setup();
    let port = free_port();
    let peer_addr = format!("127.0.0.1:{port}");
    let mut peer = Spawn::new(name, "peer").env(ADDR_VAR, &peer_addr).start();
    let remote = parse_ready(&peer.expect_line("READY"));
    {
        let engine = Engine::new(&env.dev, "127.0.0.1", test_options(4)).unwrap();
        let local = Regions::new(&engine);
        local.fill_initial();
        engine.connect(&peer_addr, T).unwrap();
        assert_eq!(engine.remote_segments(&peer_addr).unwrap().len(), 4);

        // READ the peer's initial data first: translation is checked against known bytes.
        for (rw, rseed) in [("dev", 1u8), ("host", 2), ("split", 3)] {
            for &(loff, roff, len) in CASES {
                if loff + len > REGION || roff + len > REGION {
                    continue;
                }
                let lw = "dev";
                let d = TransferDesc::raw(local.addr(lw) + loff, remote[rw] + roff, len);
                engine
                    .transfer_sync(&peer_addr, TransferOp::Read, &[d], T)
                    .unwrap();
                let want = &pattern(rseed, REGION)[roff..roff + len];
                assert!(
                    local.read(lw, loff, len) == want,
                    "READ r{rw} -> {lw} ({loff}, {roff}, {len})"
                );
            }
        }

        // WRITE local -> remote (checked by the peer), then READ back into another place.
        let mut seed = 10u8;
        for lw in ["dev", "host", "split"] {
            for rw in ["dev", "host", "split"] {
                for &(loff, roff, len) in CASES {
                    if loff + len > REGION || roff + len > REGION {
                        continue;
                    }
                    seed = seed.wrapping_add(1);
                    let data = pattern(seed, len);
                    local.write(lw, loff, &data);
                    let d = TransferDesc::raw(local.addr(lw) + loff, remote[rw] + roff, len);
                    engine
                        .transfer_sync(&peer_addr, TransferOp::Write, &[d], T)
                        .unwrap_or_else(|e| panic!("WRITE {lw} -> r{rw} {loff} {roff} {len}: {e}"));
                    assert_eq!(
                        peer.ask(&format!("CHECK {rw} {roff} {len} {seed}"), ""),
                        "OK",
                        "peer check after WRITE {lw} -> r{rw} ({loff}, {roff}, {len})"
                    );
                    // Read back to the other end of the local region.
                    let back = REGION - len - loff.min(REGION - len);
                    local.write(lw, back, &vec![0u8; len]);
                    let d = TransferDesc::raw(local.addr(lw) + back, remote[rw] + roff, len);
                    engine
                        .transfer_sync(&peer_addr, TransferOp::Read, &[d], T)
                        .unwrap();
                    assert!(
                        local.read(lw, back, len) == data,
                        "READ back r{rw} -> {lw} ({back}, {roff}, {len})"
                    );
                }
            }
        }

        // One batch of many descriptors over all regions, async, then checked by the peer.
        let mut descs = Vec::new();
        let mut checks = Vec::new();
        for (i, rw) in ["dev", "host", "split"].iter().enumerate() {
            for j in 0..64usize {
                let off = (j * 4096 * 9 + i * 100) % (REGION - 4096);
                let s = (100 + i * 64 + j) as u8;
                let data = pattern(s, 4096);
                let loff = (i * 64 + j) * 4096;
                local.write("host", loff, &data);
                descs.push(TransferDesc::raw(
                    local.addr("host") + loff,
                    remote[*rw] + off,
                    4096,
                ));
                checks.push((rw.to_string(), off, s));
            }
        }
        // Keep the regions of one batch disjoint per target: later writes win otherwise.
        let req = engine
            .transfer_async(&peer_addr, TransferOp::Write, &descs)
            .unwrap();
        req.wait(T).unwrap();
        assert_eq!(req.status(), TransferStatus::Completed);
        for (rw, off, s) in checks {
            assert_eq!(peer.ask(&format!("CHECK {rw} {off} 4096 {s}"), ""), "OK");
        }

        let st = engine.peer_stats(&peer_addr).unwrap();
        assert_eq!(st.errors, 0);
        assert_eq!(st.in_flight, 0);
        assert!(st.writes > 50 && st.reads > 50, "{st:?}");
        assert!(st.bytes_written > 0 && st.bytes_read > 0);
        engine.disconnect(&peer_addr, T).unwrap();
        assert!(!engine.is_connected(&peer_addr));
        assert_eq!(
            engine.pool_usage().0,
            2,
            "only the local split alias remains"
        );
        // The server ends the session before it answers the disconnect request (and the
        // keepalive socket was shut before the request went out), so it is gone already.
        assert_eq!(peer.ask("STATS", "SESSIONS"), "0");
    }
    peer.send("QUIT");
    peer.finish();
    env.finish();
}
