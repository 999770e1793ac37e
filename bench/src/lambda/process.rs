//! The function's process as Lambda keeps it: started once, frozen between
//! invocations (SIGSTOP/SIGCONT, as Lambda freezes a warm execution environment),
//! and measured from /proc: CPU time (`utime + stime` of every thread, in clock
//! ticks) and peak resident memory (`VmHWM`, reset between invocations through
//! `clear_refs`, so each invocation reports its own peak).

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct FunctionProcess {
    child: Child,
    ticks_per_second: f64,
}

impl Drop for FunctionProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

impl FunctionProcess {
    /// Starts `binary` with only `vars` in its environment, stdout and stderr to `log`.
    pub fn start(binary: &Path, vars: &[(String, String)], log: &Path) -> Result<Self, String> {
        let out = File::create(log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log.display()))?;
        let child = Command::new(binary)
            .env_clear()
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
        Ok(FunctionProcess {
            child,
            ticks_per_second: ticks_per_second(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot wait: {e}")),
        }
    }

    /// CPU seconds used so far, user and system, all threads.
    pub fn cpu_seconds(&self) -> Result<f64, String> {
        cpu_seconds(self.pid(), self.ticks_per_second)
    }

    /// Peak resident set since the process started or since the last
    /// [`Self::reset_peak_rss`], in bytes.
    pub fn peak_rss_bytes(&self) -> Result<u64, String> {
        status_bytes(self.pid(), "VmHWM")
    }

    /// Starts the peak-RSS count over from the current RSS (`clear_refs` value 5).
    pub fn reset_peak_rss(&self) -> Result<(), String> {
        let path = format!("/proc/{}/clear_refs", self.pid());
        std::fs::write(&path, "5").map_err(|e| format!("{path}: {e}"))
    }

    /// Freezes the process (Lambda between invocations).
    pub fn freeze(&self) -> Result<(), String> {
        self.signal(libc::SIGSTOP)
    }

    pub fn thaw(&self) -> Result<(), String> {
        self.signal(libc::SIGCONT)
    }

    fn signal(&self, signal: libc::c_int) -> Result<(), String> {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child,
        // not yet reaped (so it cannot have been reused).
        let r = unsafe { libc::kill(self.pid() as libc::pid_t, signal) };
        if r == 0 {
            Ok(())
        } else {
            Err(format!(
                "signal {signal} to {}: {}",
                self.pid(),
                std::io::Error::last_os_error()
            ))
        }
    }

    /// Ends the process: SIGTERM (thawed first), then SIGKILL after a second.
    pub fn stop(&mut self) {
        if self.exited().is_some() {
            return;
        }
        let _ = self.thaw();
        let _ = self.signal(libc::SIGTERM);
        for _ in 0..20 {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clock ticks per second, the unit of /proc's CPU times.
pub fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// CPU seconds process `pid` has used so far, user and system, all threads.
pub fn cpu_seconds(pid: u32, ticks_per_second: f64) -> Result<f64, String> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    // Fields 14 and 15 of proc(5), counted from the state (field 3) here.
    let tick = |i: usize| -> Result<f64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .map(|t| t as f64)
            .ok_or_else(|| format!("{path}: no field {}", i + 3))
    };
    Ok((tick(11)? + tick(12)?) / ticks_per_second)
}

/// A memory line of /proc/PID/status (`VmHWM`, `VmRSS`), in bytes.
pub fn status_bytes(pid: u32, field: &str) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| format!("{path}: no {field}"))
}
