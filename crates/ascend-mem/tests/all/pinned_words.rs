//! `PinnedWords` and `Stream::value_write_pinned`: a stream's write lands in pinned host memory
//! the host reads with no runtime call, in the stream's order; the stream keeps the block while
//! a write into it is pending; a stream whose work is discarded never writes; typed errors.

use crate::common::setup;
use ascend_mem::{Error, ErrorKind, PinnedWords, Stream};
use ascend_sim::{fault, testing::hold_stream};
use ascend_testkit::emulator::runtime_without;

#[test]
fn a_streams_write_lands_where_the_host_reads_it() {
    let env = setup();
    let w = PinnedWords::new(&env.dev, 4).unwrap();
    assert_eq!(w.len(), 4);
    assert!(!w.is_empty());
    assert!((0..4).all(|i| w.load(i).unwrap() == 0));
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    s.value_write_pinned(&w, 2, 7).unwrap();
    s.value_write_pinned(&w, 2, 9).unwrap();
    // Behind the held task: nothing written yet.
    assert_eq!(w.load(2).unwrap(), 0);
    hold.release();
    s.synchronize().unwrap();
    // In the stream's order: the second write is the one that stays.
    assert_eq!(w.load(2).unwrap(), 9);
    assert_eq!(w.load(1).unwrap(), 0);
    w.store(1, 5).unwrap();
    assert_eq!(w.load(1).unwrap(), 5);
    drop((s, w));
    env.finish();
}

#[test]
fn the_stream_keeps_the_block_while_a_write_is_pending() {
    let env = setup();
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    let w = PinnedWords::new(&env.dev, 1).unwrap();
    s.value_write_pinned(&w, 0, 1).unwrap();
    drop(w);
    assert_eq!(ascend_sim::counters().host_mallocs, 1, "kept by the stream");
    hold.release();
    // Freed early, the write would have failed here.
    s.synchronize().unwrap();
    assert_eq!(
        ascend_sim::counters().host_mallocs,
        0,
        "released by the sync"
    );
    drop(s);
    env.finish();
}

#[test]
fn an_aborted_stream_never_writes() {
    let env = setup();
    let w = PinnedWords::new(&env.dev, 1).unwrap();
    let mut s = Stream::new(&env.dev).unwrap();
    let hold = hold_stream(s.as_raw());
    s.value_write_pinned(&w, 0, 3).unwrap();
    assert!(!s.is_complete().unwrap());
    s.abort().unwrap();
    drop(hold);
    let e = s.synchronize().unwrap_err();
    assert_eq!(
        e.code().map(|c| c.0),
        Some(acl::ACL_ERROR_RT_STREAM_ABORT),
        "{e}"
    );
    assert_eq!(w.load(0).unwrap(), 0, "the discarded write never landed");
    drop((s, w));
    env.finish();
}

#[test]
fn bad_arguments_are_typed_errors() {
    let env = setup();
    let e = PinnedWords::new(&env.dev, 0).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                api: "aclrtMallocHost",
                what: "words",
                value: 0
            }
        ),
        "{e:?}"
    );
    let e = PinnedWords::new(&env.dev, usize::MAX / 4).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e:?}");
    let w = PinnedWords::new(&env.dev, 2).unwrap();
    for e in [w.load(2).unwrap_err(), w.store(5, 1).unwrap_err()] {
        assert!(
            matches!(
                e,
                Error::OutOfBounds {
                    len: 8,
                    size: 16,
                    ..
                }
            ),
            "{e:?}"
        );
    }
    let mut s = Stream::new(&env.dev).unwrap();
    let e = s.value_write_pinned(&w, 2, 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfBounds {
                what: "aclrtValueWrite",
                offset: 16,
                ..
            }
        ),
        "{e:?}"
    );
    // The runtime's refusal names the call and its code.
    fault::fail_nth("aclrtValueWrite", 1, acl::ACL_ERROR_RT_PARAM_INVALID);
    let e = s.value_write_pinned(&w, 0, 1).unwrap_err();
    fault::clear();
    assert_eq!(e.api(), Some("aclrtValueWrite"));
    assert_eq!(e.code().map(|c| c.0), Some(acl::ACL_ERROR_RT_PARAM_INVALID));
    fault::fail_nth("aclrtMallocHost", 1, acl::ACL_ERROR_RT_MEMORY_ALLOCATION);
    let e = PinnedWords::new(&env.dev, 1).unwrap_err();
    fault::clear();
    assert_eq!(e.api(), Some("aclrtMallocHost"), "{e:?}");
    s.synchronize().unwrap();
    drop((s, w));
    env.finish();
}

/// Blocks and streams of different runtimes do not mix; a runtime without the calls says
/// which symbol it lacks.
#[test]
fn other_runtimes_and_missing_calls() {
    let env = setup();
    // Each runtime's table resolves a symbol at its first use: every block is made before the
    // symbol it needs is hidden.
    let w = PinnedWords::new(&env.dev, 1).unwrap();
    let no_write = runtime_without(&["aclrtValueWrite"]);
    let dev = no_write.device(0).unwrap();
    let theirs = PinnedWords::new(&dev, 1).unwrap();
    let mut s = Stream::new(&dev).unwrap();
    let e = s.value_write_pinned(&theirs, 0, 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MissingSymbol {
                symbol: "aclrtValueWrite",
                ..
            }
        ),
        "{e:?}"
    );
    let e = s.value_write_pinned(&w, 0, 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::WrongDevice {
                what: "aclrtValueWrite",
                ..
            }
        ),
        "{e:?}"
    );
    let no_malloc = runtime_without(&["aclrtMallocHost"]);
    let e = PinnedWords::new(&no_malloc.device(0).unwrap(), 1).unwrap_err();
    assert!(
        matches!(
            e,
            Error::MissingSymbol {
                symbol: "aclrtMallocHost",
                ..
            }
        ),
        "{e:?}"
    );
    fault::clear();
    drop((s, theirs, dev, w));
    env.finish();
}
