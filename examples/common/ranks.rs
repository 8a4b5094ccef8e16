//! The launcher side of the examples whose ranks are processes: `--ranks N` and starting N
//! copies of the current example under `ascend_launch::Launcher`.

use std::process::Command;
use std::time::Duration;

use ascend_launch::Launcher;

/// `--ranks N` (or `--ranks=N`) from the command line: `default` without it, an error for
/// anything else or for a count outside `1..=max`.
pub fn parse_ranks(default: u32, max: u32) -> Result<u32, String> {
    let mut args = std::env::args().skip(1);
    let mut ranks = default;
    while let Some(a) = args.next() {
        let v = match a.strip_prefix("--ranks=") {
            Some(v) => v.to_string(),
            None if a == "--ranks" => args.next().ok_or("--ranks needs a value")?,
            None => return Err(format!("unknown argument {a:?} (usage: [--ranks N])")),
        };
        ranks = v
            .parse()
            .map_err(|_| format!("--ranks {v:?}: not a number"))?;
    }
    if !(1..=max).contains(&ranks) {
        return Err(format!("--ranks {ranks}: must be 1..={max}"));
    }
    Ok(ranks)
}

/// Runs the ranks (`--ranks`, `default` without it) as processes of this executable, each
/// given its rank's variables by the launcher; true when every rank exited successfully.
pub fn launch(default: u32, max: u32) -> Result<bool, Box<dyn std::error::Error>> {
    let ranks = parse_ranks(default, max)?;
    let exe = std::env::current_exe()?;
    println!("launching {ranks} rank processes of {}", exe.display());
    let job = Launcher::new(ranks)
        .timeout(Duration::from_secs(300))
        .run(|_| Command::new(&exe))?;
    for (r, s) in job.statuses.iter().enumerate() {
        if !s.success() {
            eprintln!("rank {r}: {s}");
        }
    }
    Ok(job.success())
}
