//! The CANN version of an install: reading it from the install's version files, comparing
//! versions, and recording what a build found for the crate being built.

use std::cmp::Ordering;
use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

/// The oldest CANN version the bindings support: the oldest headers their declarations cover.
pub const OLDEST_SUPPORTED_CANN: &str = "8.5.0";

/// The version files [`read_cann_version`] reads, relative to the install, best first.
const VERSION_FILES: &[&str] = &[
    "share/info/runtime/version.info",
    "runtime/version.info",
    "share/info/toolkit/version.info",
    "share/info/compiler/version.info",
    "compiler/version.info",
    "aarch64-linux/ascend_toolkit_install.info",
    "x86_64-linux/ascend_toolkit_install.info",
];

/// How much of a version file is read; real ones are a few hundred bytes.
const MAX_VERSION_FILE_LEN: u64 = 64 * 1024;

/// A parsed CANN version such as `9.1.0`, `8.0.RC1` or `8.5.0.alpha001`.
///
/// The text is split at `.` and `-`. The first two parts are the major and minor numbers; the
/// third is a patch number (`0`, `1`, ...) or a release candidate (`RC1`, `RC2`, ...; a release
/// candidate comes before every patch of the same major and minor, so `8.0.RC3` is older than
/// `8.0.0`); any further parts qualify that release: `alpha<n>` and `beta<n>` mark builds
/// before it (`8.5.0.alpha001` is older than `8.5.0`), a plain number marks a build after it.
/// A missing patch counts as `0`, so `9.1` equals `9.1.0`.
///
/// Versions are only partly ordered: when two versions first differ at a part this type does
/// not understand (say `9.1.foo` against `9.1.0`), [`PartialOrd::partial_cmp`] returns `None`
/// and neither is [older](CannVersion::older_than) than the other. Versions are equal when
/// their parts are, whatever the spelling (`RC1` and `rc1`).
///
/// [`Display`](fmt::Display) prints the text the version was parsed from.
#[derive(Debug, Clone)]
pub struct CannVersion {
    text: String,
    major: u32,
    minor: u32,
    /// Where the text after `major.minor` starts (after its separator), or the text's length.
    rest_at: usize,
    release: Part,
    qualifiers: Vec<Part>,
}

/// One part of a version after `major.minor`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// A number: a patch in third place, a later build after it.
    Number(u32),
    /// `RC<n>`, in third place.
    Rc(u32),
    /// `alpha<n>`, after the third place.
    Alpha(u32),
    /// `beta<n>`, after the third place.
    Beta(u32),
    /// Anything else, lower-cased.
    Unknown(String),
}

impl Part {
    fn parse(text: &str) -> Part {
        let lower = text.to_ascii_lowercase();
        let numbered = |prefix: &str| {
            lower
                .strip_prefix(prefix)
                .filter(|n| is_number(n))
                .and_then(|n| n.parse().ok())
        };
        if is_number(&lower) {
            if let Ok(n) = lower.parse() {
                return Part::Number(n);
            }
        } else if let Some(n) = numbered("rc") {
            return Part::Rc(n);
        } else if let Some(n) = numbered("alpha") {
            return Part::Alpha(n);
        } else if let Some(n) = numbered("beta") {
            return Part::Beta(n);
        }
        Part::Unknown(lower)
    }

    /// The place of the release part: release candidates before patches.
    fn release_rank(&self) -> Option<(u8, u32)> {
        match *self {
            Part::Rc(n) => Some((0, n)),
            Part::Number(n) => Some((1, n)),
            _ => None,
        }
    }

    /// The place of a qualifier (`None`: no qualifier at this place): pre-release builds
    /// before the release, later builds after it.
    fn qualifier_rank(part: Option<&Part>) -> Option<(u8, u32)> {
        match part {
            Some(Part::Alpha(n)) => Some((0, *n)),
            Some(Part::Beta(n)) => Some((1, *n)),
            None => Some((2, 0)),
            Some(Part::Number(n)) => Some((3, *n)),
            _ => None,
        }
    }
}

