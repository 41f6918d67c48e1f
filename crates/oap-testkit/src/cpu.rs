//! CPU time of processes from `/proc` (Linux), for benchmarks that compare
//! the work per request of programs sharing one machine.

use std::collections::HashMap;

/// Clock ticks per second of `/proc/<pid>/stat`'s times: `USER_HZ`, which
/// Linux fixes at 100 in its user ABI on every architecture we run on.
const USER_HZ: f64 = 100.0;

/// One line of `/proc/<pid>/stat`: the parent and the CPU seconds so far
/// (user + system, the process's live and exited threads).
fn stat_of(pid: u32) -> Option<(u32, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split
    // after its last ')'.
    let rest = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((ppid, (utime + stime) / USER_HZ))
}

/// CPU seconds used so far by process `pid` and every live descendant (an
/// MCP server a bridge started, say). Descendants that have exited are not
/// counted unless their parent has waited for them.
pub fn tree_cpu_seconds(pid: u32) -> std::io::Result<f64> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    let mut cpu: HashMap<u32, f64> = HashMap::new();
    for entry in std::fs::read_dir("/proc")? {
        let Some(p) = entry?
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some((ppid, seconds)) = stat_of(p) {
            children.entry(ppid).or_default().push(p);
            cpu.insert(p, seconds);
        }
    }
    if !cpu.contains_key(&pid) {
        return Err(std::io::Error::other(format!("no process {pid}")));
    }
    let mut total = 0.0;
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        total += cpu.get(&p).copied().unwrap_or(0.0);
        stack.extend(children.get(&p).into_iter().flatten().copied());
    }
    Ok(total)
}

/// CPU seconds used so far by process `pid` alone (its threads included,
/// its children not).
pub fn process_cpu_seconds(pid: u32) -> std::io::Result<f64> {
    stat_of(pid)
        .map(|(_, seconds)| seconds)
        .ok_or_else(|| std::io::Error::other(format!("no process {pid}")))
}

/// CPU seconds the whole machine has spent busy so far (every CPU, from
/// `/proc/stat`: all time but idle and iowait).
pub fn machine_busy_seconds() -> std::io::Result<f64> {
    let text = std::fs::read_to_string("/proc/stat")?;
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| std::io::Error::other("no cpu line in /proc/stat"))?;
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is
    // already inside user and nice).
    let busy: f64 = ticks
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    Ok(busy / USER_HZ)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_child_counts_in_its_parents_tree() {
        let own = std::process::id();
        let before = tree_cpu_seconds(own).unwrap();
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; sleep 30",
            ])
            .spawn()
            .unwrap();
        // Wait until the busy loop is done (the child then sleeps).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut child_cpu = 0.0;
        while std::time::Instant::now() < deadline {
            child_cpu = tree_cpu_seconds(child.id()).unwrap();
            let state = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap();
            if child_cpu > 0.05
                && state
                    .rsplit_once(')')
                    .unwrap()
                    .1
                    .trim_start()
                    .starts_with('S')
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let after = tree_cpu_seconds(own).unwrap();
        let child_alone = process_cpu_seconds(child.id()).unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert!(child_cpu > 0.05, "the child's loop used {child_cpu} s");
        assert!(
            after - before >= child_cpu - 0.01,
            "the tree grew by {} s, the child alone used {child_cpu} s",
            after - before
        );
        assert!(tree_cpu_seconds(u32::MAX).is_err());
        assert!(process_cpu_seconds(u32::MAX).is_err());
        assert!(
            (child_alone - child_cpu).abs() < 0.05,
            "{child_alone} vs {child_cpu}"
        );
        assert!(machine_busy_seconds().unwrap() > 0.0);
    }
}
