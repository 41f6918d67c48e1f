//! Memory of a process from `/proc/<pid>/status` (Linux).

/// A snapshot of `/proc/<pid>/status`.
pub struct ProcStatus {
    pid: String,
    text: String,
}

impl ProcStatus {
    /// The status of process `pid`.
    pub fn of(pid: u32) -> std::io::Result<ProcStatus> {
        Self::read(pid.to_string())
    }

    /// This process.
    pub fn own() -> std::io::Result<ProcStatus> {
        Self::read("self".into())
    }

    fn read(pid: String) -> std::io::Result<ProcStatus> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        Ok(ProcStatus { pid, text })
    }

    /// The text after `key:` (`"123456 kB"`), trimmed.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.text.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(str::trim)
        })
    }

    /// A `kB` field (`VmRSS`, `VmHWM`, `RssAnon`, `RssFile`, ...) in kB.
    pub fn kb(&self, key: &str) -> Option<f64> {
        self.raw(key)?.split_whitespace().next()?.parse().ok()
    }

    /// A `kB` field in MB (10^6 bytes).
    pub fn mb(&self, key: &str) -> Option<f64> {
        self.kb(key).map(|kb| kb * 1024.0 / 1e6)
    }

    /// [`Self::mb`], or an error naming the field and the process.
    pub fn mb_or_err(&self, key: &str) -> std::io::Result<f64> {
        self.mb(key)
            .ok_or_else(|| std::io::Error::other(format!("no {key}: in /proc/{}/status", self.pid)))
    }
}

/// `VmRSS` and `VmHWM` of a process, in MB (10^6 bytes).
pub fn rss_hwm_mb(pid: u32) -> std::io::Result<(f64, f64)> {
    let status = ProcStatus::of(pid)?;
    Ok((status.mb_or_err("VmRSS")?, status.mb_or_err("VmHWM")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let status = ProcStatus::own().unwrap();
        assert!(status.kb("VmRSS").unwrap() > 0.0);
        assert!(status.raw("VmHWM").unwrap().ends_with("kB"));
        assert!(status.kb("NoSuchField").is_none());
        assert!(status.mb_or_err("NoSuchField").is_err());
    }
}
