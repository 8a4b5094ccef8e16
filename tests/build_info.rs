//! `ascend::build_info()` and the facade's build script, end to end.
//!
//! The first test checks this build's own record against the toolkit this build could have
//! seen. The others build the fixture crate at `tests/fixtures/build-info`, which runs the
//! facade's own `build.rs` and compiles its own `src/build_info.rs`, with `ASCEND_HOME_PATH`
//! naming a fake toolkit made by the test (or with no toolkit), and check both what the build
//! printed and what the built program's `build_info()` says.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The toolkit folder this build could have seen: the variables as they were when this test was
/// compiled (in the same build as the crate), else the first default folder that is a folder.
fn toolkit_seen_by_this_build() -> Option<PathBuf> {
    let named = [
        option_env!("ASCEND_HOME_PATH"),
        option_env!("ASCEND_TOOLKIT_HOME"),
    ]
    .into_iter()
    .flatten()
    .find(|v| !v.is_empty());
    match named {
        Some(v) => PathBuf::from(v).canonicalize().ok().filter(|h| h.is_dir()),
        None => ascend_build::DEFAULT_CANN_HOMES
            .iter()
            .find_map(|d| PathBuf::from(d).canonicalize().ok().filter(|h| h.is_dir())),
    }
}

#[test]
fn this_build_records_the_toolkit_it_saw_or_none() {
    assert_eq!(ascend::OLDEST_SUPPORTED_CANN, "8.5.0");
    let info = ascend::build_info();
    let Some(home) = toolkit_seen_by_this_build() else {
        assert_eq!(info, None, "no CANN toolkit was visible to this build");
        return;
    };
    let info =
        info.unwrap_or_else(|| panic!("the build saw {} but recorded nothing", home.display()));
    assert_eq!(
        info.cann_home().canonicalize().ok().as_deref(),
        Some(home.as_path())
    );
    match (info.cann_version(), info.version_file()) {
        (Some(version), Some(file)) => {
            assert!(file.starts_with(info.cann_home()), "{info:?}");
            assert_eq!(
                ascend_build::read_cann_version(info.cann_home()),
                Some((version.to_owned(), file.to_path_buf())),
                "{}",
                file.display()
            );
            assert_eq!(
                info.to_string(),
                format!("CANN {version} at {}", info.cann_home().display())
            );
        }
        (None, None) => assert_eq!(
            info.to_string(),
            format!("CANN (version unknown) at {}", info.cann_home().display())
        ),
        _ => panic!("a version without its file, or a file without its version: {info:?}"),
    }
}

/// A fake toolkit folder, removed when dropped.
struct FakeToolkit(PathBuf);

impl FakeToolkit {
    /// A toolkit whose runtime package's `version.info` says `Version=<version>`.
    fn with_runtime_version(case: &str, version: &str) -> FakeToolkit {
        let home =
            std::env::temp_dir().join(format!("ascend-build-info-{case}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&home);
        let info = home.join("share/info/runtime");
        fs::create_dir_all(&info).unwrap();
        fs::write(
            info.join("version.info"),
            format!("Version={version}\nversion_dir={version}\ntimestamp=20260101_000000000\n"),
        )
        .unwrap();
        FakeToolkit(home)
    }

    fn version_file(&self) -> PathBuf {
        self.0.join("share/info/runtime/version.info")
    }
}

impl Drop for FakeToolkit {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// What building and running the fixture gave.
struct FixtureRun {
    /// The build's standard error (cargo's messages, the build script's warnings).
    build_output: String,
    /// The program's `key=value` lines.
    said: BTreeMap<String, String>,
}

impl FixtureRun {
    fn said(&self, key: &str) -> &str {
        self.said
            .get(key)
            .unwrap_or_else(|| panic!("the fixture did not print {key}: {:?}", self.said))
    }

    fn warnings(&self) -> Vec<&str> {
        self.build_output
            .lines()
            .filter(|l| l.trim_start().starts_with("warning"))
            .collect()
    }
}

/// Builds the fixture with `ASCEND_HOME_PATH` set to `home` (`None`: neither variable set) in
/// a target folder of its own for `case`, then runs it.
fn build_and_run_fixture(case: &str, home: Option<&Path>) -> FixtureRun {
    let manifest =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/build-info/Cargo.toml");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("build-info-fixture")
        .join(case);
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut build = Command::new(cargo);
    build
        .args([
            "build",
            "--offline",
            "--locked",
            "--color",
            "never",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .env_remove("ASCEND_TOOLKIT_HOME")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TERM_QUIET");
    match home {
        Some(home) => build.env("ASCEND_HOME_PATH", home),
        None => build.env_remove("ASCEND_HOME_PATH"),
    };
    let built = build.output().expect("cargo runs");
    let build_output = String::from_utf8_lossy(&built.stderr).into_owned();
    assert!(
        built.status.success(),
        "building the fixture failed (if only its Cargo.lock is out of date, refresh it with \
         `cargo generate-lockfile --manifest-path tests/fixtures/build-info/Cargo.toml`):\n\
         {build_output}"
    );
    let program = target.join("debug").join(format!(
        "build-info-fixture{}",
        std::env::consts::EXE_SUFFIX
    ));
    let ran = Command::new(&program).output().expect("the fixture runs");
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let said = String::from_utf8(ran.stdout)
        .expect("UTF-8 output")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    FixtureRun { build_output, said }
}

#[test]
fn a_supported_toolkit_is_recorded_without_a_warning() {
    let toolkit = FakeToolkit::with_runtime_version("supported", "9.1.0");
    let run = build_and_run_fixture("supported", Some(&toolkit.0));
    let home = toolkit.0.display().to_string();
    assert_eq!(run.said("oldest"), "8.5.0");
    assert_eq!(run.said("home"), home);
    assert_eq!(run.said("version"), "9.1.0");
    assert_eq!(
        run.said("version_file"),
        toolkit.version_file().display().to_string()
    );
    assert_eq!(run.said("display"), format!("CANN 9.1.0 at {home}"));
    assert_eq!(run.warnings(), Vec::<&str>::new(), "{}", run.build_output);
}

#[test]
fn an_old_toolkit_is_recorded_with_a_warning() {
    let toolkit = FakeToolkit::with_runtime_version("old", "8.0.RC1");
    let run = build_and_run_fixture("old", Some(&toolkit.0));
    let home = toolkit.0.display().to_string();
    assert_eq!(run.said("home"), home);
    assert_eq!(run.said("version"), "8.0.RC1");
    assert_eq!(
        run.said("version_file"),
        toolkit.version_file().display().to_string()
    );
    let warnings = run.warnings();
    let expected = format!("CANN 8.0.RC1 at {home} is older than 8.5.0, the oldest CANN");
    assert!(
        warnings.len() == 1 && warnings[0].contains(&expected),
        "expected one warning containing {expected:?}:\n{}",
        run.build_output
    );
}

#[test]
fn without_a_toolkit_the_build_prints_nothing_and_records_none() {
    let run = build_and_run_fixture("none", None);
    let default = ascend_build::DEFAULT_CANN_HOMES
        .into_iter()
        .find(|d| Path::new(d).is_dir());
    if let Some(default) = default {
        // This machine has a toolkit at a default place: the build must have found it.
        assert_eq!(run.said("home"), default);
        return;
    }
    assert_eq!(run.said("build_info"), "none");
    assert_eq!(run.said.len(), 2, "{:?}", run.said);
    assert_eq!(run.warnings(), Vec::<&str>::new(), "{}", run.build_output);
}
