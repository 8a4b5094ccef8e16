//! Option maps read as HIXL's parser and FabricMem engine read them: every map of HIXL's
//! documented option set, accepted or refused with HIXL's status. (Every row here was also
//! run through HIXL's own parser, built from its source, with the same outcome.)

use super::*;
use crate::HixlCode;

const ON: (&str, &str) = ("EnableUseFabricMem", "1");

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn grc(json: &str) -> BTreeMap<String, String> {
    map(&[ON, ("GlobalResourceConfig", json)])
}

/// What a map gives: the options that matter here, or HIXL's status.
#[derive(Debug, PartialEq, Eq)]
enum Want {
    /// Accepted: task_stream_num, pool start and capacity in TB, auto_connect.
    Ok(u32, u64, u64, bool),
    Refused(HixlCode),
}

const DEFAULT: Want = Want::Ok(4, 40, 32, false);
const INVALID: Want = Want::Refused(HixlCode::PARAM_INVALID);
const UNSUPPORTED: Want = Want::Refused(HixlCode::UNSUPPORTED);

fn outcome(m: &BTreeMap<String, String>, env: &[(&str, &str)]) -> Want {
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    match read_map(m, lookup) {
        Ok(o) => Want::Ok(
            o.task_stream_num,
            o.pool_start.get() >> 40,
            (o.pool_capacity / TB) as u64,
            o.auto_connect,
        ),
        Err(e) => Want::Refused(e.status()),
    }
}

