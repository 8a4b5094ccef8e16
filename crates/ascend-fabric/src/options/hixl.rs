//! HIXL's option map (the `std::map` of strings its `Initialize` takes) read with the rules of
//! HIXL's own option parser and FabricMem engine, so that a map one engine accepts the other
//! accepts too, and a map one refuses the other refuses with the same status.

use std::collections::BTreeMap;

use ascend_mem::Addr;
use serde_json::{Map, Value};

use super::{invalid, keys, EngineOptions, OptionError, TB};

/// The keys HIXL's FabricMem engine takes; any other key is `PARAM_INVALID`.
const KNOWN: [&str; 11] = [
    keys::ENABLE_USE_FABRIC_MEM,
    keys::RDMA_TRAFFIC_CLASS,
    keys::ADXL_RDMA_TRAFFIC_CLASS,
    keys::RDMA_SERVICE_LEVEL,
    keys::ADXL_RDMA_SERVICE_LEVEL,
    keys::LOCAL_COMM_RES,
    keys::ADXL_LOCAL_COMM_RES,
    keys::BUFFER_POOL,
    keys::ADXL_BUFFER_POOL,
    keys::AUTO_CONNECT,
    keys::GLOBAL_RESOURCE_CONFIG,
];

/// The largest `local_comm_res_path` file HIXL reads.
const MAX_LOCAL_COMM_RES_FILE: u64 = 1 << 20;

/// `GlobalResourceConfig`'s `fabric_memory` section as given (nested form, then flat keys).
#[derive(Debug, Default)]
struct FabricMemory {
    max_capacity: Option<u64>,
    start_address: Option<u64>,
    task_stream_num: Option<u32>,
    enable_aicpu_unfold: Option<bool>,
}

