//! What a tool process gets besides the kernel confinement, each prepared
//! in the parent and applied in the forked child with async-signal-safe
//! system calls only:
//!
//! - [`InheritedFds`]: every descriptor above stderr is closed at exec, so
//!   a descriptor the daemon inherited without close-on-exec (a pipe from
//!   its parent, a leaked `/dev/null`) never reaches a tool.
//! - [`Scratch`]: the call's scratch directory becomes a size-capped tmpfs
//!   in a private mount namespace when the daemon may mount (root with
//!   `CAP_SYS_ADMIN`), so writes past the cap fail with `ENOSPC`.
//! - [`CallUser`]: a daemon running as root runs each tool as an
//!   unprivileged uid of its own, so `RLIMIT_NPROC` (which root ignores)
//!   bounds the call's processes again.

#![allow(
    unsafe_code,
    reason = "this module is the raw close_range, mount and set*id system calls; each block has a SAFETY comment"
)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOUNT_ATTR_NOSUID: libc::c_uint = 0x2;
const MOUNT_ATTR_NODEV: libc::c_uint = 0x4;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

/// The first uid (and gid) of the per-call range. The range 0x70000000 and
/// up is left unused by systemd's allocation scheme and by distributions'
/// `useradd`, so no real account or container shares these ids.
pub const CALL_UID_BASE: u32 = 0x7100_0000;
/// How many per-call uids there are; calls take them in turn.
pub const CALL_UID_COUNT: u32 = 65_536;

/// Whether this process runs as root (effective uid 0).
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and touches no memory.
    unsafe { libc::geteuid() == 0 }
}

/// Descriptors above stderr, closed at exec in the child.
#[derive(Debug, Clone, Copy)]
pub struct InheritedFds {
    /// Where the last-resort walk stops when neither `close_range` nor
    /// `/proc` is available: the descriptor limit before the child lowers it.
    walk_limit: libc::c_int,
}

impl InheritedFds {
    /// Read the descriptor limit in the parent (the child lowers it before
    /// the walk could run).
    pub fn prepare() -> InheritedFds {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given and nothing else.
        let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        let highest = if rc == 0 {
            limit.rlim_cur.max(limit.rlim_max)
        } else {
            1 << 20
        };
        InheritedFds {
            walk_limit: libc::c_int::try_from(highest.min(1 << 20)).unwrap_or(1 << 20),
        }
    }

    /// Mark every descriptor above 2 close-on-exec. Runs in the child:
    /// only system calls, no allocation. Marking rather than closing keeps
    /// the descriptors the child still needs until exec (the standard
    /// library's exec-error pipe, the Landlock ruleset, the scratch mount)
    /// and closes all of them at exec all the same.
    pub fn close_on_exec(&self) -> io::Result<()> {
        // SAFETY: close_range only changes descriptor flags.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                libc::CLOSE_RANGE_CLOEXEC,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        // Linux before 5.11: walk the open descriptors instead.
        if mark_listed_fds().is_ok() {
            return Ok(());
        }
        mark_fds_below(self.walk_limit);
        Ok(())
    }
}

/// The last resort: every number from 3 up to `limit`.
fn mark_fds_below(limit: libc::c_int) {
    for fd in 3..limit {
        set_cloexec(fd);
    }
}

fn set_cloexec(fd: libc::c_int) {
    // SAFETY: fcntl on a number that may not be open fails with EBADF,
    // which is ignored; nothing else is touched.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFD);
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
        }
    }
}

