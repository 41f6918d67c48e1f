//! Background priority for index builds.
//!
//! A crawl or a directory change re-embeds manifests while the daemon keeps
//! answering queries on the same few cores. A query embedding takes ~10 ms; a
//! rebuild can take minutes. Running the rebuild's threads under
//! `SCHED_IDLE` lets every query preempt them at once, so the rebuild only
//! uses cycles nobody else wants (measured: `cargo xtask bench-crawl`).

/// Lowers the calling thread to the idle scheduling class (Linux
/// `SCHED_IDLE`), or failing that to nice 19. Returns whether either worked.
/// Lowering one's own priority needs no privilege; under a seccomp filter
/// that forbids it the thread keeps its priority and only fairness suffers.
#[allow(
    unsafe_code,
    reason = "a system call; the SAFETY comment at the block says why it is sound"
)]
pub fn lower_current_thread_priority() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: pid 0 is the calling thread; `param` is a valid, initialised
        // sched_param that outlives the call.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0 {
            return true;
        }
        // SAFETY: plain syscall on the calling thread (who = 0), no pointers.
        if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) } == 0 {
            return true;
        }
        tracing::debug!(
            error = %std::io::Error::last_os_error(),
            "cannot lower the priority of a background thread"
        );
        false
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// Whether the calling thread runs in the idle class.
#[cfg(all(test, target_os = "linux"))]
#[allow(
    unsafe_code,
    reason = "a system call; the SAFETY comment at the block says why it is sound"
)]
fn current_thread_is_idle_class() -> bool {
    // SAFETY: pid 0 is the calling thread; no pointers.
    unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
}

/// Hands memory the allocator keeps after a large, finished job (an index
/// rebuild's batches and vector maps) back to the kernel, so the daemon's
/// resident size falls back instead of staying at the rebuild's peak.
/// glibc only; elsewhere a no-op.
#[allow(
    unsafe_code,
    reason = "a system call; the SAFETY comment at the block says why it is sound"
)]
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; no
    // pointers of ours are involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn lowering_affects_only_the_calling_thread() {
        let lowered = std::thread::spawn(|| {
            let ok = lower_current_thread_priority();
            (ok, current_thread_is_idle_class())
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (true, true));
        assert!(!current_thread_is_idle_class());
    }
}
