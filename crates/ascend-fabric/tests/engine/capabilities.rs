//! The engine's view of a runtime's capabilities: HixlCS, the Fabric Mem mode, and the needs
//! a program names (`EngineCapabilities::check`).

use ascend_fabric::{EngineCapabilities, Need};
use ascend_mem::{Feature, How};
use ascend_testkit::{assert_ok, role, test_name, Spawn};

use crate::util::setup;

#[test]
fn on_the_emulator_every_need_is_met_and_the_engine_adds_its_rows() {
    let env = setup();
    let caps = EngineCapabilities::probe(&env.rt);
    for need in Need::all() {
        caps.check(need).unwrap_or_else(|m| panic!("{need}: {m}"));
    }
    assert_eq!(
        (caps.hixl_cs().value, &caps.hixl_cs().how),
        (Some(true), &How::Symbols)
    );
    assert_eq!(
        (caps.fabric_mem().value, &caps.fabric_mem().how),
        (Some(true), &How::Probed)
    );
    assert_eq!(
        (caps.aicpu().value, &caps.aicpu().how),
        (Some(false), &How::ByDesign)
    );
    let rows = caps.rows();
    assert_eq!(rows.len(), caps.mem().rows().len() + 3);
    let fm = rows.iter().find(|r| r.name == "fabric mem engine").unwrap();
    assert_eq!((fm.value.as_str(), fm.how.as_str()), ("yes", "probed"));
    drop(caps);
    env.finish();
}

#[test]
fn needs_read_back_by_name() {
    for need in Need::all() {
        assert_eq!(Need::from_name(need.name()), Some(need));
    }
    assert_eq!(Need::from_name(" FabricMem "), Some(Need::FabricMem));
    assert_eq!(
        Need::from_name("symwin"),
        Some(Need::Mem(Feature::SymWindows))
    );
    assert_eq!(Need::from_name("aicpu"), None);
}

/// On A2 there are no FABRIC handles: the Fabric Mem mode is refused with the probe's reason
/// and the fix; HixlCS is still there. (The SoC is read once per process, hence the child.)
#[test]
fn on_a2_the_fabric_mem_mode_is_missing_with_its_reason() {
    let name = test_name!(on_a2_the_fabric_mem_mode_is_missing_with_its_reason);
    if role().as_deref() == Some("a2") {
        let env = setup();
        let caps = EngineCapabilities::probe(&env.rt);
        assert_eq!(caps.fabric_mem().value, Some(false));
        let m = caps.check(Need::FabricMem).unwrap_err();
        assert_eq!(m.feature, "fabricmem");
        assert!(m.why.contains("fabric: ") && m.fix.contains("A3"), "{m}");
        caps.check(Need::HixlCs).unwrap();
        drop(caps);
        env.finish();
        println!("RESULT ok");
        return;
    }
    assert_ok(&Spawn::new(name, "a2").env("ASCEND_SIM_SOC", "A2").output());
}
