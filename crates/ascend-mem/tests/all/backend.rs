//! Backend selection: `BackendChoice` reads `ASCEND_MEM_BACKEND` and refuses a bad value naming
//! it; `ASCEND_MEM_BACKEND=cann` without CANN fails at once with the paths tried and the fix
//! (no panic); the named fallback to the emulator logs and keeps the load error;
//! `ASCEND_ACL_LIB=<libascend_sim.so>` takes the dlopen path; the emulator's shared library
//! opened by path runs a full round trip. Environment-dependent cases run in child processes
//! (the loader's search happens once per process).

use std::time::{Duration, Instant};

use crate::common::{pattern, run_child, setup, sim_library};
use ascend_mem::prelude::*;
use ascend_mem::{
    Backend, BackendChoice, DeviceBuffer, Error, ErrorKind, HostBuffer, Runtime, Stream,
};
use ascend_testkit::{role, test_name};

const MIB2: usize = 2 << 20;

fn roundtrip(rt: &Runtime) -> ascend_mem::Result<()> {
    let dev = rt.device(0)?;
    let a = DeviceBuffer::new(&dev, MIB2)?;
    let h = HostBuffer::new(&dev, MIB2)?;
    let data = pattern(7, MIB2);
    a.write_from(&data, 0)?;
    let mut s = Stream::new(&dev)?;
    s.copy_async(&h.as_slice(), &a.as_slice())?;
    s.synchronize()?;
    assert_eq!(h.to_vec()?, data);
    Ok(())
}

/// The child side of the tests here that spawn themselves, by role.
fn child_main(role: &str) {
    let role = match role.strip_suffix("-logged") {
        Some(r) => {
            tracing_subscriber::fmt()
                .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
                .with_writer(std::io::stdout)
                .with_ansi(false)
                .init();
            r.to_owned()
        }
        None => role.to_owned(),
    };
    if role == "choice" {
        match BackendChoice::from_env() {
            Ok(c) => println!("RESULT ok {c:?}\nEND"),
            Err(e) => println!("RESULT err {:?}\n{e}\n{e:?}\nEND", e.kind()),
        }
        return;
    }
    let rt = match role.as_str() {
        "from-env" => Runtime::from_env(),
        "or-emulator" => Runtime::from_env_or_emulator(),
        other => panic!("unknown role {other}"),
    };
    match rt {
        Ok(rt) => {
            let kind = match rt.backend() {
                Backend::Cann { .. } => "cann",
                Backend::EmulatorInProcess => "sim-in-process",
                Backend::EmulatorDl { .. } => "sim-dlopen",
                _ => "other",
            };
            roundtrip(&rt).unwrap();
            if let Some(why) = rt.fallback_reason() {
                println!("FALLBACK {} paths tried", why.attempts.len());
            }
            println!("RESULT ok {kind}\nEND");
        }
        Err(e) => println!("RESULT err {:?}\n{e}\n{e:?}\nEND", e.kind()),
    }
}

