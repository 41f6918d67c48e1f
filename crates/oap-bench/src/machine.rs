//! Where and when a benchmark ran, for the header of its report: the CPU,
//! cores and memory, the load average, the UTC time. Plain `std` (xtask
//! prints these before it builds anything, so the library keeps them).

use std::process::Command;

/// `MODEL, N cores, M GiB RAM` from `lscpu` and `/proc/meminfo`.
pub fn machine_description() -> String {
    let lscpu = Command::new("lscpu")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let model = lscpu
        .lines()
        .find_map(|l| l.strip_prefix("Model name:"))
        .map(str::trim)
        .unwrap_or("unknown CPU");
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0 / 1024.0);
    format!("{model}, {cores} cores, {mem_gb:.1} GiB RAM")
}

/// The 1, 5 and 15 minute load averages, or `?`.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// `YYYY-MM-DD HH:MM UTC` (from `date -u`), or empty.
pub fn now_utc() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_header_names_cores_memory_and_load() {
        let machine = super::machine_description();
        assert!(
            machine.contains(" cores, ") && machine.ends_with(" GiB RAM"),
            "{machine}"
        );
        assert_eq!(super::loadavg().split(' ').count(), 3);
        assert!(super::now_utc().ends_with(" UTC"));
    }
}
