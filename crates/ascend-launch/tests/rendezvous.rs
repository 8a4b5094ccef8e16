//! Real processes: a test re-runs the test binary as the ranks of a job, each its own child in
//! a role (`ascend_testkit::role`).

use ascend_launch::{Error, Launcher, RankEnv, Rendezvous};
use ascend_testkit::{role, test_name, Spawn};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Commands starting `test` (the caller) again as a rank in `role`.
fn rank_command(test: &'static str, role: &'static str) -> impl FnMut(u32) -> Command {
    move |_| {
        let mut c = Spawn::new(test, role).into_command();
        c.stdout(Stdio::null());
        c
    }
}

/// The body each rank runs; the exit status tells the launcher how it went.
fn rank_body(role: &str) {
    let env = RankEnv::from_env().expect("rank variables");
    let mut rdv = Rendezvous::join(&env, Duration::from_secs(20)).expect("join");
    match role {
        "exchange" => {
            let mine = format!("rank-{}", env.rank).into_bytes();
            let all = rdv.all_gather(&mine).expect("all_gather");
            assert_eq!(all.len(), env.world_size as usize);
            for (r, part) in all.iter().enumerate() {
                assert_eq!(part, format!("rank-{r}").as_bytes());
            }
            let root = if env.rank == 0 {
                vec![7u8; 4108]
            } else {
                Vec::new()
            };
            assert_eq!(rdv.broadcast(&root).expect("broadcast"), vec![7u8; 4108]);
            rdv.barrier().expect("barrier");
        }
        "rank1_dies" => {
            if env.rank == 1 {
                std::process::exit(3);
            }
            // The others must see the loss, not hang.
            match rdv.all_gather(b"x") {
                Err(Error::PeerLost { .. }) => std::process::exit(0),
                other => panic!("expected PeerLost, got {other:?}"),
            }
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn ranks_exchange_bytes() {
    if let Some(role) = role() {
        return rank_body(&role);
    }
    let r = Launcher::new(4)
        .timeout(Duration::from_secs(60))
        .run(rank_command(test_name!(ranks_exchange_bytes), "exchange"))
        .unwrap();
    assert!(r.success(), "{:?}", r.statuses);
    assert_eq!(r.statuses.len(), 4);
}

#[test]
fn a_dead_rank_is_seen_by_the_others_and_fails_the_job() {
    if let Some(role) = role() {
        return rank_body(&role);
    }
    let r = Launcher::new(3)
        .timeout(Duration::from_secs(60))
        .run(rank_command(
            test_name!(a_dead_rank_is_seen_by_the_others_and_fails_the_job),
            "rank1_dies",
        ))
        .unwrap();
    assert!(!r.success());
    assert_eq!(r.statuses[1].code(), Some(3));
}

#[test]
fn bad_environment_is_a_typed_error() {
    // Only this test touches these variables in this process.
    std::env::set_var("RANK", "5");
    std::env::set_var("WORLD_SIZE", "2");
    assert!(matches!(
        RankEnv::from_env(),
        Err(Error::BadRank {
            rank: 5,
            world_size: 2
        })
    ));
    std::env::set_var("WORLD_SIZE", "two");
    assert!(matches!(
        RankEnv::from_env(),
        Err(Error::Env {
            name: "WORLD_SIZE",
            ..
        })
    ));
    std::env::remove_var("RANK");
    std::env::remove_var("WORLD_SIZE");
    assert!(matches!(
        RankEnv::from_env(),
        Err(Error::Env { name: "RANK", .. })
    ));
    assert!(matches!(
        Launcher::new(0).run(|_| Command::new("true")),
        Err(Error::BadRank { .. })
    ));
}

/// Rank 0 of two waits for a rank that never comes: `Timeout`. Nobody joins, so any port will
/// do: port 0 lets the kernel pick one at the bind (a port found free first could be taken by
/// another process before rank 0 binds it).
#[test]
fn a_missing_rank_times_out() {
    let env = RankEnv {
        rank: 0,
        world_size: 2,
        local_rank: 0,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
    };
    let err = Rendezvous::join(&env, Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
}
