//! Batched copies (`aclrtMemcpyBatch`, `…V2`, `…Async`, `…AsyncV2`) through the loader table:
//! every argument rule with its code and `failIndex` in all four forms, stream order, failures
//! at execution, aborts. Every test runs in-process (threaded mode) and again in a child process
//! with `ASCEND_SIM_STREAM_MODE=deterministic` (see `deterministic_mode`).

#[macro_use]
mod common;

use std::ffi::c_void;
use std::ptr::null_mut;

use ascend_sim::fault;
use ascend_sim::testing::hold_stream;
use common::*;

const CHILD: &str = "ASCEND_SIM_BATCH_CHILD";
const NONE: usize = usize::MAX;

fn read_dev(d: *mut c_void, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    ok!(aclrtMemcpy(
        out.as_mut_ptr().cast(),
        n,
        d,
        n,
        ACL_MEMCPY_DEVICE_TO_HOST
    ));
    out
}

fn loc(type_: aclrtMemLocationType, id: u32) -> aclrtMemLocation {
    aclrtMemLocation { id, type_ }
}

fn h2d(dev: u32) -> aclrtMemcpyBatchAttr {
    aclrtMemcpyBatchAttr {
        dstLoc: loc(ACL_MEM_LOCATION_TYPE_DEVICE, dev),
        srcLoc: loc(ACL_MEM_LOCATION_TYPE_HOST, 0),
        rsv: [0; 16],
    }
}

fn d2h(dev: u32) -> aclrtMemcpyBatchAttr {
    aclrtMemcpyBatchAttr {
        dstLoc: loc(ACL_MEM_LOCATION_TYPE_HOST, 0),
        srcLoc: loc(ACL_MEM_LOCATION_TYPE_DEVICE, dev),
        rsv: [0; 16],
    }
}

/// The arguments of one batch call, as owned arrays a case can break.
#[derive(Clone)]
struct Args {
    dsts: Vec<*mut c_void>,
    maxs: Vec<usize>,
    srcs: Vec<*mut c_void>,
    sizes: Vec<usize>,
    attrs: Vec<aclrtMemcpyBatchAttr>,
    idx: Vec<usize>,
    /// Overrides: NULL arrays, counts.
    null: &'static str,
    num: Option<usize>,
    num_attrs: Option<usize>,
}

impl Args {
    fn new(
        copies: &[(*mut c_void, *mut c_void, usize)],
        attrs: &[aclrtMemcpyBatchAttr],
        idx: &[usize],
    ) -> Args {
        Args {
            dsts: copies.iter().map(|c| c.0).collect(),
            maxs: copies.iter().map(|c| c.2).collect(),
            srcs: copies.iter().map(|c| c.1).collect(),
            sizes: copies.iter().map(|c| c.2).collect(),
            attrs: attrs.to_vec(),
            idx: idx.to_vec(),
            null: "",
            num: None,
            num_attrs: None,
        }
    }

    fn ptr<T>(&mut self, v: &mut Vec<T>, name: &str) -> *mut T {
        if self.null == name {
            null_mut()
        } else {
            v.as_mut_ptr()
        }
    }

    /// Calls `form` (0 Batch, 1 BatchV2, 2 BatchAsync, 3 BatchAsyncV2); returns the code and
    /// `failIndex` (the sentinel 7777 when the form has none).
    fn call(&self, form: u32, s: aclrtStream) -> (i32, usize) {
        let mut a = self.clone();
        let (mut d, mut m, mut sr, mut sz, mut at, mut ix) = (
            a.dsts.clone(),
            a.maxs.clone(),
            a.srcs.clone(),
            a.sizes.clone(),
            a.attrs.clone(),
            a.idx.clone(),
        );
        let (d, m, sr, sz, at, ix) = (
            a.ptr(&mut d, "dsts"),
            a.ptr(&mut m, "destMaxs"),
            a.ptr(&mut sr, "srcs"),
            a.ptr(&mut sz, "sizes"),
            a.ptr(&mut at, "attrs"),
            a.ptr(&mut ix, "attrsIndexes"),
        );
        let n = a.num.unwrap_or(a.dsts.len());
        let na = a.num_attrs.unwrap_or(a.attrs.len());
        let mut fail = 7777usize;
        let fp = if a.null == "failIndex" {
            null_mut()
        } else {
            &mut fail as *mut usize
        };
        let code = match form {
            0 => acl!(aclrtMemcpyBatch(d, m, sr, sz, n, at, ix, na, fp)),
            1 => acl!(aclrtMemcpyBatchV2(d, m, sr, sz, n, at, ix, na)),
            2 => acl!(aclrtMemcpyBatchAsync(d, m, sr, sz, n, at, ix, na, fp, s)),
            _ => acl!(aclrtMemcpyBatchAsyncV2(d, m, sr, sz, n, at, ix, na, s)),
        };
        (code, fail)
    }
}

