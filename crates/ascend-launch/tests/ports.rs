//! `free_port` hands out ports outside the kernel's ephemeral range (which outgoing
//! connections draw from), bindable when handed out, and never the same one twice.

#[test]
fn free_ports_avoid_the_ephemeral_range_and_never_repeat() {
    let ephemeral_start: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768);
    let ports: Vec<u16> = (0..64)
        .map(|_| ascend_launch::free_port().unwrap())
        .collect();
    let mut unique = ports.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        ports.len(),
        "a port handed out twice: {ports:?}"
    );
    for p in &ports {
        assert!(
            *p < ephemeral_start && *p >= 10_000,
            "{p} in the ephemeral range"
        );
    }
    // Each is bindable now (nobody else in this process was given it).
    for p in ports {
        std::net::TcpListener::bind(("127.0.0.1", p)).unwrap();
    }
}
