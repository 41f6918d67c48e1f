//! The Linux implementation: Landlock through the `landlock` crate (rules
//! built in the parent, the ruleset file descriptor handed to the child),
//! seccomp-bpf compiled by `seccompiler` plus one small hand-written
//! program for what seccompiler cannot express (a different errno for
//! `clone3`, and refusing x32 system call numbers).

#![allow(
    unsafe_code,
    reason = "this module is the raw Landlock, seccomp and prctl system calls; each block has a SAFETY comment"
)]

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use landlock::{
    Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};

use crate::{Policy, SandboxError, Support, SYSTEM_READ_PATHS, SYSTEM_WRITE_PATHS};

/// The newest Landlock ABI whose rights this code asks for; older kernels
/// get what they support (the crate's best-effort compatibility).
const WANTED_ABI: ABI = ABI::V6;

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

const SECCOMP_SET_MODE_FILTER: libc::c_uint = 1;
const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

/// Namespace-creating `clone` flags: refused even to programs that may
/// start processes.
const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWCGROUP as u64,
];

pub(crate) fn probe() -> Support {
    // SAFETY: landlock_create_ruleset with a NULL attribute, size 0 and the
    // VERSION flag only returns the ABI version; it creates nothing.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    let (landlock_abi, landlock_unavailable) = if abi >= 1 {
        (u32::try_from(abi).unwrap_or(0), None)
    } else {
        let err = std::io::Error::last_os_error();
        let why = match err.raw_os_error() {
            Some(libc::ENOSYS) => "the kernel has no Landlock (Linux 5.13+ built with it)".into(),
            Some(libc::EOPNOTSUPP) => {
                "Landlock is built in but not enabled (add landlock to the lsm= boot parameter)"
                    .into()
            }
            Some(libc::EPERM) => {
                "refused by a system call filter around the daemon (allow landlock_* in the unit)"
                    .into()
            }
            _ => err.to_string(),
        };
        (0, Some(why))
    };
    let action: u32 = SECCOMP_RET_ERRNO;
    // SAFETY: SECCOMP_GET_ACTION_AVAIL only reads the u32 it is given and
    // reports whether that action is supported; it installs nothing.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0u32,
            &action as *const u32,
        )
    };
    let (seccomp, seccomp_unavailable) = if rc == 0 {
        (true, None)
    } else {
        let err = std::io::Error::last_os_error();
        let why = match err.raw_os_error() {
            Some(libc::ENOSYS) | Some(libc::EINVAL) => {
                "the kernel has no seccomp filters (CONFIG_SECCOMP_FILTER)".into()
            }
            Some(libc::EPERM) => {
                "refused by a system call filter around the daemon (allow seccomp in the unit)"
                    .into()
            }
            _ => err.to_string(),
        };
        (false, Some(why))
    };
    let root = crate::process::is_root();
    let scratch = crate::process::tmpfs_available().and_then(|()| {
        if crate::process::child_can_unshare_mounts() {
            Ok(())
        } else {
            Err("a private mount namespace is refused (e.g. systemd's RestrictNamespaces=)".into())
        }
    });
    Support {
        landlock_abi,
        landlock_unavailable,
        seccomp,
        seccomp_unavailable,
        scratch_tmpfs: scratch.is_ok(),
        scratch_tmpfs_unavailable: scratch.err(),
        root,
        call_users: root
            && crate::process::range_mapped("uid_map")
            && crate::process::range_mapped("gid_map"),
    }
}

/// What [`Prepared::enter`] applies in the child.
#[derive(Default)]
pub(crate) struct Prepared {
    landlock: Option<OwnedFd>,
    filters: Vec<BpfProgram>,
}

/// The directory a tool may write below: a path, or the root of the
/// call's tmpfs (a rule on the directory it covers would not reach inside).
pub(crate) enum WritableRoot<'a> {
    Path(&'a Path),
    Mount(BorrowedFd<'a>),
}

pub(crate) fn prepare(
    policy: &Policy,
    support: &Support,
    scratch: WritableRoot<'_>,
    may_spawn: bool,
    network: bool,
) -> Result<Prepared, SandboxError> {
    let landlock = if support.filesystem() {
        landlock_ruleset(policy, scratch, network)?
    } else {
        None
    };
    let filters = if support.seccomp {
        vec![extra_filter(), syscall_filter(may_spawn, network)?]
    } else {
        Vec::new()
    };
    Ok(Prepared { landlock, filters })
}

fn landlock_err(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Landlock(e.to_string())
}

fn landlock_ruleset(
    policy: &Policy,
    scratch: WritableRoot<'_>,
    network: bool,
) -> Result<Option<OwnedFd>, SandboxError> {
    let abi = WANTED_ABI;
    let read_dir: BitFlags<AccessFs> = AccessFs::from_read(abi);
    let read_file: BitFlags<AccessFs> = read_dir & AccessFs::from_file(abi);
    let write_file: BitFlags<AccessFs> = AccessFs::from_file(abi) & !AccessFs::Execute;
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(landlock_err)?;
    // Network access left unhandled is network access allowed.
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(landlock_err)?;
    }
    let mut created = ruleset
        .scope(Scope::from_all(abi))
        .and_then(|r| r.create())
        .map_err(landlock_err)?;
    let read_paths = SYSTEM_READ_PATHS
        .iter()
        .map(Path::new)
        .chain(policy.extra_read_paths.iter().map(|p| p.as_path()));
    for path in read_paths {
        // Missing paths (no /lib64 on aarch64, no man cache) are skipped.
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        let access = if meta.is_dir() { read_dir } else { read_file };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(landlock_err)?;
    }
    for path in SYSTEM_WRITE_PATHS {
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        created = created
            .add_rule(PathBeneath::new(fd, read_file | write_file))
            .map_err(landlock_err)?;
    }
    created = match scratch {
        WritableRoot::Path(path) => {
            let fd = PathFd::new(path).map_err(landlock_err)?;
            created.add_rule(PathBeneath::new(fd, AccessFs::from_all(abi)))
        }
        WritableRoot::Mount(fd) => created.add_rule(PathBeneath::new(fd, AccessFs::from_all(abi))),
    }
    .map_err(landlock_err)?;
    Ok(created.into())
}