#[test]
fn deterministic_mode() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    rerun_deterministic(CHILD);
}

#[test]
fn copies_in_all_four_forms() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let d = dev_buf(4096);
    for form in 0..4 {
        let src: Vec<u8> = (0..300)
            .map(|i| (i as u8).wrapping_mul(form as u8 + 3))
            .collect();
        let mut back = vec![0u8; 300];
        let sp = src.as_ptr() as *mut c_void;
        let at = |o: usize| d.cast::<u8>().wrapping_add(o).cast::<c_void>();
        // Three copies under two attributes (the second covers copies 1 and 2).
        let up = Args::new(
            &[
                (at(0), sp, 100),
                (at(1000), sp.cast::<u8>().wrapping_add(100).cast(), 100),
                (at(2000), sp.cast::<u8>().wrapping_add(200).cast(), 100),
            ],
            &[h2d(0), h2d(0)],
            &[0, 1],
        );
        let bp = back.as_mut_ptr().cast::<u8>();
        let down = Args::new(
            &[
                (bp.cast(), at(0), 100),
                (bp.wrapping_add(100).cast(), at(1000), 100),
                (bp.wrapping_add(200).cast(), at(2000), 100),
            ],
            &[d2h(0)],
            &[0],
        );
        let (code, fail) = up.call(form, s);
        assert_eq!(code, 0, "form {form}: {}", last_msg());
        if form != 1 && form != 3 {
            assert_eq!(fail, NONE, "form {form}");
        }
        let (code, _) = down.call(form, s);
        assert_eq!(code, 0, "form {form}: {}", last_msg());
        ok!(aclrtSynchronizeStream(s));
        assert!(back == src, "form {form}");
    }
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