#[test]
fn top_level_keys() {
    let rows: Vec<(BTreeMap<String, String>, Want)> = vec![
        (map(&[]), UNSUPPORTED),
        (map(&[ON]), DEFAULT),
        (map(&[("EnableUseFabricMem", "0")]), UNSUPPORTED),
        (map(&[("EnableUseFabricMem", "")]), UNSUPPORTED),
        (map(&[("EnableUseFabricMem", "2")]), INVALID),
        (map(&[("EnableUseFabricMem", "yes")]), INVALID),
        (map(&[("EnableUseFabricMem", " 1")]), DEFAULT),
        (map(&[("EnableUseFabricMem", "+1")]), DEFAULT),
        (map(&[("EnableUseFabricMem", "1 ")]), INVALID),
        (map(&[("EnableUseFabricMem", "0x1")]), INVALID),
        // As a C++ stream reads a uint32_t: a minus sign wraps.
        (map(&[("EnableUseFabricMem", "-4294967295")]), DEFAULT),
        (map(&[("EnableUseFabricMem", "-1")]), INVALID),
        (map(&[("EnableUseFabricMem", "4294967297")]), INVALID),
        (
            map(&[ON, ("AutoConnect", "-4294967295")]),
            Want::Ok(4, 40, 32, true),
        ),
        (map(&[ON, ("AutoConnect", "-0")]), DEFAULT),
        // Not FabricMem: HIXL picks another engine, whose keys these are.
        (map(&[("BufferPool", "4:8")]), UNSUPPORTED),
        (
            map(&[("EnableUseFabricMem", "0"), ("BufferPool", "4:8")]),
            UNSUPPORTED,
        ),
        (
            map(&[("EnableUseFabricMem", "0"), ("Bogus", "1")]),
            UNSUPPORTED,
        ),
        // A bad value is the parser's error, before the engine's "must be 1".
        (
            map(&[("EnableUseFabricMem", "0"), ("AutoConnect", "")]),
            INVALID,
        ),
        (map(&[ON, ("AutoConnect", "1")]), Want::Ok(4, 40, 32, true)),
        (map(&[ON, ("AutoConnect", "0")]), DEFAULT),
        (map(&[ON, ("AutoConnect", "01")]), Want::Ok(4, 40, 32, true)),
        (map(&[ON, ("AutoConnect", "")]), INVALID),
        (map(&[ON, ("AutoConnect", "2")]), INVALID),
        (map(&[ON, ("AutoConnect", "true")]), INVALID),
        (map(&[ON, ("BufferPool", "0:0")]), DEFAULT),
        (map(&[ON, ("BufferPool", "4:8")]), INVALID),
        (map(&[ON, ("BufferPool", "")]), INVALID),
        (map(&[ON, ("adxl.BufferPool", "1:1")]), INVALID),
        (map(&[ON, ("adxl.BufferPool", "0:0")]), DEFAULT),
        (
            map(&[ON, ("BufferPool", "0:0"), ("adxl.BufferPool", "4:8")]),
            DEFAULT,
        ),
        (map(&[ON, ("RdmaTrafficClass", "132")]), DEFAULT),
        (map(&[ON, ("RdmaTrafficClass", "0")]), DEFAULT),
        (map(&[ON, ("RdmaTrafficClass", "130")]), INVALID),
        (map(&[ON, ("RdmaTrafficClass", "256")]), INVALID),
        (map(&[ON, ("RdmaTrafficClass", "-4")]), INVALID),
        (map(&[ON, ("RdmaTrafficClass", "")]), DEFAULT),
        (map(&[ON, ("adxl.RdmaTrafficClass", "130")]), INVALID),
        (
            map(&[
                ON,
                ("RdmaTrafficClass", "132"),
                ("adxl.RdmaTrafficClass", "130"),
            ]),
            DEFAULT,
        ),
        (map(&[ON, ("RdmaServiceLevel", "7")]), DEFAULT),
        (map(&[ON, ("RdmaServiceLevel", "8")]), INVALID),
        (map(&[ON, ("adxl.RdmaServiceLevel", "x")]), INVALID),
        (map(&[ON, ("LocalCommRes", "anything")]), DEFAULT),
        (
            map(&[ON, ("LocalCommRes", r#"{"version":"1.3"}"#)]),
            DEFAULT,
        ),
        (map(&[ON, ("adxl.LocalCommRes", "")]), DEFAULT),
        (map(&[ON, ("Bogus", "1")]), INVALID),
        (map(&[ON, ("adxl.AutoConnect", "1")]), INVALID),
        (map(&[ON, ("enableusefabricmem", "1")]), INVALID),
    ];
    for (m, want) in rows {
        assert_eq!(outcome(&m, &[]), want, "{m:?}");
    }
}

#[test]
fn rdma_values_fall_back_to_hccls_environment() {
    let m = map(&[ON]);
    assert_eq!(outcome(&m, &[("HCCL_RDMA_TC", "8")]), DEFAULT);
    assert_eq!(outcome(&m, &[("HCCL_RDMA_TC", "7")]), INVALID);
    assert_eq!(outcome(&m, &[("HCCL_RDMA_SL", "9")]), INVALID);
    assert_eq!(outcome(&m, &[("HCCL_RDMA_SL", "")]), DEFAULT);
    // An empty option value reads the variable too; a given value wins over it.
    let empty = map(&[ON, ("RdmaTrafficClass", "")]);
    assert_eq!(outcome(&empty, &[("HCCL_RDMA_TC", "7")]), INVALID);
    let given = map(&[ON, ("RdmaTrafficClass", "4")]);
    assert_eq!(outcome(&given, &[("HCCL_RDMA_TC", "7")]), DEFAULT);
    match read_map(&m, |n| (n == "HCCL_RDMA_TC").then(|| "7".to_string())) {
        Err(OptionError::Invalid { key, value, .. }) => {
            assert!(
                key.contains("HCCL_RDMA_TC") && value == "7",
                "{key} {value}"
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn global_resource_config() {
    let rows: Vec<(&str, Want)> = vec![
        ("", DEFAULT),
        ("{}", DEFAULT),
        ("[1]", INVALID),
        ("{not json", INVALID),
        ("5", INVALID),
        // The map of §10.4: more than one stream needs AICPU unfold off.
        (
            r#"{"fabric_memory.task_stream_num": 4, "fabric_memory.max_capacity": 1}"#,
            INVALID,
        ),
        (
            r#"{"fabric_memory.task_stream_num": 4, "fabric_memory.max_capacity": 1, "fabric_memory.enable_aicpu_unfold": false}"#,
            Want::Ok(4, 40, 1, false),
        ),
        (
            r#"{"fabric_memory.task_stream_num": 1}"#,
            Want::Ok(1, 40, 32, false),
        ),
        (r#"{"fabric_memory.enable_aicpu_unfold": true}"#, DEFAULT),
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.task_stream_num": 8}"#,
            Want::Ok(8, 40, 32, false),
        ),
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.task_stream_num": 9}"#,
            INVALID,
        ),
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.task_stream_num": 0}"#,
            INVALID,
        ),
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.task_stream_num": "2"}"#,
            Want::Ok(2, 40, 32, false),
        ),
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.task_stream_num": " 3"}"#,
            Want::Ok(3, 40, 32, false),
        ),
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.task_stream_num": "four"}"#,
            INVALID,
        ),
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.task_stream_num": 2.0}"#,
            INVALID,
        ),
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.task_stream_num": null}"#,
            INVALID,
        ),
        (r#"{"fabric_memory.enable_aicpu_unfold": "false"}"#, INVALID),
        (r#"{"fabric_memory.enable_aicpu_unfold": 0}"#, INVALID),
        // Nested form first, flat keys win.
        (
            r#"{"fabric_memory": {"task_stream_num": 3, "max_capacity": 2, "enable_aicpu_unfold": false}, "fabric_memory.task_stream_num": 5}"#,
            Want::Ok(5, 40, 2, false),
        ),
        (r#"{"fabric_memory": {"task_stream_num": 3}}"#, INVALID),
        (
            r#"{"fabric_memory": {"task_stream_num": 3}, "fabric_memory.enable_aicpu_unfold": false}"#,
            Want::Ok(3, 40, 32, false),
        ),
        (r#"{"fabric_memory": {"max_capacity": 0}}"#, INVALID),
        (r#"{"fabric_memory": {"enable_aicpu_unfold": 1}}"#, INVALID),
        (r#"{"fabric_memory": 5}"#, DEFAULT),
        (r#"{"fabric_memory": {"bogus": 1}}"#, DEFAULT),
        (
            r#"{"fabric_memory.max_capacity": 1024}"#,
            Want::Ok(4, 40, 1024, false),
        ),
        (r#"{"fabric_memory.max_capacity": 2000}"#, INVALID),
        (r#"{"fabric_memory.max_capacity": 0}"#, INVALID),
        (
            r#"{"fabric_memory.max_capacity": 18446744073709551615}"#,
            INVALID,
        ),
        // The start address of run G4.
        (
            r#"{"fabric_memory.enable_aicpu_unfold": false, "fabric_memory.start_address": 0}"#,
            Want::Ok(4, 0, 32, false),
        ),
        (
            r#"{"fabric_memory.start_address": 1024}"#,
            Want::Ok(4, 1024, 32, false),
        ),
        (r#"{"fabric_memory.start_address": 1025}"#, INVALID),
        (r#"{"fabric_memory.start_address": -1}"#, INVALID),
        (
            r#"{"fabric_memory.bogus": 1, "other.section": [1]}"#,
            DEFAULT,
        ),
        (
            r#"{"connect_pool.thread_num": 4, "connect_pool.task_queue_capacity": 65535}"#,
            DEFAULT,
        ),
        (r#"{"connect_pool.thread_num": 65}"#, INVALID),
        (r#"{"connect_pool.task_queue_capacity": 0}"#, INVALID),
        (
            r#"{"comm_resource_config.listen_port": 16666, "comm_resource_config.qos": 7}"#,
            DEFAULT,
        ),
        (r#"{"comm_resource_config.listen_port": 0}"#, INVALID),
        (r#"{"comm_resource_config.qos": 8}"#, INVALID),
        (
            r#"{"comm_resource_config.max_active_channels": 0}"#,
            INVALID,
        ),
        (
            r#"{"comm_resource_config.max_active_channels": 4294967295}"#,
            DEFAULT,
        ),
        (
            r#"{"comm_resource_config.max_active_channels": 4294967296}"#,
            INVALID,
        ),
        (r#"{"comm_resource_config.protocol_desc": "roce"}"#, DEFAULT),
        (
            r#"{"comm_resource_config.protocol_desc": ["a", "b"]}"#,
            DEFAULT,
        ),
        (r#"{"comm_resource_config.protocol_desc": 5}"#, INVALID),
        (
            r#"{"comm_resource_config.protocol_desc": ["a", 1]}"#,
            INVALID,
        ),
        (r#"{"local_comm_res_path": ""}"#, INVALID),
        (r#"{"local_comm_res_path": 5}"#, INVALID),
        (
            r#"{"local_comm_res_path": "/nonexistent/comm_res.json"}"#,
            INVALID,
        ),
        (r#"{"local_comm_res_path": "/"}"#, INVALID),
    ];
    for (json, want) in rows {
        assert_eq!(outcome(&grc(json), &[]), want, "{json}");
    }
    // With LocalCommRes given, the file is not read.
    let mut m = grc(r#"{"local_comm_res_path": "/nonexistent/comm_res.json"}"#);
    m.insert("LocalCommRes".into(), "{}".into());
    assert_eq!(outcome(&m, &[]), DEFAULT);
}

#[test]
fn local_comm_res_file_rules() {
    let dir = std::env::temp_dir().join(format!("ascend-fabric-lcr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let with_file = |name: &str, bytes: usize| {
        let p = dir.join(name);
        std::fs::write(&p, vec![b' '; bytes]).unwrap();
        let json = serde_json::json!({ "local_comm_res_path": p.to_str().unwrap() });
        outcome(&grc(&json.to_string()), &[])
    };
    assert_eq!(with_file("one", 1), DEFAULT);
    assert_eq!(with_file("mib", 1 << 20), DEFAULT);
    assert_eq!(with_file("empty", 0), INVALID);
    assert_eq!(with_file("big", (1 << 20) + 1), INVALID);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn refusals_name_the_option() {
    let e = read_map(&grc(r#"{"fabric_memory.task_stream_num": 4}"#), |_| None).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("fabric_memory.task_stream_num") && text.contains("enable_aicpu_unfold"),
        "{text}"
    );
    let e = read_map(&grc(r#"{"fabric_memory": {"max_capacity": 0}}"#), |_| None).unwrap_err();
    assert!(e.to_string().contains("fabric_memory.max_capacity"), "{e}");
    // HIXL checks protocol_desc before the other comm_resource_config fields.
    let both = r#"{"comm_resource_config.protocol_desc": 1, "comm_resource_config.qos": 9}"#;
    let e = read_map(&grc(both), |_| None).unwrap_err();
    assert!(e.to_string().contains("protocol_desc"), "{e}");
    let e = read_map(&map(&[ON, ("Bogus", "1")]), |_| None).unwrap_err();
    assert_eq!(
        e,
        OptionError::UnknownKey {
            key: "Bogus".into()
        }
    );
    let e = read_map(&map(&[]), |_| None).unwrap_err();
    assert!(e.to_string().contains("EnableUseFabricMem"), "{e}");
}
