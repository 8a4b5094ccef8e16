//! Where an engine's VA pool lies: at `pool_start` on an A3 when the range is free (a
//! fixed-address reservation without the unified-cache path, as HIXL's pool), anywhere when
//! another engine of the process holds it, when the start is 0, or on a product without
//! fixed-address reservations (there the engine still starts).

use ascend_fabric::Addr;
use std::time::Duration;

use crate::peer::*;
use crate::util::*;
use ascend_fabric::{Engine, EngineOptions, OptionError};
use ascend_testkit::{role, test_name, Spawn};

const T: Duration = Duration::from_secs(5);
const TIB: u64 = 1 << 40;
const CAP: usize = 64 << 30;

fn opts(start: Option<u64>) -> EngineOptions {
    let b = EngineOptions::builder()
        .task_stream_num(1)
        .heartbeat_interval(Duration::from_millis(100))
        .pool_capacity(CAP);
    match start {
        Some(s) => b.pool_start(Addr::new(s)),
        None => b,
    }
    .build()
    .unwrap()
}

/// Where `b` mapped the one segment `a` offers.
fn import_at(a_addr: &str, b: &Engine) -> Addr {
    b.connect(a_addr, T).unwrap();
    let (va, _) = b.remote_segments(a_addr).unwrap()[0];
    let at = b.peer_mapped_addr(a_addr, va).unwrap();
    b.disconnect(a_addr, T).unwrap();
    at
}

fn in_pool(at: Addr, start: u64) -> bool {
    (start..start + CAP as u64).contains(&at.get())
}

#[test]
fn the_pool_lies_at_its_start_when_it_can() {
    let env = setup();
    {
        let a_addr = format!("127.0.0.1:{}", free_port());
        // The first engine with the default start (40 TiB) holds that range.
        let a = Engine::new(&env.dev, &a_addr, opts(None)).unwrap();
        let seg = a.alloc_device(MIB2).unwrap();
        let _reg = a.register(&seg).unwrap();
        // Another start: there.
        let b = Engine::new(&env.dev, "127.0.0.1", opts(Some(50 * TIB))).unwrap();
        assert!(in_pool(import_at(&a_addr, &b), 50 * TIB));
        // The default start again, taken by `a`: anywhere else.
        let c = Engine::new(&env.dev, "127.0.0.1", opts(None)).unwrap();
        let at = import_at(&a_addr, &c);
        assert!(!in_pool(at, 40 * TIB) && !at.is_null(), "{at:#x}");
        // Start 0: anywhere.
        let d = Engine::new(&env.dev, "127.0.0.1", opts(Some(0))).unwrap();
        let at = import_at(&a_addr, &d);
        assert!(!in_pool(at, 40 * TIB) && !in_pool(at, 50 * TIB), "{at:#x}");
        // A start beyond the address space: anywhere, not an error (the pool serves an
        // import).
        let e = Engine::new(&env.dev, "127.0.0.1", opts(Some(1000 * TIB))).unwrap();
        import_at(&a_addr, &e);
        drop((b, c, d, e));
    }
    // A start that is not a whole number of GiB is refused when the options are built.
    let e = EngineOptions::builder()
        .pool_start(Addr::new(40 * TIB + 4096))
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, OptionError::Invalid { key, .. } if key == "pool_start"),
        "{e:?}"
    );
    env.finish();
}

/// An A2 has no fixed-address reservations: the engine still starts (its pool goes
/// anywhere), and registering says FABRIC handles need an A3.
#[test]
fn on_an_a2_the_engine_starts_without_a_fixed_pool() {
    match role().as_deref() {
        Some("a2") => {
            let env = setup();
            let rt = &env.rt;
            let dev = rt.device(0).unwrap();
            let a = Engine::new(&dev, "127.0.0.1", opts(Some(40 * TIB))).unwrap();
            let buf = a.alloc_device(MIB2).unwrap();
            let e = a.register(&buf).unwrap_err();
            assert_eq!(e.status(), ascend_fabric::HixlCode::UNSUPPORTED, "{e:?}");
            println!("RESULT ok");
        }
        Some(other) => panic!("unknown role {other}"),
        None => {
            let name = test_name!(on_an_a2_the_engine_starts_without_a_fixed_pool);
            let out = Spawn::new(name, "a2").env("ASCEND_SIM_SOC", "A2").output();
            ascend_testkit::assert_ok(&out);
        }
    }
}