/// Mark the descriptors `/proc/self/fd` lists, read with raw `getdents64`
/// into a stack buffer (no allocation, no libc directory stream).
fn mark_listed_fds() -> io::Result<()> {
    const DIR: &CStr = c"/proc/self/fd";
    // SAFETY: open of a constant path; the result is checked.
    let dir = unsafe {
        libc::open(
            DIR.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dir < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 2048];
    let result = loop {
        // SAFETY: getdents64 writes at most `buf.len()` bytes into `buf`.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir,
                buf.as_mut_ptr().cast::<libc::c_void>(),
                buf.len(),
            )
        };
        if n < 0 {
            break Err(io::Error::last_os_error());
        }
        if n == 0 {
            break Ok(());
        }
        let filled = usize::try_from(n).unwrap_or(0).min(buf.len());
        let mut offset = 0;
        // struct linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, name.
        while offset + 19 <= filled {
            let reclen = usize::from(u16::from_ne_bytes([buf[offset + 16], buf[offset + 17]]));
            if reclen == 0 || offset + reclen > filled {
                break;
            }
            let name = &buf[offset + 19..offset + reclen];
            let mut fd: libc::c_int = 0;
            let mut digits = 0;
            for &b in name.iter().take_while(|&&b| b != 0) {
                if !b.is_ascii_digit() {
                    digits = 0;
                    break;
                }
                fd = fd
                    .saturating_mul(10)
                    .saturating_add(libc::c_int::from(b - b'0'));
                digits += 1;
            }
            if digits > 0 && fd > 2 && fd != dir {
                set_cloexec(fd);
            }
            offset += reclen;
        }
    };
    // SAFETY: `dir` was opened above and is closed once.
    unsafe { libc::close(dir) };
    result
}

/// The uid (and gid) one tool call runs as when the daemon is root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallUser {
    uid: u32,
}

static NEXT_CALL_USER: AtomicU32 = AtomicU32::new(0);

impl CallUser {
    /// The next per-call uid, or `None` when tools keep the daemon's user:
    /// the daemon is not root, or its user namespace does not map the range
    /// (see [`crate::Support::call_users`]).
    pub fn next(support: &crate::Support) -> Option<CallUser> {
        if !support.call_users {
            return None;
        }
        let n = NEXT_CALL_USER.fetch_add(1, Ordering::Relaxed) % CALL_UID_COUNT;
        Some(CallUser {
            uid: CALL_UID_BASE + n,
        })
    }

    /// The uid, which is also the gid.
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Drop to the call's uid and gid with no supplementary groups and no
    /// capabilities. Runs in the child: raw system calls only (the libc
    /// wrappers signal other threads, of which the child has none).
    pub fn enter(&self) -> io::Result<()> {
        let id = self.uid;
        // SAFETY (all three): plain system calls on integers.
        if unsafe { libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) }
            != 0
        {
            return Err(io::Error::last_os_error());
        }
        if unsafe { libc::syscall(libc::SYS_setresgid, id, id, id) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if unsafe { libc::syscall(libc::SYS_setresuid, id, id, id) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Whether `[CALL_UID_BASE, CALL_UID_BASE + CALL_UID_COUNT)` is mapped in
/// this process's user namespace, for uids (`map` = `uid_map`) or gids.
pub(crate) fn range_mapped(map: &str) -> bool {
    use std::io::Read;
    // An id map has at most 340 lines of three numbers: 64 KiB is ample.
    let mut text = String::new();
    #[allow(
        clippy::disallowed_methods,
        reason = "the reader is take(64 KiB): capped"
    )]
    let read = std::fs::File::open(Path::new("/proc/self").join(map))
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text));
    match read {
        Ok(_) => map_covers_call_range(&text),
        // No /proc: assume the initial namespace, where every id exists.
        Err(_) => true,
    }
}

/// Whether an id map (`inside outside count` lines) covers the range.
fn map_covers_call_range(text: &str) -> bool {
    let want_end = u64::from(CALL_UID_BASE) + u64::from(CALL_UID_COUNT);
    text.lines().any(|line| {
        let mut fields = line.split_whitespace().map(str::parse::<u64>);
        match (fields.next(), fields.next(), fields.next()) {
            (Some(Ok(inside)), Some(Ok(_)), Some(Ok(count))) => {
                inside <= u64::from(CALL_UID_BASE) && inside + count >= want_end
            }
            _ => false,
        }
    })
}

/// Whether a child can make a private mount namespace (a service manager
/// may forbid it, e.g. systemd's `RestrictNamespaces=`): asked in a forked
/// child so that this process stays where it is.
pub(crate) fn child_can_unshare_mounts() -> bool {
    // SAFETY: the child makes two system calls and `_exit`s; the parent
    // waits for it.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            let ok = libc::unshare(libc::CLONE_NEWNS) == 0;
            libc::_exit(if ok { 0 } else { 1 });
        }
        if pid < 0 {
            return false;
        }
        let mut status = 0;
        if libc::waitpid(pid, &mut status, 0) != pid {
            return false;
        }
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

