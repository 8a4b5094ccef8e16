//! The CANN toolkit this crate was built against, as its build script found it.
//!
//! The build script looks for a toolkit where the `-sys` crates do (`ASCEND_HOME_PATH`, then
//! `ASCEND_TOOLKIT_HOME`, then `/usr/local/Ascend/cann` or `/usr/local/Ascend/ascend-toolkit/latest`), reads its version
//! from the toolkit's version files (the runtime package's first: the same text ACL's
//! `aclsysGetVersionStr` reports at run time) and records both in the crate. The build runs
//! again when either variable or the version file changes.

use std::fmt;
use std::path::Path;

/// The oldest CANN version the bindings support (the oldest headers their declarations
/// cover). A build against an older toolkit prints a cargo warning.
pub const OLDEST_SUPPORTED_CANN: &str = env!("ASCEND_BUILD_OLDEST_CANN");

/// The CANN toolkit found when this crate was built: see [`build_info`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuildInfo {
    home: &'static str,
    version: Option<&'static str>,
    version_file: Option<&'static str>,
}

/// The CANN toolkit found when this crate was built, or `None` if no CANN toolkit was found
/// then (neither variable named an existing folder and the default folder did not exist).
///
/// What the build found need not be what a program loads at run time: compare
/// [`BuildInfo::cann_version`] with the version the loaded runtime reports.
pub fn build_info() -> Option<BuildInfo> {
    // The build script always sets these; an empty value means "not found".
    let set = |v: Option<&'static str>| v.filter(|v| !v.is_empty());
    Some(BuildInfo {
        home: set(option_env!("ASCEND_BUILD_CANN_HOME"))?,
        version: set(option_env!("ASCEND_BUILD_CANN_VERSION")),
        version_file: set(option_env!("ASCEND_BUILD_CANN_VERSION_FILE")),
    })
}

impl BuildInfo {
    /// The toolkit's folder, as the build saw it (a symbolic link such as `.../latest` is
    /// kept as it was named).
    pub fn cann_home(&self) -> &'static Path {
        Path::new(self.home)
    }

    /// The toolkit's version as its version file writes it (for example `9.1.0` or
    /// `8.0.RC1`), or `None` if the toolkit had no readable version file.
    pub fn cann_version(&self) -> Option<&'static str> {
        self.version
    }

    /// The file the version was read from (such as
    /// `<home>/share/info/runtime/version.info`), or `None` with the version.
    pub fn version_file(&self) -> Option<&'static Path> {
        self.version_file.map(Path::new)
    }
}

/// `CANN 9.1.0 at <home>`, or `CANN (version unknown) at <home>`.
impl fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.version {
            Some(v) => write!(f, "CANN {v} at {}", self.home),
            None => write!(f, "CANN (version unknown) at {}", self.home),
        }
    }
}