impl EngineOptions {
    /// Reads HIXL's option map, with the rules of HIXL's own parser and FabricMem engine
    /// (hicann/hixl master): a map is accepted here exactly when HIXL accepts it, and a
    /// refusal carries HIXL's status ([`OptionError::status`]) and names the option.
    ///
    /// | key | accepted |
    /// |---|---|
    /// | `EnableUseFabricMem` | `1` (read as a C++ stream reads a number: leading blanks and a sign allowed, nothing after the digits). `0`, empty or absent: [`OptionError::Unsupported`] (103905) whatever else the map holds, since HIXL then picks an engine other than FabricMem (whose own keys and rules apply) and this crate is FabricMem only; a value that is not a number, or not 0 or 1: 103900 |
    /// | `BufferPool` / `adxl.BufferPool` | absent or exactly `0:0` (the hixl key wins) |
    /// | `AutoConnect` | `0` or `1` (as a number, as above); empty is refused |
    /// | `RdmaTrafficClass` / `adxl.…` | empty or absent: the `HCCL_RDMA_TC` environment variable when set; a number in 0..=255, a multiple of 4 (unused by FabricMem) |
    /// | `RdmaServiceLevel` / `adxl.…` | the same with `HCCL_RDMA_SL`; 0..=7 (unused) |
    /// | `LocalCommRes` / `adxl.…` | any text (unused) |
    /// | `GlobalResourceConfig` | empty: ignored; otherwise a JSON object, below |
    ///
    /// Any other key is refused (103900). `GlobalResourceConfig` keys (integers are JSON
    /// integers or strings holding one; other keys are ignored, as HIXL ignores them):
    ///
    /// | key | accepted | here |
    /// |---|---|---|
    /// | `fabric_memory.task_stream_num` | 1..=8; exactly 1 while AICPU unfold is on | copy streams per transfer; **4 when unset** (HIXL's host path: 1) |
    /// | `fabric_memory.max_capacity` | 1..=1024 (TB) | the VA pool's size |
    /// | `fabric_memory.start_address` | 0..=1024 (TB) | where the pool is reserved |
    /// | `fabric_memory.enable_aicpu_unfold` | a JSON boolean; **true when unset** | see below |
    /// | `fabric_memory` | an object with the four keys above, read first (the flat keys win); not an object: ignored | |
    /// | `connect_pool.thread_num`, `connect_pool.task_queue_capacity` | 1..=64, 1..=65535 | unused |
    /// | `comm_resource_config.protocol_desc` | a string or an array of strings | unused |
    /// | `comm_resource_config.listen_port`, `.qos`, `.max_active_channels` | 1..=65535, 0..=7, ≥ 1 | unused |
    /// | `local_comm_res_path` | a non-empty string; unless `LocalCommRes` is set, a regular file of 1 byte to 1 MiB that can be read | unused |
    ///
    /// **AICPU unfold** (HIXL's default) copies with AICPU kernels this crate does not have.
    /// A map that asks for it, by saying so or by leaving it unset, runs this engine's host
    /// path with the map's `task_stream_num` (which HIXL's rule makes 1) or 4 when the map
    /// leaves it unset, and a WARN line says so each time such a map is read. A map that is
    /// to run the same way on both engines sets `"fabric_memory.enable_aicpu_unfold": false`.
    ///
    /// # Errors
    /// [`OptionError::Invalid`] naming the key and value, [`OptionError::UnknownKey`] (both
    /// `PARAM_INVALID`), or [`OptionError::Unsupported`] when `EnableUseFabricMem` is not 1.
    pub fn from_hixl(options: &BTreeMap<String, String>) -> Result<Self, OptionError> {
        // A value that is not Unicode is kept (lossily) so it is refused, as HIXL refuses
        // bytes that are not a number.
        read_map(options, |name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }
}

/// [`EngineOptions::from_hixl`] with the environment given (`HCCL_RDMA_TC`, `HCCL_RDMA_SL`).
/// The checks run in HIXL's order: its parser first, then its choice of engine, then its
/// FabricMem engine's own checks.
fn read_map(
    options: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<EngineOptions, OptionError> {
    use keys::*;
    let get = |k: &str| options.get(k).map(String::as_str);
    check_rdma(options, &env)?;
    let enable = match get(ENABLE_USE_FABRIC_MEM).filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => Some(zero_or_one(ENABLE_USE_FABRIC_MEM, v)?),
    };
    let auto_connect = match get(AUTO_CONNECT) {
        None => None,
        Some("") => return Err(invalid(AUTO_CONNECT, "", "is empty: must be 0 or 1")),
        Some(v) => Some(zero_or_one(AUTO_CONNECT, v)?),
    };
    let local_comm_res = pick(options, LOCAL_COMM_RES, ADXL_LOCAL_COMM_RES).map(|(_, v)| v);
    let fabric = match get(GLOBAL_RESOURCE_CONFIG).filter(|t| !t.is_empty()) {
        None => FabricMemory::default(),
        Some(text) => global_resource_config(text, local_comm_res.is_some_and(|v| !v.is_empty()))?,
    };
    // HIXL picks another engine for such a map (so its FabricMem checks below never run).
    if enable != Some(true) {
        return Err(OptionError::Unsupported(
            "this engine implements HIXL's FabricMem mode only: set EnableUseFabricMem=1".into(),
        ));
    }
    // The FabricMem engine's own checks.
    if let Some(key) = options.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(OptionError::UnknownKey { key: key.clone() });
    }
    if let Some((k, v)) = pick(options, BUFFER_POOL, ADXL_BUFFER_POOL) {
        if v != "0:0" {
            return Err(invalid(
                k,
                v,
                "buffer pool and fabric mem cannot be set together (use \"0:0\" or leave it out)",
            ));
        }
    }
    let mut o = EngineOptions {
        auto_connect: auto_connect.unwrap_or(false),
        ..EngineOptions::default()
    };
    if let Some(tb) = fabric.max_capacity {
        o.pool_capacity = tb as usize * TB;
    }
    if let Some(tb) = fabric.start_address {
        o.pool_start = Addr::new(tb << 40);
    }
    if let Some(n) = fabric.task_stream_num {
        o.task_stream_num = n;
    }
    if fabric.enable_aicpu_unfold.unwrap_or(true) {
        tracing::warn!(
            task_stream_num = o.task_stream_num,
            "the option map asks for HIXL's AICPU unfold (fabric_memory.enable_aicpu_unfold is \
             true or unset), which this engine does not have: it copies on the host path with \
             {} stream(s); set fabric_memory.enable_aicpu_unfold to false to say so",
            o.task_stream_num
        );
    }
    Ok(o)
}

