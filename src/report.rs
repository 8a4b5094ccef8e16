//! Capabilities as a report: a markdown table and JSON, the same rows in both (what
//! `ascend-doctor` prints and the acceptance suite's report holds).

use ascend_fabric::EngineCapabilities;
use serde_json::{json, Value};

/// The rows as a JSON array of `{"name", "value", "how"}` objects, in table order.
pub fn capabilities_json(caps: &EngineCapabilities) -> Value {
    Value::Array(
        caps.rows()
            .into_iter()
            .map(|r| json!({ "name": r.name, "value": r.value, "how": r.how }))
            .collect(),
    )
}

/// The rows as a markdown table with the columns capability, value, how found.
pub fn capabilities_markdown(caps: &EngineCapabilities) -> String {
    let cell = |s: &str| s.replace('|', "\\|");
    let mut out = String::from("| capability | value | how found |\n|---|---|---|\n");
    for r in caps.rows() {
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            cell(&r.name),
            cell(&r.value),
            cell(&r.how)
        ));
    }
    out
}