/// Compares two parts by their ranks; `None` when they differ and either rank is unknown.
fn compare_parts<T>(a: &T, b: &T, rank: impl Fn(&T) -> Option<(u8, u32)>) -> Option<Ordering>
where
    T: PartialEq,
{
    if a == b {
        return Some(Ordering::Equal);
    }
    Some(rank(a)?.cmp(&rank(b)?))
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Parses a CANN version such as `9.1.0`, `8.0.RC1` or `8.5.0.alpha001` (surrounding white
/// space is ignored). Returns `None` unless the text starts with two numbers separated by a
/// dot; the parts after them may be anything (see [`CannVersion`]).
pub fn parse_cann_version(text: &str) -> Option<CannVersion> {
    let text = text.trim();
    let dot = text.find('.')?;
    let tail = &text[dot + 1..];
    let minor_len = tail.find(['.', '-']).unwrap_or(tail.len());
    let number = |p: &str| is_number(p).then(|| p.parse::<u32>().ok()).flatten();
    let major = number(&text[..dot])?;
    let minor = number(&tail[..minor_len])?;
    // Past `major.minor` and the separator after it, if any.
    let rest_at = (dot + 1 + minor_len + 1).min(text.len());
    let mut rest = text[rest_at..].split(['.', '-']).filter(|p| !p.is_empty());
    let release = rest.next().map_or(Part::Number(0), Part::parse);
    let qualifiers = rest.map(Part::parse).collect();
    Some(CannVersion {
        text: text.to_owned(),
        major,
        minor,
        rest_at,
        release,
        qualifiers,
    })
}

impl CannVersion {
    /// The major number (`9` in `9.1.0`).
    pub fn major(&self) -> u32 {
        self.major
    }

    /// The minor number (`1` in `9.1.0`).
    pub fn minor(&self) -> u32 {
        self.minor
    }

    /// The text after `major.minor` and its separator (`RC1` in `8.0.RC1`; empty for `9.1`).
    pub fn rest(&self) -> &str {
        &self.text[self.rest_at..]
    }

    /// The text the version was parsed from, without surrounding white space.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this version is certainly older than `other`. `false` when the two cannot be
    /// compared (see [`CannVersion`]).
    pub fn older_than(&self, other: &CannVersion) -> bool {
        self.partial_cmp(other) == Some(Ordering::Less)
    }
}

impl PartialEq for CannVersion {
    fn eq(&self, other: &Self) -> bool {
        self.partial_cmp(other) == Some(Ordering::Equal)
    }
}

impl PartialOrd for CannVersion {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        let head = (self.major, self.minor).cmp(&(other.major, other.minor));
        if head != Ordering::Equal {
            return Some(head);
        }
        let release = compare_parts(&self.release, &other.release, Part::release_rank)?;
        if release != Ordering::Equal {
            return Some(release);
        }
        let len = self.qualifiers.len().max(other.qualifiers.len());
        for i in 0..len {
            let (a, b) = (self.qualifiers.get(i), other.qualifiers.get(i));
            let order = compare_parts(&a, &b, |p| Part::qualifier_rank(*p))?;
            if order != Ordering::Equal {
                return Some(order);
            }
        }
        Some(Ordering::Equal)
    }
}

impl fmt::Display for CannVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The value of the first `version=<text>` line of a version file (the key in any case, white
/// space and quotes around the value ignored; keys such as `version_dir` do not count).
fn version_line(contents: &str) -> Option<&str> {
    contents.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        if !key.trim().eq_ignore_ascii_case("version") {
            return None;
        }
        let value = value.trim().trim_matches(|c| c == '"' || c == '\'').trim();
        (!value.is_empty()).then_some(value)
    })
}

/// Reads the version of the CANN install at `home` from its version files.
///
/// CANN writes its version as a `version=<text>` line (the key is written `Version` or
/// `version`) in a few places. These are read, in this order, and the first that has such a
/// line gives the version:
///
/// 1. `<home>/share/info/runtime/version.info` (newer installs: one folder per package),
/// 2. `<home>/runtime/version.info` (older toolkits),
/// 3. `<home>/share/info/toolkit/version.info`,
/// 4. `<home>/share/info/compiler/version.info`,
/// 5. `<home>/compiler/version.info`,
/// 6. `<home>/aarch64-linux/ascend_toolkit_install.info`, then
///    `<home>/x86_64-linux/ascend_toolkit_install.info`.
///
/// The runtime package comes first because ACL's `aclsysGetVersionStr` reports that package's
/// version, so a version read at build time can be compared with the one reported at run
/// time. Only these fixed paths are looked at.
///
/// Returns the version text as written (without surrounding white space or quotes) and the
/// file it came from, or `None` when none of the files exists or none has the line.
pub fn read_cann_version(home: &Path) -> Option<(String, PathBuf)> {
    VERSION_FILES.iter().find_map(|relative| {
        let path = home.join(relative);
        let mut bytes = Vec::new();
        File::open(&path)
            .and_then(|f| f.take(MAX_VERSION_FILE_LEN).read_to_end(&mut bytes))
            .ok()?;
        let version = version_line(&String::from_utf8_lossy(&bytes))?.to_owned();
        Some((version, path))
    })
}