/// The value under the hixl key, else under the adxl key (the hixl key wins when both are
/// present, even when its value is empty).
fn pick<'a>(
    options: &'a BTreeMap<String, String>,
    hixl: &'static str,
    adxl: &'static str,
) -> Option<(&'static str, &'a str)> {
    options
        .get(hixl)
        .map(|v| (hixl, v.as_str()))
        .or_else(|| options.get(adxl).map(|v| (adxl, v.as_str())))
}

/// A whole number as C++'s `std::stringstream >> n` reads it, which is how HIXL reads numbers
/// from strings: leading white space, an optional sign, digits, and nothing after them.
fn stream_number(s: &str) -> Option<i64> {
    s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r'])
        .parse::<i64>()
        .ok()
}

/// A `uint32_t` as C++'s `std::stringstream >> n` reads it: as [`stream_number`], with a
/// magnitude of at most `u32::MAX`, and a leading minus sign wrapping the value (libstdc++
/// reads `-1` as 4294967295 and `-4294967295` as 1).
fn stream_u32(s: &str) -> Option<u32> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude: u32 = digits.parse().ok()?;
    Some(if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    })
}

fn zero_or_one(key: &str, v: &str) -> Result<bool, OptionError> {
    match stream_u32(v) {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(invalid(key, v, "must be 0 or 1")),
    }
}

