//! Capabilities: what the emulator reports and how each answer was found, that probing
//! leaves nothing behind, and the answers of a runtime without a feature (another SoC, hidden
//! symbols, a device that does not exist).

use std::sync::Arc;

use ascend_mem::{
    BatchDirections, ErrorKind, ExportFlags, Feature, How, MemKind, PhysicalMem, ShareKind,
    SocFamily, SymbolGroup,
};
use ascend_testkit::emulator::{assert_clean, runtime_without};
use ascend_testkit::{assert_ok, role, test_name};

use crate::common::{run_child, setup};

#[test]
fn the_emulator_has_every_feature_and_each_answer_says_how_it_was_found() {
    let env = setup();
    let caps = env.rt.capabilities();
    assert!(caps.backend().is_emulator());
    let v = caps.runtime_version();
    assert_eq!((v.value.as_deref(), &v.how), (Some("9.1.0"), &How::Queried));
    for g in caps.groups() {
        assert!(g.present(), "{:?} missing {:?}", g.group, g.missing);
    }
    assert_eq!(caps.device_count(), Some(env.rt.device_count().unwrap()));
    assert_eq!(caps.probed_device(), Some(0));
    let soc = caps.soc().value.clone().expect("a SoC name");
    assert_eq!(
        (soc.name.as_str(), soc.family),
        ("Ascend910_9391", SocFamily::A3)
    );
    assert_eq!(
        (caps.fabric().value, &caps.fabric().how),
        (Some(true), &How::Probed)
    );
    assert_eq!(caps.host_import_location().value, Some(MemKind::Host));
    let batch = caps.batch_directions();
    assert_eq!(
        batch.value,
        Some(BatchDirections::HOST_TO_DEVICE | BatchDirections::DEVICE_TO_HOST)
    );
    let detail = batch.detail.as_deref().unwrap_or_default();
    assert!(detail.starts_with("D2D not tried"), "{detail}");
    let fabric = caps.fabric().detail.as_deref().unwrap_or_default();
    assert!(fabric.contains("another process"), "{fabric}");
    assert_eq!(caps.host_value_write().value, Some(true));
    for f in Feature::ALL {
        caps.check(f).unwrap_or_else(|m| panic!("{f}: {m}"));
    }
    // Found once: a second call gives the same answers without probing again.
    assert!(Arc::ptr_eq(&caps, &env.rt.capabilities()));
    let rows = caps.rows();
    let row = |name: &str| rows.iter().find(|r| r.name == name).expect(name).clone();
    assert_eq!(row("fabric export").value, "yes");
    assert_eq!(row("batch copy directions").value, "H2D, D2H");
    assert!(row("backend").how.contains("emulated"));
    drop(caps);
    env.finish();
}

/// A runtime of its own is probed afresh; every probe frees what it made.
#[test]
fn probing_leaves_no_object_behind() {
    let env = setup();
    let rt = runtime_without(&[]);
    let caps = rt.capabilities();
    assert_eq!(caps.fabric().value, Some(true));
    assert_eq!(caps.host_value_write().value, Some(true));
    drop((caps, rt));
    assert_clean();
    env.finish();
}

/// Hidden symbols are named where they are missing; the probes that need them say so; a
/// table whose HCCL library does not open reports that for the HCCL groups.
#[test]
fn missing_symbols_are_named_and_their_features_refused() {
    let env = setup();
    let rt = runtime_without(&["aclrtMemcpyBatch", "aclrtValueWrite", "aclsysGetVersionStr"]);
    let caps = rt.capabilities();
    assert_eq!(
        caps.group(SymbolGroup::BatchCopy).missing,
        ["aclrtMemcpyBatch"]
    );
    assert_eq!(
        caps.group(SymbolGroup::StreamValues).missing,
        ["aclrtValueWrite"]
    );
    assert!(caps.group(SymbolGroup::Vmm).present());
    let v = caps.runtime_version();
    assert_eq!((v.value.as_deref(), &v.how), (None, &How::Symbols));
    assert!(v.detail.as_deref().unwrap().contains("aclsysGetVersionStr"));
    assert!(
        matches!(&caps.batch_directions().how, How::NotProbed(w) if w.contains("aclrtMemcpyBatch"))
    );
    let m = caps.check(Feature::BatchCopy).unwrap_err();
    assert_eq!(m.feature, "batch");
    assert!(m.why.contains("aclrtMemcpyBatch"), "{m}");
    let m = caps.check(Feature::HostValueWrite).unwrap_err();
    assert!(m.why.contains("aclrtValueWrite"), "{m}");
    // This table is not the emulator's own, so HCCL is searched for as on a real install.
    let hccl = caps.group(SymbolGroup::Hccl);
    assert!(hccl.unavailable.is_some() && !hccl.present());
    assert!(caps
        .check(Feature::Hccl)
        .unwrap_err()
        .why
        .contains("could not be opened"));
    assert!(caps.check(Feature::Fabric).is_ok());
    drop((caps, rt));
    ascend_sim::fault::clear();
    env.finish();
}

