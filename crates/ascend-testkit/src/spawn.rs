//! Children that die with this process: a parent-death signal set before exec, and a spawning
//! thread that lives as long as the process (the signal follows the thread that forked).

use std::process::{Child, Command};
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;

/// Has `cmd`'s process killed (SIGKILL) when its parent dies, however the parent ends
/// (`PR_SET_PDEATHSIG`, set between fork and exec; it survives the exec). A parent
/// that died before the child set it sends no signal, so the child then exits at once.
#[cfg(target_os = "linux")]
pub(crate) fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = libc::pid_t::try_from(std::process::id()).expect("a pid fits in pid_t");
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // functions may be called: it calls prctl, getppid and _exit (and reads errno on a
    // failure), allocates nothing and takes no lock; `parent` is a copied integer.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Reparented already: the parent died before the prctl, and no signal will come.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Elsewhere than Linux there is no parent-death signal: a child goes when its owner kills it.
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent(_cmd: &mut Command) {}

/// A command for the spawning thread, and where it sends the child back.
type SpawnRequest = (Command, Sender<std::io::Result<Child>>);

/// Starts `cmd` from a thread that lives as long as this process. The parent-death signal
/// ([`die_with_parent`]) is sent when the *thread* that forked ends, so a child started from a
/// test's own thread would be killed when that test ends, even if what owns it lives on
/// (moved to another thread, or shared by several tests); this thread only ends with the
/// process.
pub(crate) fn spawn_for_life(cmd: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Sender<SpawnRequest>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, requests) = channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testkit-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in requests {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the spawning thread");
        tx
    });
    let (reply, spawned) = channel();
    spawner
        .send((cmd, reply))
        .expect("the spawning thread is running");
    spawned.recv().expect("the spawning thread answers")
}