/// One call's scratch directory, capped in total bytes.
#[derive(Debug)]
pub struct Scratch {
    dir: PathBuf,
    dir_c: CString,
    cap_bytes: u64,
    /// The size-capped tmpfs, created detached in the parent and attached
    /// over `dir` in the child's private mount namespace.
    mount: Option<OwnedFd>,
}

/// Building a capped scratch filesystem failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot create the scratch filesystem ({step}): {error}")]
pub struct ScratchError {
    step: &'static str,
    error: io::Error,
}

impl Scratch {
    /// The scratch directory `dir` with at most `cap_bytes` written below
    /// it. With [`crate::Support::scratch_tmpfs`] a tmpfs of that size
    /// (owned by `owner` when given, mode 0700, no set-uid, no devices)
    /// is made now; otherwise `dir` stays as it is and the caller watches
    /// its size ([`Scratch::is_mounted`] tells which).
    pub fn prepare(
        support: &crate::Support,
        dir: &Path,
        cap_bytes: u64,
        owner: Option<CallUser>,
    ) -> Result<Scratch, ScratchError> {
        let dir_c = CString::new(dir.as_os_str().as_bytes()).map_err(|_| ScratchError {
            step: "path",
            error: io::Error::from(io::ErrorKind::InvalidInput),
        })?;
        let mount = if support.scratch_tmpfs {
            Some(tmpfs(cap_bytes, owner)?)
        } else {
            None
        };
        Ok(Scratch {
            dir: dir.to_path_buf(),
            dir_c,
            cap_bytes,
            mount,
        })
    }

    /// The directory as the parent sees it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The cap in bytes.
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    /// Whether the cap is the kernel's (a tmpfs of that size).
    pub fn is_mounted(&self) -> bool {
        self.mount.is_some()
    }