fn seccomp_err(e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Seccomp(e.to_string())
}

/// System calls a text tool never needs; refused with EPERM. `socket`
/// too, unless `network`.
fn refused_syscalls(network: bool) -> Vec<libc::c_long> {
    let mut list = vec![
        // Other processes' memory and state.
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_kcmp,
        libc::SYS_pidfd_getfd,
        // Mounts and namespaces.
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        // Keyrings.
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        // The kernel itself.
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_acct,
        libc::SYS_quotactl,
        libc::SYS_syslog,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
        libc::SYS_vhangup,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
        libc::SYS_fanotify_init,
        // io_uring runs operations (network included) past seccomp.
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        // Leaving the process group the deadline kill signals.
        libc::SYS_setsid,
        libc::SYS_setpgid,
    ];
    #[cfg(target_arch = "x86_64")]
    list.extend([libc::SYS_iopl, libc::SYS_ioperm, libc::SYS_modify_ldt]);
    if !network {
        // No network of any kind.
        list.push(libc::SYS_socket);
    }
    list
}

fn syscall_filter(may_spawn: bool, network: bool) -> Result<BpfProgram, SandboxError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = refused_syscalls(network)
        .into_iter()
        .map(|nr| (nr, Vec::new()))
        .collect();
    let flag_set = |flag: u64| -> Result<SeccompRule, SandboxError> {
        SeccompRule::new(vec![SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(seccomp_err)?])
        .map_err(seccomp_err)
    };
    // clone's first argument is its flags on x86_64 and aarch64 alike.
    let mut clone_rules = CLONE_NAMESPACE_FLAGS
        .iter()
        .map(|&f| flag_set(f))
        .collect::<Result<Vec<_>, _>>()?;
    if !may_spawn {
        // A clone without CLONE_THREAD is a new process.
        clone_rules.push(
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(libc::CLONE_THREAD as u64),
                0,
            )
            .map_err(seccomp_err)?])
            .map_err(seccomp_err)?,
        );
        #[cfg(target_arch = "x86_64")]
        {
            rules.insert(libc::SYS_fork, Vec::new());
            rules.insert(libc::SYS_vfork, Vec::new());
        }
    }
    rules.insert(libc::SYS_clone, clone_rules);
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(seccomp_err)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(seccomp_err)?;
    BpfProgram::try_from(filter).map_err(seccomp_err)
}

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
#[cfg(target_arch = "x86_64")]
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
/// Offsets in `struct seccomp_data`.
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH_NATIVE: u32 = 62 | 0x8000_0000 | 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH_NATIVE: u32 = 183 | 0x8000_0000 | 0x4000_0000;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const AUDIT_ARCH_NATIVE: u32 = 0;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// `clone3` answers ENOSYS so that libc falls back to `clone`, whose flags
/// the main filter can inspect (clone3 passes them behind a pointer). On
/// x86_64, x32 system call numbers (bit 30 set) are refused: they would
/// otherwise miss every rule keyed on the native numbers. A foreign
/// architecture is refused too.
fn extra_filter() -> BpfProgram {
    let errno = |e: i32| SECCOMP_RET_ERRNO | (e as u32 & 0xffff);
    let mut program = vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump(BPF_JEQ_K, AUDIT_ARCH_NATIVE, 1, 0),
        stmt(BPF_RET_K, errno(libc::EPERM)),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    program.extend([
        jump(BPF_JGE_K, 0x4000_0000, 0, 1),
        stmt(BPF_RET_K, errno(libc::EPERM)),
    ]);
    program.extend([
        jump(BPF_JEQ_K, libc::SYS_clone3 as u32, 0, 1),
        stmt(BPF_RET_K, errno(libc::ENOSYS)),
        stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
    ]);
    program
}

impl Prepared {
    pub(crate) fn enter(&self) -> std::io::Result<()> {
        // SAFETY (all blocks below): plain system calls on values prepared
        // before fork; nothing allocates or takes a lock.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if let Some(fd) = &self.landlock {
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    fd.as_raw_fd(),
                    0 as libc::c_uint,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        for filter in &self.filters {
            let program = libc::sock_fprog {
                len: filter.len() as libc::c_ushort,
                // seccompiler's `sock_filter` is `#[repr(C)]` with the
                // kernel's field layout, as libc's is.
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_seccomp,
                    SECCOMP_SET_MODE_FILTER,
                    0 as libc::c_uint,
                    &program as *const libc::sock_fprog,
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}
