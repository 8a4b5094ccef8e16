//! `ascend-cluster`: a command per emulated host, each on its own address, output prefixed
//! by host; a failing command fails the run; nothing is left after. Needs root (skipped,
//! saying so, elsewhere).

use std::process::{Command, Output};

fn cli(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ascend-cluster"))
        .args(args)
        .output()
        .expect("run ascend-cluster")
}

#[test]
fn supernode_cluster_cli_runs_a_command_per_host_and_leaves_nothing() {
    // A bad command line is refused before anything is made, root or not.
    let o = cli(&["--supernodes", "0,x", "--run", "true", "--run", "true"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--supernodes"));
    if let Err(why) = ascend_testkit::cluster::available() {
        eprintln!("skipped: {why}");
        return;
    }
    let show = "ip -4 -o addr show eth0; echo \"sim host $ASCEND_SIM_HOST of $ASCEND_SIM_SUPERNODE, peer $HOST_ADDR_0\"";
    let o = cli(&["--supernodes", "0,1", "--run", show, "--run", show]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    for (i, n) in [(0, 0), (1, 1)] {
        assert!(
            out.lines().any(|l| l.starts_with(&format!("[host {i}]"))
                && l.contains(&format!("inet 198.18.0.{}/24", i + 1))),
            "{out}"
        );
        assert!(
            out.contains(&format!("[host {i}] sim host {i} of {n}, peer 198.18.0.1")),
            "{out}"
        );
    }
    // With --etcd one more host runs etcd (healthy before the commands start).
    if ascend_testkit::etcd::available() {
        let o = cli(&[
            "--etcd",
            "--run",
            "echo url $ETCD_URL, etcd on $HOST_ADDR_1",
        ]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{o:?}");
        assert!(
            out.contains("[host 0] url http://198.18.0.2:2379, etcd on 198.18.0.2"),
            "{out}"
        );
    }
    let o = cli(&["--run", "true", "--run", "exit 3"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("host 1's command failed"));
    let lists = [&["netns", "list"][..], &["-o", "link", "show"][..]];
    for args in lists {
        let o = Command::new("ip").args(args).output().expect("ip");
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(
            !text
                .split(|c: char| c.is_whitespace() || c == ':' || c == '@')
                .any(|w| {
                    w.strip_prefix("as")
                        .and_then(|r| r.split_once('c'))
                        .is_some_and(|(pid, _)| {
                            pid.parse::<u32>().is_ok_and(|p| {
                                !std::path::Path::new(&format!("/proc/{p}")).exists()
                            })
                        })
                }),
            "left behind: {text}"
        );
    }
}