    /// The tmpfs root, for the Landlock rule (a rule on the directory it
    /// covers would not apply inside it).
    pub(crate) fn mount_fd(&self) -> Option<BorrowedFd<'_>> {
        self.mount.as_ref().map(|m| m.as_fd())
    }

    /// Whether the tmpfs is full: the tool met the cap. Always false
    /// without a tmpfs.
    pub fn is_full(&self) -> bool {
        let Some(mount) = &self.mount else {
            return false;
        };
        let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: fstatfs fills the struct it is given; read only on success.
        let rc = unsafe { libc::fstatfs(mount.as_raw_fd(), stat.as_mut_ptr()) };
        if rc != 0 {
            return false;
        }
        // SAFETY: fstatfs succeeded, so the struct is initialised.
        let stat = unsafe { stat.assume_init() };
        stat.f_bavail == 0 || stat.f_ffree == 0
    }

    /// Attach the tmpfs over the directory in a new, private mount
    /// namespace and move the working directory onto it. Runs in the child
    /// while it still has the daemon's privileges; only system calls on
    /// values prepared in the parent.
    pub fn enter(&self) -> io::Result<()> {
        let Some(mount) = &self.mount else {
            return Ok(());
        };
        // SAFETY (all blocks): system calls on descriptors and C strings
        // prepared before fork; results checked.
        if unsafe { libc::unshare(libc::CLONE_NEWNS) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Without this the mount would propagate back to the daemon's
        // namespace through shared peer groups.
        let rc = unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let rc = unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                mount.as_raw_fd(),
                c"".as_ptr(),
                libc::AT_FDCWD,
                self.dir_c.as_ptr(),
                MOVE_MOUNT_F_EMPTY_PATH,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // The working directory was set to the covered directory before.
        if unsafe { libc::chdir(self.dir_c.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A detached tmpfs of `size` bytes through the mount API (`fsopen`,
/// `fsconfig`, `fsmount`): nothing is attached in the daemon's namespace.
fn tmpfs(size: u64, owner: Option<CallUser>) -> Result<OwnedFd, ScratchError> {
    let fail = |step: &'static str| ScratchError {
        step,
        error: io::Error::last_os_error(),
    };
    // SAFETY: fsopen of a constant file system name; the result is checked
    // and owned.
    let fs = unsafe { libc::syscall(libc::SYS_fsopen, c"tmpfs".as_ptr(), FSOPEN_CLOEXEC) };
    if fs < 0 {
        return Err(fail("fsopen"));
    }
    // SAFETY: a fresh descriptor this function owns from here on.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as libc::c_int) };
    // Inodes cost kernel memory the size option does not count: one per
    // 16 KiB of the cap, at least 1024.
    let inodes = (size / (16 * 1024)).max(1024);
    let mut options: Vec<(&CStr, String)> = vec![
        (c"size", size.to_string()),
        (c"nr_inodes", inodes.to_string()),
        (c"mode", "0700".to_string()),
    ];
    if let Some(user) = owner {
        options.push((c"uid", user.uid().to_string()));
        options.push((c"gid", user.uid().to_string()));
    }
    for (key, value) in &options {
        let value = CString::new(value.as_str()).map_err(|_| ScratchError {
            step: "fsconfig",
            error: io::Error::from(io::ErrorKind::InvalidInput),
        })?;
        // SAFETY: fsconfig reads the two C strings; the result is checked.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        };
        if rc != 0 {
            return Err(fail("fsconfig"));
        }
    }
    // SAFETY: as above, no pointers.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if rc != 0 {
        return Err(fail("create"));
    }
    // SAFETY: fsmount on the configured context; the result is checked.
    let mnt = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
        )
    };
    if mnt < 0 {
        return Err(fail("fsmount"));
    }
    // SAFETY: a fresh descriptor, owned from here on.
    Ok(unsafe { OwnedFd::from_raw_fd(mnt as libc::c_int) })
}

/// Whether this process can make a tmpfs with the mount API: tried once
/// (a tiny one, never attached).
pub(crate) fn tmpfs_available() -> Result<(), String> {
    match tmpfs(1 << 20, None) {
        Ok(_) => Ok(()),
        Err(e) => Err(match e.error.raw_os_error() {
            Some(libc::EPERM) => {
                "the daemon may not mount (it needs CAP_SYS_ADMIN, i.e. root)".into()
            }
            Some(libc::ENOSYS) => "the kernel lacks the mount API (Linux 5.2+)".into(),
            _ => e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inheritable_pipe() -> [libc::c_int; 2] {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        fds
    }

    fn cloexec(fd: libc::c_int) -> bool {
        // SAFETY: F_GETFD on a descriptor this test owns.
        unsafe { libc::fcntl(fd, libc::F_GETFD) & libc::FD_CLOEXEC != 0 }
    }

    fn close(fds: [libc::c_int; 2]) {
        for fd in fds {
            // SAFETY: descriptors this test opened, closed once.
            unsafe { libc::close(fd) };
        }
    }

    // The fallbacks for kernels without close_range(CLOSE_RANGE_CLOEXEC),
    // run in this process: they only add close-on-exec, which no test
    // here depends on being absent.
    #[test]
    fn the_proc_walk_marks_an_inherited_pipe() {
        let fds = inheritable_pipe();
        assert!(!cloexec(fds[0]) && !cloexec(fds[1]));
        mark_listed_fds().unwrap();
        assert!(cloexec(fds[0]) && cloexec(fds[1]));
        close(fds);
    }

    #[test]
    fn the_walk_up_to_the_limit_marks_an_inherited_pipe() {
        let fds = inheritable_pipe();
        mark_fds_below(InheritedFds::prepare().walk_limit.min(65_536));
        assert!(cloexec(fds[0]) && cloexec(fds[1]));
        close(fds);
    }

    #[test]
    fn id_maps() {
        assert!(map_covers_call_range("         0          0 4294967295\n"));
        // A rootless container: 65536 ids.
        assert!(!map_covers_call_range("0 1000 1\n1 100000 65536\n"));
        assert!(map_covers_call_range(&format!(
            "0 0 1\n{CALL_UID_BASE} 5000000 {CALL_UID_COUNT}\n"
        )));
        assert!(!map_covers_call_range(""));
    }
}