/// The child's report: from `RESULT ` to the `END` line.
fn result(out: &std::process::Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match text.split_once("RESULT ") {
        Some((_, r)) => r.split("\nEND").next().unwrap_or(r).trim().to_string(),
        None => format!(
            "no RESULT line; stdout: {text}; stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn cann_without_cann_fails_at_once_with_paths_and_fix() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let t = Instant::now();
    let out = run_child(
        test_name!(cann_without_cann_fails_at_once_with_paths_and_fix),
        "from-env",
        &[
            ("ASCEND_MEM_BACKEND", "cann"),
            ("ASCEND_ACL_LIB", "/nonexistent/ascend/libascendcl.so"),
            ("ASCEND_HOME_PATH", "/nonexistent/home"),
        ],
    );
    assert!(out.status.success(), "no panic: {out:?}");
    assert!(t.elapsed() < Duration::from_secs(20));
    let r = result(&out);
    assert!(r.starts_with("err Unavailable"), "{r}");
    assert!(
        r.contains("/nonexistent/ascend/libascendcl.so"),
        "lists the path tried: {r}"
    );
    assert!(r.contains("fix:"), "says how to fix it: {r}");
    assert!(
        r.contains("ASCEND_ACL_LIB") && r.contains("ASCEND_MEM_BACKEND=sim"),
        "{r}"
    );
}

#[test]
fn cann_search_path_lists_every_candidate() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let out = run_child(
        test_name!(cann_search_path_lists_every_candidate),
        "from-env",
        &[
            ("ASCEND_MEM_BACKEND", "cann"),
            ("ASCEND_ACL_LIB", ""),
            ("ASCEND_HOME_PATH", "/nonexistent/home"),
        ],
    );
    assert!(out.status.success(), "no panic: {out:?}");
    let r = result(&out);
    assert!(r.starts_with("err Unavailable"), "{r}");
    for p in [
        "/nonexistent/home/lib64/libascendcl.so",
        "/nonexistent/home/lib64/libacl_rt.so",
        "libascendcl.so",
    ] {
        assert!(r.contains(p), "lists {p}: {r}");
    }
}

/// Production is never silently emulated: with nothing set and no CANN, `from_env` is the
/// load error, which names the switch to the emulator.
#[test]
fn unset_backend_without_cann_is_the_load_error() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let out = run_child(
        test_name!(unset_backend_without_cann_is_the_load_error),
        "from-env",
        &[
            ("ASCEND_MEM_BACKEND", ""),
            ("ASCEND_ACL_LIB", "/nonexistent/ascend/libascendcl.so"),
            ("ASCEND_HOME_PATH", "/nonexistent/home"),
        ],
    );
    let r = result(&out);
    assert!(r.starts_with("err Unavailable"), "{r}");
    assert!(r.contains("ASCEND_MEM_BACKEND=sim"), "{r}");
}

/// The fallback a program asks for by name runs on the emulator, and says so at WARN.
#[test]
fn unset_backend_with_the_named_fallback_runs_on_the_emulator_and_warns() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let out = run_child(
        test_name!(unset_backend_with_the_named_fallback_runs_on_the_emulator_and_warns),
        "or-emulator-logged",
        &[
            ("ASCEND_MEM_BACKEND", ""),
            ("ASCEND_ACL_LIB", "/nonexistent/ascend/libascendcl.so"),
            ("ASCEND_HOME_PATH", "/nonexistent/home"),
        ],
    );
    assert_eq!(result(&out), "ok sim-in-process", "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let warns: Vec<_> = text
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("running on the emulator"))
        .collect();
    assert_eq!(warns.len(), 1, "one WARN line: {text}");
    // The fallback itself is logged with the load error, and the runtime keeps that error.
    assert!(
        text.lines()
            .any(|l| l.contains("WARN") && l.contains("falling back to the in-process emulator")),
        "the fallback is logged: {text}"
    );
    assert!(
        text.contains("/nonexistent/ascend/libascendcl.so"),
        "the log names the paths tried: {text}"
    );
    assert!(
        text.contains("FALLBACK "),
        "fallback_reason is kept: {text}"
    );
    // Required by name, CANN stays required.
    let out = run_child(
        test_name!(unset_backend_with_the_named_fallback_runs_on_the_emulator_and_warns),
        "or-emulator",
        &[
            ("ASCEND_MEM_BACKEND", "cann"),
            ("ASCEND_ACL_LIB", "/nonexistent/ascend/libascendcl.so"),
            ("ASCEND_HOME_PATH", "/nonexistent/home"),
        ],
    );
    assert!(result(&out).starts_with("err Unavailable"), "{out:?}");
}