/// The RDMA traffic class and service level: unused by FabricMem, checked as HIXL checks
/// them (an empty or absent value falls back to HCCL's environment variable).
fn check_rdma(
    options: &BTreeMap<String, String>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(), OptionError> {
    type Rule = fn(i64) -> bool;
    let rules: [(&'static str, &'static str, &'static str, Rule, &str); 2] = [
        (
            keys::RDMA_TRAFFIC_CLASS,
            keys::ADXL_RDMA_TRAFFIC_CLASS,
            "HCCL_RDMA_TC",
            |n| (0..=255).contains(&n) && n % 4 == 0,
            "must be an integer in 0..=255 and a multiple of 4",
        ),
        (
            keys::RDMA_SERVICE_LEVEL,
            keys::ADXL_RDMA_SERVICE_LEVEL,
            "HCCL_RDMA_SL",
            |n| (0..=7).contains(&n),
            "must be an integer in 0..=7",
        ),
    ];
    for (hixl, adxl, var, ok, reason) in rules {
        let (key, value) = match pick(options, hixl, adxl) {
            Some((k, v)) if !v.is_empty() => (k.to_owned(), v.to_owned()),
            _ => match env(var) {
                Some(v) if !v.is_empty() => (format!("{hixl} (from {var})"), v),
                _ => continue,
            },
        };
        if !stream_number(&value).is_some_and(ok) {
            return Err(invalid(&key, value, reason));
        }
    }
    Ok(())
}

/// An integer field of the JSON config: a JSON integer, or a string holding one.
fn json_int(key: &str, v: &Value, lo: i64, hi: i64) -> Result<i64, OptionError> {
    let n = match v {
        Value::String(s) => stream_number(s),
        Value::Number(n) => n.as_i64(),
        _ => None,
    };
    match n {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(invalid(
            key,
            v.to_string(),
            format!("must be an integer in {lo}..={hi}"),
        )),
    }
}

/// Reads the integer fields `prefix + name` present in `obj` that `ranges` lists; an error
/// names the field `fabric_memory.` + name when `nested` (the field of the nested form).
fn ints<'a>(
    obj: &Map<String, Value>,
    prefix: &str,
    nested: bool,
    ranges: &[(&'a str, i64, i64)],
) -> Result<Vec<(&'a str, i64)>, OptionError> {
    let mut out = Vec::new();
    for &(name, lo, hi) in ranges {
        let key = format!("{prefix}{name}");
        if let Some(v) = obj.get(&key) {
            let label = if nested {
                format!("fabric_memory.{key}")
            } else {
                key
            };
            out.push((name, json_int(&label, v, lo, hi)?));
        }
    }
    Ok(out)
}

/// The `fabric_memory` fields of `obj`: those of the nested object (`nested`) or the flat
/// `fabric_memory.` keys of the whole config. A field present overrides what `fm` holds.
fn fabric_memory_fields(
    obj: &Map<String, Value>,
    nested: bool,
    fm: &mut FabricMemory,
) -> Result<(), OptionError> {
    let prefix = if nested { "" } else { "fabric_memory." };
    let ranges = [
        ("max_capacity", 1, 1024),
        ("start_address", 0, 1024),
        ("task_stream_num", 1, 8),
    ];
    for (name, n) in ints(obj, prefix, nested, &ranges)? {
        // In range, so the casts are exact.
        match name {
            "max_capacity" => fm.max_capacity = Some(n as u64),
            "start_address" => fm.start_address = Some(n as u64),
            _ => fm.task_stream_num = Some(n as u32),
        }
    }
    match obj.get(&format!("{prefix}enable_aicpu_unfold")) {
        None => {}
        Some(Value::Bool(b)) => fm.enable_aicpu_unfold = Some(*b),
        Some(v) => {
            return Err(invalid(
                "fabric_memory.enable_aicpu_unfold",
                v.to_string(),
                "must be a JSON boolean",
            ))
        }
    }
    Ok(())
}

/// `GlobalResourceConfig`: every section HIXL's parser reads, checked as it checks them
/// (`comm_res_set`: the `LocalCommRes` option is given and not empty, so
/// `local_comm_res_path` is not read).
fn global_resource_config(text: &str, comm_res_set: bool) -> Result<FabricMemory, OptionError> {
    let key = keys::GLOBAL_RESOURCE_CONFIG;
    let v: Value =
        serde_json::from_str(text).map_err(|e| invalid(key, text, format!("not JSON: {e}")))?;
    let obj = v
        .as_object()
        .ok_or_else(|| invalid(key, text, "must be a JSON object"))?;
    let mut fm = FabricMemory::default();
    if let Some(Value::Object(nested)) = obj.get("fabric_memory") {
        fabric_memory_fields(nested, true, &mut fm)?;
    }
    fabric_memory_fields(obj, false, &mut fm)?;
    if fm.enable_aicpu_unfold.unwrap_or(true) && fm.task_stream_num.is_some_and(|n| n != 1) {
        return Err(invalid(
            "fabric_memory.task_stream_num",
            fm.task_stream_num.unwrap_or_default().to_string(),
            "AICPU unfold (on unless fabric_memory.enable_aicpu_unfold is false) supports only \
             fabric_memory.task_stream_num=1; set fabric_memory.enable_aicpu_unfold to false \
             for the host path with more streams",
        ));
    }
    ints(
        obj,
        "",
        false,
        &[
            ("connect_pool.thread_num", 1, 64),
            ("connect_pool.task_queue_capacity", 1, 65535),
        ],
    )?;
    let pd = "comm_resource_config.protocol_desc";
    match obj.get(pd) {
        None | Some(Value::String(_)) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {}
        Some(v) => {
            return Err(invalid(
                pd,
                v.to_string(),
                "must be a string or an array of strings",
            ))
        }
    }
    ints(
        obj,
        "",
        false,
        &[
            ("comm_resource_config.listen_port", 1, 65535),
            ("comm_resource_config.qos", 0, 7),
            (
                "comm_resource_config.max_active_channels",
                1,
                i64::from(u32::MAX),
            ),
        ],
    )?;
    match obj.get("local_comm_res_path") {
        None => {}
        Some(Value::String(p)) if !p.is_empty() && comm_res_set => {}
        Some(Value::String(p)) if !p.is_empty() => local_comm_res_file(p)?,
        Some(v) => {
            return Err(invalid(
                "local_comm_res_path",
                v.to_string(),
                "must be a non-empty file path",
            ))
        }
    }
    Ok(fm)
}

/// HIXL reads the file `local_comm_res_path` names when `LocalCommRes` is not given: it must
/// be a regular file of 1 byte to 1 MiB that this process can read.
fn local_comm_res_file(path: &str) -> Result<(), OptionError> {
    let key = "local_comm_res_path";
    let real = std::fs::canonicalize(path).map_err(|e| invalid(key, path, e.to_string()))?;
    let meta = std::fs::metadata(&real).map_err(|e| invalid(key, path, e.to_string()))?;
    if !meta.is_file() {
        return Err(invalid(key, path, "must name a regular file"));
    }
    if meta.len() == 0 || meta.len() > MAX_LOCAL_COMM_RES_FILE {
        return Err(invalid(
            key,
            path,
            format!("the file holds {} bytes: must be 1 to 1 MiB", meta.len()),
        ));
    }
    std::fs::read(&real).map_err(|e| invalid(key, path, e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests;