/// Every argument rule, in every form: (case, code, failIndex), and nothing copied.
#[test]
fn argument_rules_with_codes_and_fail_index() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let d = dev_buf(4096);
    let src = vec![0x5Au8; 256];
    let sp = src.as_ptr() as *mut c_void;
    let mut plain = vec![0u8; 256];
    let pp: *mut c_void = plain.as_mut_ptr().cast();
    let at = |o: usize| d.cast::<u8>().wrapping_add(o).cast::<c_void>();
    let good = Args::new(
        &[(at(0), sp, 64), (at(64), sp, 64), (at(128), sp, 64)],
        &[h2d(0)],
        &[0],
    );
    let with = |f: &dyn Fn(&mut Args)| {
        let mut a = good.clone();
        f(&mut a);
        a
    };
    let mut rsv = h2d(0);
    rsv.rsv[15] = 1;
    let mut bad_type = h2d(0);
    bad_type.srcLoc.type_ = ACL_MEM_LOCATION_TYPE_UNREGISTERED;
    let h2h = aclrtMemcpyBatchAttr {
        dstLoc: loc(ACL_MEM_LOCATION_TYPE_HOST, 0),
        ..h2d(0)
    };
    let cases: Vec<(&str, Args, i32, usize)> = vec![
        (
            "dsts NULL",
            with(&|a| a.null = "dsts"),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "destMaxs NULL",
            with(&|a| a.null = "destMaxs"),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "srcs NULL",
            with(&|a| a.null = "srcs"),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "sizes NULL",
            with(&|a| a.null = "sizes"),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "attrs NULL",
            with(&|a| a.null = "attrs"),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "attrsIndexes NULL",
            with(&|a| a.null = "attrsIndexes"),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "numBatches 0",
            with(&|a| a.num = Some(0)),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "numAttrs 0",
            with(&|a| a.num_attrs = Some(0)),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "numAttrs > numBatches",
            with(&|a| {
                a.attrs = vec![h2d(0); 4];
                a.idx = vec![0, 1, 2, 3];
            }),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "attrsIndexes[0] != 0",
            with(&|a| a.idx = vec![1]),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "indexes not increasing",
            with(&|a| {
                a.attrs = vec![h2d(0); 3];
                a.idx = vec![0, 2, 2];
            }),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "last index >= numBatches",
            with(&|a| {
                a.attrs = vec![h2d(0); 2];
                a.idx = vec![0, 3];
            }),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "rsv not zero",
            with(&|a| a.attrs = vec![rsv]),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "location type",
            with(&|a| a.attrs = vec![bad_type]),
            ACL_ERROR_INVALID_PARAM,
            NONE,
        ),
        (
            "dst NULL at 1",
            with(&|a| a.dsts[1] = null_mut()),
            ACL_ERROR_INVALID_PARAM,
            1,
        ),
        (
            "src NULL at 2",
            with(&|a| a.srcs[2] = null_mut()),
            ACL_ERROR_INVALID_PARAM,
            2,
        ),
        (
            "size > destMax at 1",
            with(&|a| a.maxs[1] = 63),
            ACL_ERROR_INVALID_PARAM,
            1,
        ),
        (
            "past the allocation at 2",
            with(&|a| a.dsts[2] = at(4090)),
            ACL_ERROR_RT_DEVICE_MEM_ERROR,
            2,
        ),
        (
            "plain host dst under a DEVICE location at 1",
            with(&|a| a.dsts[1] = pp),
            ACL_ERROR_RT_PARAM_INVALID,
            1,
        ),
        (
            "device src under a HOST location at 2",
            with(&|a| a.srcs[2] = at(3000)),
            ACL_ERROR_RT_PARAM_INVALID,
            2,
        ),
        (
            "DEVICE location of another device at 0",
            with(&|a| a.attrs = vec![h2d(1)]),
            ACL_ERROR_RT_PARAM_INVALID,
            0,
        ),
        (
            "host to host at 1",
            with(&|a| {
                a.attrs = vec![h2d(0), h2h];
                a.idx = vec![0, 1];
            }),
            ACL_ERROR_INVALID_PARAM,
            1,
        ),
        (
            "mixed directions at 2",
            with(&|a| {
                a.attrs = vec![h2d(0), d2h(0)];
                a.idx = vec![0, 2];
                a.dsts[2] = pp;
                a.srcs[2] = at(3000);
            }),
            ACL_ERROR_INVALID_PARAM,
            2,
        ),
    ];
    for form in 0..4 {
        for (name, a, code, fail) in &cases {
            let (c, f) = a.call(form, s);
            assert_eq!(c, *code, "form {form}, {name}: {}", last_msg());
            if form == 0 || form == 2 {
                assert_eq!(f, *fail, "form {form}, {name}: failIndex");
            } else {
                assert_eq!(f, 7777, "form {form} has no failIndex");
            }
        }
        let (c, _) = with(&|a| a.null = "failIndex").call(form, s);
        let want = if form == 0 || form == 2 {
            ACL_ERROR_INVALID_PARAM
        } else {
            0
        };
        assert_eq!(c, want, "form {form}, failIndex NULL");
        if want == 0 {
            ok!(aclrtSynchronizeStream(s));
            ok!(aclrtMemset(d, 4096, 0, 4096));
        }
    }
    // A rejected stream handle is not tied to one copy.
    let mut dead = null_mut();
    ok!(aclrtCreateStream(&mut dead));
    ok!(aclrtDestroyStream(dead));
    assert_eq!(good.call(2, dead), (ACL_ERROR_RT_INVALID_HANDLE, NONE));
    // Nothing of a rejected batch was copied, not even the copies before the bad one.
    ok!(aclrtSynchronizeStream(s));
    assert_eq!(read_dev(d, 4096), vec![0u8; 4096]);
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

