//! The SoC a runtime names (`aclrtGetSocName`) and the product family it belongs to.

use std::fmt;

/// The product family of a SoC, as HIXL groups the names.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SocFamily {
    /// Atlas A2 (SoC V2: `Ascend910B1` ... `Ascend910B4-1`).
    A2,
    /// Atlas A3 (SoC V3: `Ascend910_9391`, `Ascend910_9381`, ...): FABRIC handles, the NoUC
    /// reservation, symmetric windows over HCCS.
    A3,
    /// Ascend 950 (any name containing `Ascend950`).
    Ascend950,
    /// A name none of the above lists.
    Other,
}

impl SocFamily {
    /// The family of a SoC name.
    pub fn of(name: &str) -> SocFamily {
        const A2: [&str; 6] = [
            "Ascend910B1",
            "Ascend910B2",
            "Ascend910B3",
            "Ascend910B4",
            "Ascend910B2C",
            "Ascend910B4-1",
        ];
        const A3: [&str; 6] = [
            "Ascend910_9391",
            "Ascend910_9381",
            "Ascend910_9392",
            "Ascend910_9382",
            "Ascend910_9372",
            "Ascend910_9362",
        ];
        if A2.contains(&name) {
            SocFamily::A2
        } else if A3.contains(&name) {
            SocFamily::A3
        } else if name.contains("Ascend950") {
            SocFamily::Ascend950
        } else {
            SocFamily::Other
        }
    }
}

impl fmt::Display for SocFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SocFamily::A2 => "Atlas A2",
            SocFamily::A3 => "Atlas A3",
            SocFamily::Ascend950 => "Ascend 950",
            SocFamily::Other => "another product",
        })
    }
}

/// A SoC: the name the runtime gives and its family.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Soc {
    /// The name (`aclrtGetSocName`).
    pub name: String,
    /// Its family.
    pub family: SocFamily,
}

impl fmt::Display for Soc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.family)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_their_families() {
        assert_eq!(SocFamily::of("Ascend910_9391"), SocFamily::A3);
        assert_eq!(SocFamily::of("Ascend910_9362"), SocFamily::A3);
        assert_eq!(SocFamily::of("Ascend910B4-1"), SocFamily::A2);
        assert_eq!(SocFamily::of("Ascend950PR_9599"), SocFamily::Ascend950);
        assert_eq!(SocFamily::of("Ascend910B"), SocFamily::Other);
        assert_eq!(SocFamily::of(""), SocFamily::Other);
    }
}
