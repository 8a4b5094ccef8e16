# Sourced by the CI scripts (bash): free loopback ports.
#
# A loopback port that nothing on this host uses now and that this script has not handed out,
# from below the kernel's ephemeral range (as the launcher's `free_port` picks them: a port in
# that range can be taken by any outgoing connection meanwhile): pick_port VAR.
handed=" "
pick_port() {
    local lo=10000 hi=32768 used p _
    read -r hi _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || hi=32768
    [ "$hi" -gt $((lo + 1000)) ] || hi=65535
    used=" "
    while read -r p; do used+="$((16#$p)) "; done < <(awk 'FNR > 1 { n = split($2, a, ":"); print a[n] }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
    for _ in $(seq 1 1000); do
        p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
        case "$used$handed" in *" $p "*) continue ;; esac
        handed+="$p "
        printf -v "$1" '%s' "$p"
        return 0
    done
    echo "no free loopback port found between $lo and $hi" >&2
    return 1
}