/// Copies of one batch that stay inside one mapping are checked against it without a new
/// lookup each; a copy that leaves it (into a second mapping, or past the mapped part of the
/// reservation) is still looked up and refused at its index, in every form.
#[test]
fn copies_leaving_a_mapping_are_checked_in_full() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    const G: usize = 2 << 20;
    let va = reserve(2 * G);
    let (h0, h1) = (malloc_phys(G, &dev_prop(0)), malloc_phys(G, &dev_prop(0)));
    ok!(aclrtMapMem(va, G, 0, h0, 0));
    let at = |o: usize| va.cast::<u8>().wrapping_add(o).cast::<c_void>();
    let src = vec![7u8; 256];
    let sp = src.as_ptr() as *mut c_void;
    let run = |last: usize| {
        Args::new(
            &[(at(0), sp, 64), (at(4096), sp, 64), (at(last), sp, 128)],
            &[h2d(0)],
            &[0],
        )
    };
    for form in [0, 2] {
        // Past the only mapping: reserved but unmapped.
        let (c, f) = run(G - 64).call(form, s);
        assert_eq!(
            (c, f),
            (ACL_ERROR_RT_DEVICE_MEM_ERROR, 2),
            "form {form}: {}",
            last_msg()
        );
    }
    // With the second half mapped too, the same range spans two mappings of one class: fine.
    ok!(aclrtMapMem(at(G), G, 0, h1, 0));
    for form in 0..4 {
        assert_eq!(
            run(G - 64).call(form, s).0,
            0,
            "form {form}: {}",
            last_msg()
        );
    }
    ok!(aclrtSynchronizeStream(s));
    assert_eq!(read_dev(at(G - 64), 128), vec![7u8; 128]);
    ok!(aclrtUnmapMem(at(G)));
    ok!(aclrtUnmapMem(va));
    ok!(aclrtFreePhysical(h0));
    ok!(aclrtFreePhysical(h1));
    ok!(aclrtReleaseMemAddress(va));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn message_names_the_copy() {
    let _g = LOCK.lock();
    set_device(0);
    let d = dev_buf(4096);
    let src = [1u8; 64];
    let sp = src.as_ptr() as *mut c_void;
    let mut a = Args::new(&[(d, sp, 64), (d, sp, 64)], &[h2d(0)], &[0]);
    a.maxs[1] = 10;
    assert_eq!(a.call(0, null_mut()), (ACL_ERROR_INVALID_PARAM, 1));
    let m = last_msg();
    assert!(
        m.contains("aclrtMemcpyBatch")
            && m.contains("copy 1")
            && m.contains("size 64 exceeds destMax 10"),
        "{m}"
    );
    ok!(aclrtFree(d));
    reset_device(0);
    assert_clean();
}

#[test]
fn async_batch_is_stream_ordered() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let d = dev_buf(1 << 20);
    let src: Vec<u8> = (0..1 << 20).map(|i| (i % 253) as u8).collect();
    let mut back = vec![0u8; 1 << 20];
    let half = 1 << 19;
    let sp = src.as_ptr() as *mut c_void;
    let hold = hold_stream(s);
    let up = Args::new(
        &[
            (d, sp, half),
            (
                d.cast::<u8>().wrapping_add(half).cast(),
                sp.cast::<u8>().wrapping_add(half).cast(),
                half,
            ),
        ],
        &[h2d(0)],
        &[0],
    );
    assert_eq!(up.call(2, s), (0, NONE));
    ok!(aclrtMemcpyAsync(
        back.as_mut_ptr().cast(),
        1 << 20,
        d,
        1 << 20,
        ACL_MEMCPY_DEVICE_TO_HOST,
        s
    ));
    // Held: nothing has landed.
    assert_eq!(read_dev(d, 16), vec![0u8; 16]);
    hold.release();
    ok!(aclrtSynchronizeStream(s));
    assert!(back == src);
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn failure_at_execution_is_the_streams_error() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let (va, h) = mapped(MIB2, &dev_prop(0));
    let src = [3u8; 64];
    let hold = hold_stream(s);
    let a = Args::new(&[(va, src.as_ptr() as *mut c_void, 64)], &[h2d(0)], &[0]);
    assert_eq!(a.call(3, s).0, 0);
    // Unmapped before the stream reaches the batch.
    ok!(aclrtUnmapMem(va));
    hold.release();
    expect_code!(ACL_ERROR_RT_DEVICE_MEM_ERROR, aclrtSynchronizeStream(s));
    ok!(aclrtFreePhysical(h));
    ok!(aclrtReleaseMemAddress(va));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn abort_discards_a_queued_batch() {
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let d = dev_buf(4096);
    let src = [9u8; 64];
    let hold = hold_stream(s);
    let a = Args::new(&[(d, src.as_ptr() as *mut c_void, 64)], &[h2d(0)], &[0]);
    assert_eq!(a.call(2, s), (0, NONE));
    ok!(aclrtStreamAbort(s));
    drop(hold);
    expect_code!(ACL_ERROR_RT_STREAM_ABORT, aclrtSynchronizeStream(s));
    assert_eq!(read_dev(d, 64), vec![0u8; 64]);
    ok!(aclrtFree(d));
    ok!(aclrtDestroyStream(s));
    reset_device(0);
    assert_clean();
}