#[test]
fn sim_backend_is_the_in_process_emulator() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let out = run_child(
        test_name!(sim_backend_is_the_in_process_emulator),
        "from-env",
        &[("ASCEND_MEM_BACKEND", "sim")],
    );
    assert_eq!(result(&out), "ok sim-in-process", "{out:?}");
    // Asked for by name, the emulator is no fallback: no reason to keep.
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("FALLBACK"),
        "{out:?}"
    );
}

/// `BackendChoice` is the one reading of the variable: the values `Runtime::from_env` takes
/// (case and surrounding spaces ignored), and anything else refused with the typed error
/// naming the variable and the value as given.
#[test]
fn backend_choice_reads_the_values_and_refuses_a_bad_one_naming_it() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    for (value, want) in [
        ("", BackendChoice::Unset),
        ("  ", BackendChoice::Unset),
        ("cann", BackendChoice::Cann),
        (" CANN\t", BackendChoice::Cann),
        ("sim", BackendChoice::Emulator),
        ("Emulator", BackendChoice::Emulator),
    ] {
        assert_eq!(BackendChoice::parse(value).unwrap(), want, "{value:?}");
    }
    let e = BackendChoice::parse("tpu").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        matches!(&e, Error::UnknownBackend { value, .. } if &**value == "tpu"),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.starts_with("ASCEND_MEM_BACKEND=\"tpu\" is not a backend"),
        "{text}"
    );
    assert!(
        text.contains("\"cann\"") && text.contains("\"sim\""),
        "{text}"
    );
    // From the environment (in a child: the variable is process-wide).
    let name = test_name!(backend_choice_reads_the_values_and_refuses_a_bad_one_naming_it);
    let out = run_child(name, "choice", &[("ASCEND_MEM_BACKEND", "Bogus ")]);
    let r = result(&out);
    assert!(r.starts_with("err InvalidArgument"), "{r}");
    assert!(
        r.contains("ASCEND_MEM_BACKEND=\"Bogus \" is not a backend"),
        "names the variable and the value: {r}"
    );
    assert!(r.contains("UnknownBackend { value: \"Bogus \""), "{r}");
    for (value, want) in [
        ("sim", "ok Emulator"),
        ("cann", "ok Cann"),
        ("", "ok Unset"),
    ] {
        let out = run_child(name, "choice", &[("ASCEND_MEM_BACKEND", value)]);
        assert_eq!(result(&out), want, "{value:?}: {out:?}");
    }
}

#[test]
fn unknown_backend_name_is_an_error_naming_it_and_the_accepted_values() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    for value in ["bogus", "tpu"] {
        let out = run_child(
            test_name!(unknown_backend_name_is_an_error_naming_it_and_the_accepted_values),
            "from-env",
            &[("ASCEND_MEM_BACKEND", value)],
        );
        let r = result(&out);
        assert!(r.starts_with("err InvalidArgument"), "{r}");
        assert!(
            r.contains(&format!("ASCEND_MEM_BACKEND=\"{value}\"")),
            "names the value: {r}"
        );
        for accepted in ["\"cann\"", "\"sim\"", "\"emulator\""] {
            assert!(r.contains(accepted), "lists {accepted}: {r}");
        }
        assert!(!r.contains("length"), "{r}");
    }
    // The variant carries the string itself, as given (the match ignores case and spaces).
    let out = run_child(
        test_name!(unknown_backend_name_is_an_error_naming_it_and_the_accepted_values),
        "from-env",
        &[("ASCEND_MEM_BACKEND", "Bogus ")],
    );
    let r = result(&out);
    assert!(r.contains("UnknownBackend { value: \"Bogus \""), "{r}");
}

