//! Real processes: the test binary re-runs itself as the ranks of a job.

use ascend_launch::{Error, Launcher, RankEnv, Rendezvous};
use std::process::Command;
use std::time::Duration;

const ROLE: &str = "ASCEND_LAUNCH_TEST_ROLE";

fn rank_command(test: &str, role: &str) -> impl FnMut(u32) -> Command {
    let test = test.to_owned();
    let role = role.to_owned();
    move |_| {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args([test.as_str(), "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, &role)
            .stdout(std::process::Stdio::null());
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
        _ => unreachable!(),
    }
}

#[test]
fn ranks_exchange_bytes() {
    if let Ok(role) = std::env::var(ROLE) {
        return rank_body(&role);
    }
    let r = Launcher::new(4)
        .timeout(Duration::from_secs(60))
        .run(rank_command("ranks_exchange_bytes", "exchange"))
        .unwrap();
    assert!(r.success(), "{:?}", r.statuses);
    assert_eq!(r.statuses.len(), 4);
}

#[test]
fn a_dead_rank_is_seen_by_the_others_and_fails_the_job() {
    if let Ok(role) = std::env::var(ROLE) {
        return rank_body(&role);
    }
    let r = Launcher::new(3)
        .timeout(Duration::from_secs(60))
        .run(rank_command(
            "a_dead_rank_is_seen_by_the_others_and_fails_the_job",
            "rank1_dies",
        ))
        .unwrap();
    assert!(!r.success());
    assert_eq!(r.statuses[1].code(), Some(3));
}

#[test]
fn bad_environment_is_a_typed_error() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
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

#[test]
fn a_missing_rank_times_out() {
    if std::env::var(ROLE).is_ok() {
        return;
    }
    let env = RankEnv {
        rank: 0,
        world_size: 2,
        local_rank: 0,
        master_addr: "127.0.0.1".into(),
        master_port: ascend_launch::free_port().unwrap(),
    };
    let err = Rendezvous::join(&env, Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
}