#[test]
fn null_stream_counts_and_faults() {
    let _g = LOCK.lock();
    set_device(0);
    let d = dev_buf(4096);
    let src = [4u8; 64];
    let a = Args::new(&[(d, src.as_ptr() as *mut c_void, 64)], &[h2d(0)], &[0]);
    let names = [
        "aclrtMemcpyBatch",
        "aclrtMemcpyBatchV2",
        "aclrtMemcpyBatchAsync",
        "aclrtMemcpyBatchAsyncV2",
    ];
    let before: Vec<u64> = names.iter().map(|n| fault::calls(n)).collect();
    for (form, name) in names.iter().enumerate() {
        fault::fail_nth(name, 1, ACL_ERROR_RT_DRV_INTERNAL_ERROR);
        assert_eq!(
            a.call(form as u32, null_mut()).0,
            ACL_ERROR_RT_DRV_INTERNAL_ERROR,
            "{name}"
        );
        assert!(last_msg().contains(name));
        // NULL stream: the default stream.
        assert_eq!(a.call(form as u32, null_mut()).0, 0, "{name}");
    }
    ok!(aclrtSynchronizeStream(null_mut()));
    assert_eq!(read_dev(d, 64), vec![4u8; 64]);
    for (n, b) in names.iter().zip(before) {
        assert_eq!(fault::calls(n) - b, 2, "{n}");
    }
    fault::clear();
    ok!(aclrtFree(d));
    reset_device(0);
    assert_clean();
}

/// With `ASCEND_SIM_CALL_NS` set, every copy submission costs the calling thread at least that
/// long: an `aclrtMemcpyAsync` one charge, a batch one charge per copy. Checked in a child (the
/// configuration is read once per process); the bounds are minimums the busy wait
/// guarantees, never a race.
#[test]
fn the_call_cost_knob_charges_every_copy_submission() {
    const COST_NS: u64 = 2_000_000;
    const KNOB_CHILD: &str = "ASCEND_SIM_CALL_COST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    if std::env::var_os(KNOB_CHILD).is_none() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "the_call_cost_knob_charges_every_copy_submission",
            ])
            .args(["--nocapture"])
            .env(KNOB_CHILD, "1")
            .env("ASCEND_SIM_CALL_NS", COST_NS.to_string())
            .output()
            .unwrap();
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && so.contains("CALL COST ok"),
            "child failed:\n{so}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    let _g = LOCK.lock();
    set_device(0);
    let s = stream();
    let d = dev_buf(1 << 16);
    let at = |o: usize| d.cast::<u8>().wrapping_add(o).cast::<c_void>();
    let src = vec![7u8; 4096];
    let sp = src.as_ptr() as *mut c_void;
    let t0 = std::time::Instant::now();
    for i in 0..3 {
        ok!(aclrtMemcpyAsync(
            at(i * 4096),
            4096,
            sp,
            4096,
            ACL_MEMCPY_HOST_TO_DEVICE,
            s
        ));
    }
    let single = t0.elapsed();
    assert!(single.as_nanos() >= 3 * u128::from(COST_NS), "{single:?}");
    let copies: Vec<_> = (0..4).map(|i| (at(0x8000 + i * 4096), sp, 4096)).collect();
    let batch = Args::new(&copies, &[h2d(0)], &[0]);
    let t1 = std::time::Instant::now();
    let (code, fail) = batch.call(2, s);
    let took = t1.elapsed();
    assert_eq!((code, fail), (0, NONE), "{}", last_msg());
    assert!(took.as_nanos() >= 4 * u128::from(COST_NS), "{took:?}");
    ok!(aclrtSynchronizeStream(s));
    assert_eq!(read_dev(at(0x8000), 4096), src);
    ok!(aclrtDestroyStream(s));
    println!("CALL COST ok");
}