/// The whole build script of the `ascend` facade: records the CANN install this build sees
/// ([`cann_home`](crate::cann_home)) for `ascend::build_info()`, and warns when its version is
/// older than [`OLDEST_SUPPORTED_CANN`]. Never fails and never prints a warning without CANN.
///
/// It writes these cargo directives to standard output:
///
/// - always: `rerun-if-env-changed` for `ASCEND_HOME_PATH` and `ASCEND_TOOLKIT_HOME`, and
///   `rustc-env` for `ASCEND_BUILD_OLDEST_CANN` ([`OLDEST_SUPPORTED_CANN`]) and for
///   `ASCEND_BUILD_CANN_HOME`, `ASCEND_BUILD_CANN_VERSION` and `ASCEND_BUILD_CANN_VERSION_FILE`,
///   which are empty unless set as below (so a variable of the same name in the environment
///   cannot leak into the crate);
/// - when the install is a directory: `ASCEND_BUILD_CANN_HOME` set to its path;
/// - when [`read_cann_version`] finds its version: `ASCEND_BUILD_CANN_VERSION` and
///   `ASCEND_BUILD_CANN_VERSION_FILE` set to the version and the file, and `rerun-if-changed`
///   on that file, so that upgrading CANN in place rebuilds the crate;
/// - a `warning` when the version is older than [`OLDEST_SUPPORTED_CANN`] or cannot be
///   compared with it, when the install has no version file (its path is then recorded with
///   the version unknown), and when the install's path is not UTF-8 or has a line break
///   (nothing is then recorded).
///
/// An install path that is not a directory counts as no CANN. Installing CANN later at the
/// default path (with neither variable set) is not noticed until the build script runs again,
/// for example after `cargo clean -p ascend`.
pub fn record_cann_build_info() {
    let home = crate::cann_home();
    let stdout = io::stdout();
    // Writing to a build script's standard output only fails if cargo went away.
    let _ = write_cann_build_info(&mut stdout.lock(), home.as_deref());
}

/// Writes the directives of [`record_cann_build_info`] for the install `home` (`None`: none).
fn write_cann_build_info(out: &mut impl Write, home: Option<&Path>) -> io::Result<()> {
    writeln!(out, "cargo:rerun-if-env-changed=ASCEND_HOME_PATH")?;
    writeln!(out, "cargo:rerun-if-env-changed=ASCEND_TOOLKIT_HOME")?;
    writeln!(
        out,
        "cargo:rustc-env=ASCEND_BUILD_OLDEST_CANN={OLDEST_SUPPORTED_CANN}"
    )?;
    let (mut home_text, mut version_text, mut file_text) =
        (String::new(), String::new(), String::new());
    if let Some(home) = home.filter(|h| h.is_dir()) {
        match directive_value(home) {
            None => writeln!(
                out,
                "cargo:warning=the CANN install path {} is not UTF-8 (or has a line break); \
                 it is not recorded for ascend::build_info()",
                home.display().to_string().replace(['\n', '\r'], " ")
            )?,
            Some(h) => {
                home_text = h.to_owned();
                match read_cann_version(home) {
                    None => writeln!(
                        out,
                        "cargo:warning=found no CANN version file under {h}; \
                         ascend::build_info() records the install with its version unknown"
                    )?,
                    Some((version, file)) => {
                        let file_value = directive_value(&file).unwrap_or_default();
                        if !file_value.is_empty() {
                            writeln!(out, "cargo:rerun-if-changed={file_value}")?;
                        }
                        check_version(out, &version, file_value, h)?;
                        version_text = version;
                        file_text = file_value.to_owned();
                    }
                }
            }
        }
    }
    writeln!(out, "cargo:rustc-env=ASCEND_BUILD_CANN_HOME={home_text}")?;
    writeln!(
        out,
        "cargo:rustc-env=ASCEND_BUILD_CANN_VERSION={version_text}"
    )?;
    writeln!(
        out,
        "cargo:rustc-env=ASCEND_BUILD_CANN_VERSION_FILE={file_text}"
    )
}