#[test]
fn capabilities_on_probes_the_device_named_and_refuses_one_that_does_not_exist() {
    let env = setup();
    let count = env.rt.device_count().unwrap();
    let e = env.rt.capabilities_on(count as i32 + 3).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let text = e.to_string();
    assert!(
        text.contains("capabilities_on") && text.contains(&(count + 3).to_string()),
        "{text}"
    );
    assert_eq!(
        env.rt.capabilities_on(-1).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let on1 = env.rt.capabilities_on(1).unwrap();
    assert_eq!(on1.probed_device(), Some(1));
    assert_eq!(on1.fabric().value, Some(true));
    drop(on1);
    env.finish();
}

/// On A2 the emulator has no FABRIC handles, no NoUC reservation and no symmetric windows:
/// the probe is refused with the runtime's words, the others are the product's. (The SoC is
/// read once per process, hence the child.)
#[test]
fn a2_lacks_fabric_nouc_and_symmetric_windows() {
    let name = test_name!(a2_lacks_fabric_nouc_and_symmetric_windows);
    if role().as_deref() == Some("a2") {
        let env = setup();
        let caps = env.rt.capabilities();
        assert_eq!(
            caps.soc().value.as_ref().map(|s| s.family),
            Some(SocFamily::A2)
        );
        let f = caps.fabric();
        assert_eq!((f.value, &f.how), (Some(false), &How::Probed));
        assert!(f.detail.is_some());
        let m = caps.check(Feature::Fabric).unwrap_err();
        assert!(m.why.contains("refused"), "{m}");
        for feature in [Feature::NoUc, Feature::SymWindows, Feature::PeerPointers] {
            let m = caps.check(feature).unwrap_err();
            assert!(m.why.contains("Atlas A2"), "{feature}: {m}");
        }
        caps.check(Feature::Vmm).unwrap();
        caps.check(Feature::Hccl).unwrap();
        drop(caps);
        env.finish();
        println!("RESULT ok");
        return;
    }
    assert_ok(&run_child(name, "a2", &[("ASCEND_SIM_SOC", "A2")]));
}

/// With imports of device memory refused in the exporting process (as CANN documents them),
/// the probes still find every feature: none of them imports HBM it exported itself. (The
/// rule is read once per process, hence the child.)
#[test]
fn no_probe_imports_device_memory_it_exported() {
    let name = test_name!(no_probe_imports_device_memory_it_exported);
    if role().as_deref() == Some("strict") {
        let env = setup();
        let dev = env.rt.device(0).unwrap();
        // The rule holds: this process cannot import the HBM it exported...
        let mem = PhysicalMem::hbm(&dev, dev.round_up(1).unwrap()).unwrap();
        let h = mem
            .export(ShareKind::Fabric, ExportFlags::DISABLE_PID_VALIDATION)
            .unwrap();
        let e = h.shared().import(&dev).unwrap_err();
        assert_eq!(e.code().map(|c| c.0), Some(207000), "{e}");
        drop((h, mem));
        let caps = env.rt.capabilities();
        for f in Feature::ALL {
            caps.check(f).unwrap_or_else(|m| panic!("{f}: {m}"));
        }
        assert_eq!(caps.host_import_location().value, Some(MemKind::Host));
        drop((caps, dev));
        env.finish();
        println!("RESULT ok");
        return;
    }
    assert_ok(&run_child(
        name,
        "strict",
        &[("ASCEND_SIM_IMPORT", "cross-process")],
    ));
}

#[test]
fn feature_names_read_back() {
    for f in Feature::ALL {
        assert_eq!(Feature::from_name(f.name()), Some(f));
        assert_eq!(Feature::from_name(&f.name().to_uppercase()), Some(f));
    }
    assert_eq!(Feature::from_name("warp-drive"), None);
}

/// `aclsysGetVersionStr` through the ffi layer: the emulated packages' version, an absent
/// package refused as the runtime does (`ACL_ERROR_INVALID_FILE`), a name with a NUL byte
/// refused before the call.
#[test]
fn package_versions_and_their_errors() {
    let env = setup();
    let lib = env.rt.acl();
    assert_eq!(
        ascend_mem::ffi::init::package_version(lib, "toolkit").unwrap(),
        "9.1.0"
    );
    let e = ascend_mem::ffi::init::package_version(lib, "driver").unwrap_err();
    assert_eq!(
        e.code().map(|c| c.0),
        Some(ascend_mem::acl::ACL_ERROR_INVALID_FILE)
    );
    let e = ascend_mem::ffi::init::package_version(lib, "run\0time").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("aclsysGetVersionStr"), "{e}");
    env.finish();
}