/// Unset backend and `ASCEND_ACL_LIB` at the emulator's library: a WARN line names the
/// emulator, not CANN.
#[test]
fn dlopen_path_to_the_emulator_logs_the_emulator() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let Some(lib) = sim_library() else {
        panic!("libascend_sim.so not built next to the test binary (cargo build -p ascend-sim)")
    };
    let lib = lib.to_string_lossy().into_owned();
    let out = run_child(
        test_name!(dlopen_path_to_the_emulator_logs_the_emulator),
        "from-env-logged",
        &[("ASCEND_MEM_BACKEND", ""), ("ASCEND_ACL_LIB", &lib)],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(result(&out), "ok sim-dlopen", "{out:?}");
    assert!(
        text.contains("WARN") && text.contains("running on the emulator") && text.contains(&lib),
        "{text}"
    );
    assert!(!text.contains("using CANN"), "{text}");
}

#[test]
fn acl_lib_pointing_at_the_emulator_takes_the_dlopen_path() {
    if let Some(role) = role() {
        return child_main(&role);
    }
    let Some(lib) = sim_library() else {
        panic!("libascend_sim.so not built next to the test binary (cargo build -p ascend-sim)")
    };
    let lib = lib.to_string_lossy().into_owned();
    for backend in ["", "cann"] {
        let out = run_child(
            test_name!(acl_lib_pointing_at_the_emulator_takes_the_dlopen_path),
            "from-env",
            &[("ASCEND_MEM_BACKEND", backend), ("ASCEND_ACL_LIB", &lib)],
        );
        assert_eq!(
            result(&out),
            "ok sim-dlopen",
            "backend={backend:?}: {out:?}"
        );
    }
}

#[test]
fn emulator_library_opened_by_path_runs_a_roundtrip() {
    let env = setup();
    let Some(lib) = sim_library() else {
        panic!("libascend_sim.so not built next to the test binary (cargo build -p ascend-sim)")
    };
    // SAFETY: the emulator's shared library exports the ACL functions with acl-sys signatures.
    let rt = unsafe { Runtime::from_library_path(&lib) }.unwrap();
    assert!(
        matches!(rt.backend(), Backend::EmulatorDl { .. }),
        "{:?}",
        rt.backend()
    );
    assert!(rt.backend().is_emulator());
    roundtrip(&rt).unwrap();
    // The dlopen'd copy keeps its own counters; read them through its C export.
    let counters = dl_counters(&lib);
    assert_eq!(counters, [0u64; 12], "the dlopen'd emulator leaked");
    // Opening the same path again reuses the library.
    // SAFETY: as above.
    let rt2 = unsafe { Runtime::from_library_path(&lib) }.unwrap();
    assert!(std::ptr::eq(rt.acl(), rt2.acl()));
    // A bad path is a load error naming it.
    // SAFETY: the path does not exist; nothing is loaded.
    let e = unsafe { Runtime::from_library_path("/nonexistent/libascend_sim.so") }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(
        e.to_string().contains("/nonexistent/libascend_sim.so"),
        "{e}"
    );
    env.finish();
}

fn dl_counters(lib: &std::path::Path) -> [u64; 12] {
    use std::ffi::CString;
    let path = CString::new(lib.to_string_lossy().as_bytes()).unwrap();
    // SAFETY: RTLD_NOLOAD only returns the already-loaded library (opened by the runtime).
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    assert!(!h.is_null(), "library is loaded");
    let name = CString::new("ascendSimGetCounters").unwrap();
    // SAFETY: `h` is a live handle; the name is NUL-terminated.
    let f = unsafe { libc::dlsym(h, name.as_ptr()) };
    assert!(!f.is_null(), "the emulator exports ascendSimGetCounters");
    // SAFETY: the export has this signature (ascend_sim::ascendSimGetCounters).
    let f: unsafe extern "C" fn(*mut [u64; 12]) -> i32 = unsafe { std::mem::transmute(f) };
    let mut out = [0u64; 12];
    // SAFETY: `out` has the layout of AscendSimCounters (12 u64, repr(C)).
    let rc = unsafe { f(&mut out) };
    assert_eq!(rc, 0);
    // SAFETY: balances our dlopen; the runtime's own reference keeps the library loaded.
    unsafe { libc::dlclose(h) };
    out
}