/// Warns when `version` (read from `file` in the install `home`) is older than the oldest
/// supported CANN, or cannot be compared with it.
fn check_version(out: &mut impl Write, version: &str, file: &str, home: &str) -> io::Result<()> {
    // `OLDEST_SUPPORTED_CANN` parses (a unit test checks it).
    let Some(oldest) = parse_cann_version(OLDEST_SUPPORTED_CANN) else {
        return Ok(());
    };
    match parse_cann_version(version).and_then(|v| v.partial_cmp(&oldest)) {
        Some(Ordering::Less) => writeln!(
            out,
            "cargo:warning=CANN {version} at {home} is older than {OLDEST_SUPPORTED_CANN}, \
             the oldest CANN these bindings support; calls into it may fail or misbehave"
        ),
        Some(_) => Ok(()),
        None => writeln!(
            out,
            "cargo:warning=cannot tell whether CANN version {version:?} (read from {file}) \
             is older than {OLDEST_SUPPORTED_CANN}, the oldest CANN these bindings support"
        ),
    }
}

/// `path` as the value of a cargo directive: `None` unless it is UTF-8 without line breaks.
fn directive_value(path: &Path) -> Option<&str> {
    path.to_str().filter(|s| !s.contains(['\n', '\r']))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    fn v(text: &str) -> CannVersion {
        parse_cann_version(text).unwrap_or_else(|| panic!("{text:?} should parse"))
    }

    #[test]
    fn parses_the_parts() {
        let rc = v(" 8.0.RC1 ");
        assert_eq!((rc.major(), rc.minor(), rc.rest()), (8, 0, "RC1"));
        assert_eq!(rc.to_string(), "8.0.RC1");
        assert_eq!(rc.as_str(), "8.0.RC1");
        let alpha = v("8.5.0.alpha001");
        assert_eq!(
            (alpha.major(), alpha.minor(), alpha.rest()),
            (8, 5, "0.alpha001")
        );
        let short = v("9.1");
        assert_eq!((short.major(), short.minor(), short.rest()), (9, 1, ""));
        assert_eq!(v("10.12-beta1").rest(), "beta1");
    }

    #[test]
    fn rejects_text_without_major_and_minor() {
        for text in [
            "",
            "9",
            "9.",
            ".1.0",
            "a.b",
            "9.x.0",
            "V9.1.0",
            "9-1.0",
            "99999999999.1",
            "9..1",
        ] {
            assert!(
                parse_cann_version(text).is_none(),
                "{text:?} should not parse"
            );
        }
    }

    #[test]
    fn orders_releases() {
        let ascending = [
            "7.0.0",
            "8.0.RC1.alpha001",
            "8.0.RC1",
            "8.0.RC2",
            "8.0.RC10",
            "8.0.0",
            "8.0.1",
            "8.1.RC1",
            "8.5.0.alpha001",
            "8.5.0.alpha002",
            "8.5.0.beta1",
            "8.5.0",
            "8.5.0.1",
            "8.5.1",
            "9.0.0",
            "9.1.0",
            "10.0.0",
        ];
        for (i, a) in ascending.iter().enumerate() {
            for (j, b) in ascending.iter().enumerate() {
                assert_eq!(v(a).partial_cmp(&v(b)), Some(i.cmp(&j)), "{a} against {b}");
                assert_eq!(v(a).older_than(&v(b)), i < j, "{a} older than {b}");
            }
        }
    }

    #[test]
    fn equal_whatever_the_spelling() {
        assert_eq!(v("9.1"), v("9.1.0"));
        assert_eq!(v("8.0.rc1"), v("8.0.RC1"));
        assert_eq!(v("8.5.0-alpha001"), v("8.5.0.alpha001"));
        assert_ne!(v("9.1.0"), v("9.1.1"));
    }

    #[test]
    fn unknown_parts_are_not_ordered_where_they_decide() {
        let odd = v("9.1.foo");
        assert_eq!(odd.partial_cmp(&v("9.1.0")), None);
        assert!(!odd.older_than(&v("9.1.0")) && !v("9.1.0").older_than(&odd));
        assert_eq!(odd.partial_cmp(&v("9.1.FOO")), Some(Ordering::Equal));
        assert_eq!(v("8.5.0.hotfix").partial_cmp(&v("8.5.0")), None);
        assert_eq!(
            v("8.5.0.hotfix").partial_cmp(&v("8.5.1")),
            Some(Ordering::Less)
        );
        // Decided before the unknown part.
        assert!(v("8.0.foo").older_than(&v("8.5.0")));
        assert!(v("8.5.0").older_than(&v("9.0.foo")));
        // Numbers too large for a part are unknown, not a panic.
        assert_eq!(v("9.1.99999999999").partial_cmp(&v("9.1.0")), None);
    }

    #[test]
    fn oldest_supported_parses() {
        assert_eq!(v(OLDEST_SUPPORTED_CANN).to_string(), OLDEST_SUPPORTED_CANN);
    }

    #[test]
    fn finds_the_version_line() {
        assert_eq!(version_line("Version=9.1.0\n"), Some("9.1.0"));
        assert_eq!(
            version_line("package_name=Ascend-cann-toolkit\ninnerversion=V100R001\nversion_dir=8.0\nversion = \"8.0.RC1\"\r\n"),
            Some("8.0.RC1")
        );
        assert_eq!(
            version_line("VERSION=8.5.0.alpha001"),
            Some("8.5.0.alpha001")
        );
        assert_eq!(version_line("version=\nversion_dir=9.1.0\n"), None);
        assert_eq!(version_line(""), None);
        assert_eq!(version_line("no equals sign"), None);
    }

    /// A fresh, empty folder under the system temporary folder, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> TempDir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let n = NEXT.fetch_add(1, AtomicOrdering::Relaxed);
            let path = std::env::temp_dir().join(format!(
                "ascend-build-cann-version-{}-{n}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }

        fn write(&self, relative: &str, contents: &str) -> PathBuf {
            let path = self.0.join(relative);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, contents).unwrap();
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn directives(home: Option<&Path>) -> Vec<String> {
        let mut out = Vec::new();
        write_cann_build_info(&mut out, home).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn expected(home: &str, version: &str, file: &str) -> Vec<String> {
        let mut lines = vec![
            "cargo:rerun-if-env-changed=ASCEND_HOME_PATH".to_owned(),
            "cargo:rerun-if-env-changed=ASCEND_TOOLKIT_HOME".to_owned(),
            "cargo:rustc-env=ASCEND_BUILD_OLDEST_CANN=8.5.0".to_owned(),
        ];
        if !file.is_empty() {
            lines.push(format!("cargo:rerun-if-changed={file}"));
        }
        lines.extend([
            format!("cargo:rustc-env=ASCEND_BUILD_CANN_HOME={home}"),
            format!("cargo:rustc-env=ASCEND_BUILD_CANN_VERSION={version}"),
            format!("cargo:rustc-env=ASCEND_BUILD_CANN_VERSION_FILE={file}"),
        ]);
        lines
    }

    #[test]
    fn prefers_the_runtime_package() {
        let dir = TempDir::new();
        assert_eq!(read_cann_version(&dir.0), None);
        let install = dir.write(
            "x86_64-linux/ascend_toolkit_install.info",
            "version=8.0.RC1\n",
        );
        assert_eq!(
            read_cann_version(&dir.0),
            Some(("8.0.RC1".to_owned(), install))
        );
        let old_compiler = dir.write("compiler/version.info", "Version=8.0.RC2\n");
        assert_eq!(
            read_cann_version(&dir.0),
            Some(("8.0.RC2".to_owned(), old_compiler))
        );
        let toolkit = dir.write("share/info/toolkit/version.info", "Version=9.0.0\n");
        assert_eq!(
            read_cann_version(&dir.0),
            Some(("9.0.0".to_owned(), toolkit))
        );
        let old_runtime = dir.write("runtime/version.info", "Version=9.0.1\n");
        assert_eq!(
            read_cann_version(&dir.0),
            Some(("9.0.1".to_owned(), old_runtime))
        );
        // A file without a version line is passed over.
        dir.write("share/info/runtime/version.info", "timestamp=20250101\n");
        assert_eq!(read_cann_version(&dir.0).unwrap().0, "9.0.1");
        let runtime = dir.write("share/info/runtime/version.info", "Version=9.1.0\n");
        assert_eq!(
            read_cann_version(&dir.0),
            Some(("9.1.0".to_owned(), runtime))
        );
    }

    #[test]
    fn no_cann_records_nothing_and_warns_nothing() {
        assert_eq!(directives(None), expected("", "", ""));
        let dir = TempDir::new();
        let missing = dir.0.join("not-there");
        assert_eq!(directives(Some(&missing)), expected("", "", ""));
        let not_a_dir = dir.write("a-file", "");
        assert_eq!(directives(Some(&not_a_dir)), expected("", "", ""));
    }

    #[test]
    fn records_a_supported_version_without_warning() {
        let dir = TempDir::new();
        let file = dir.write("share/info/runtime/version.info", "Version=9.1.0\n");
        let (home, file) = (dir.0.to_str().unwrap(), file.to_str().unwrap());
        assert_eq!(directives(Some(&dir.0)), expected(home, "9.1.0", file));
        dir.write("share/info/runtime/version.info", "Version=8.5.0\n");
        assert_eq!(directives(Some(&dir.0)), expected(home, "8.5.0", file));
    }

    #[test]
    fn warns_about_an_old_version() {
        let dir = TempDir::new();
        let file = dir.write("share/info/runtime/version.info", "Version=8.0.RC1\n");
        let (home, file) = (dir.0.to_str().unwrap(), file.to_str().unwrap());
        let mut want = expected(home, "8.0.RC1", file);
        want.insert(
            4,
            format!(
                "cargo:warning=CANN 8.0.RC1 at {home} is older than 8.5.0, the oldest CANN \
                 these bindings support; calls into it may fail or misbehave"
            ),
        );
        assert_eq!(directives(Some(&dir.0)), want);
        // A pre-release of the oldest supported version is older than it.
        dir.write(
            "share/info/runtime/version.info",
            "Version=8.5.0.alpha001\n",
        );
        assert!(directives(Some(&dir.0))[4].starts_with("cargo:warning=CANN 8.5.0.alpha001 at "));
    }

    #[test]
    fn warns_about_a_version_it_cannot_compare() {
        let dir = TempDir::new();
        let file = dir.write("share/info/runtime/version.info", "Version=8.5.custom\n");
        let (home, file) = (dir.0.to_str().unwrap(), file.to_str().unwrap());
        let mut want = expected(home, "8.5.custom", file);
        want.insert(
            4,
            format!(
                "cargo:warning=cannot tell whether CANN version \"8.5.custom\" (read from \
                 {file}) is older than 8.5.0, the oldest CANN these bindings support"
            ),
        );
        assert_eq!(directives(Some(&dir.0)), want);
        dir.write("share/info/runtime/version.info", "Version=next\n");
        assert!(directives(Some(&dir.0))[4].starts_with("cargo:warning=cannot tell whether"));
    }

    #[test]
    fn never_records_a_path_with_a_line_break() {
        let dir = TempDir::new();
        let odd = dir.0.join("two\nlines");
        fs::create_dir_all(odd.join("share/info/runtime")).unwrap();
        fs::write(
            odd.join("share/info/runtime/version.info"),
            "Version=9.1.0\n",
        )
        .unwrap();
        let lines = directives(Some(&odd));
        let warning = format!(
            "cargo:warning=the CANN install path {} is not UTF-8 (or has a line break); it is \
             not recorded for ascend::build_info()",
            odd.display().to_string().replace('\n', " ")
        );
        let mut want = expected("", "", "");
        want.insert(3, warning);
        assert_eq!(lines, want);
    }

    #[test]
    fn records_an_install_without_a_version_file() {
        let dir = TempDir::new();
        let home = dir.0.to_str().unwrap();
        let mut want = expected(home, "", "");
        want.insert(
            3,
            format!(
                "cargo:warning=found no CANN version file under {home}; ascend::build_info() \
                 records the install with its version unknown"
            ),
        );
        assert_eq!(directives(Some(&dir.0)), want);
    }
}
