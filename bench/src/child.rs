//! Measuring a command as a user runs it: `nodewright-bench run-child -- PROGRAM ARGS`
//! runs it and prints its wall time and peak RSS (`ru_maxrss` from `wait4`), and the
//! CPU time of the children waited for. Why a separate small process: Linux counts the
//! memory of the process that spawns a child in the child's `ru_maxrss` (at exec, the
//! high-water mark of the address space it leaves is kept), and the bench holds the
//! generated workloads; `run-child` is fresh and small, so what it reports is the
//! command's own peak.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const RUN_CHILD_PREFIX: &str = "run-child:";

/// A release binary of this workspace: `target/release/<name>` (or under
/// `CARGO_TARGET_DIR`).
pub fn release_binary(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("release").join(name)
}

/// `--binary`, else the release `nodewright`; an error saying how to build it when it
/// is missing.
pub fn nodewright_binary(given: Option<&Path>) -> Result<PathBuf, String> {
    let path = given.map_or_else(|| release_binary("nodewright"), Path::to_path_buf);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} not found: build it with `cargo build --release -p nodewright-cli`, or pass --binary",
            path.display()
        ))
    }
}

/// This executable, which the measured command runs under as `run-child`.
pub fn this_executable() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))
}

/// A `Command` running `program args...` under `run-child`.
pub fn under_run_child(program: &Path) -> Result<Command, String> {
    let mut command = Command::new(this_executable()?);
    command.args(["run-child", "--"]).arg(program);
    Ok(command)
}

/// The wall time and peak RSS (KiB) that `run-child` printed among `stderr`'s lines.
pub fn parse_run_child(stderr: &str) -> Option<(Duration, u64)> {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(RUN_CHILD_PREFIX))?;
    let mut wall = None;
    let mut kib = None;
    for (k, v) in line.split_whitespace().filter_map(|kv| kv.split_once('=')) {
        match k {
            "wall_ns" => wall = v.parse().ok().map(Duration::from_nanos),
            "maxrss_kib" => kib = v.parse().ok(),
            _ => {}
        }
    }
    Some((wall?, kib?))
}

/// `nodewright-bench run-child -- PROGRAM ARGS...`: runs the program with this process's
/// stdin/stdout, its stderr passed through, and prints one `run-child:` line to stderr
/// with its wall time and peak RSS. Fails when the program does.
pub fn run_child(command: &[String]) -> Result<(), String> {
    let (program, args) = command
        .split_first()
        .ok_or("run-child: no command given after --")?;
    let started = Instant::now();
    let child = Command::new(program)
        .args(args)
        .spawn()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    let (status, maxrss_kib) = wait_with_rusage(child.id())?;
    let wall = started.elapsed();
    eprintln!(
        "{RUN_CHILD_PREFIX} status={status} wall_ns={} maxrss_kib={maxrss_kib}",
        wall.as_nanos()
    );
    if status == 0 {
        Ok(())
    } else {
        Err(format!("{program} exited with status {status}"))
    }
}

/// Waits for the child `pid` and returns its exit status and peak RSS in KiB (Linux
/// reports `ru_maxrss` in KiB). `wait4` gives the rusage of this one child, where
/// `getrusage(RUSAGE_CHILDREN)` would give the largest of all children so far.
fn wait_with_rusage(pid: u32) -> Result<(i32, u64), String> {
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid for writes for the duration of the call.
        let r = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if r == pid as libc::pid_t {
            break;
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("wait4: {err}"));
        }
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    Ok((code, usage.ru_maxrss.max(0) as u64))
}

/// User + system time of this process's children that have been waited for.
pub fn children_cpu() -> Duration {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is valid for writes for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) } != 0 {
        return Duration::ZERO;
    }
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    time(u.ru_utime) + time(u.ru_stime)
}
