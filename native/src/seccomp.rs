//! The seccomp filter every sandboxed worker runs under, compiled once to the raw BPF that
//! bubblewrap's `--seccomp FD` installs. Namespaces already take away the network and the host's
//! files; this removes the kernel interfaces a Python function never needs and that widen the
//! kernel's attack surface (tracing, mounting, namespaces, keyrings, BPF, modules, ...).

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

use crate::NativeError;

/// Syscalls refused with EPERM. Allow-by-default: an allow list would break whatever native
/// package a user brings (numpy's BLAS, pyarrow's allocators use a wide set).
const DENIED: &[i64] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_kexec_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_userfaultfd,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_fanotify_init,
    libc::SYS_personality,
    libc::SYS_syslog,
    libc::SYS_quotactl,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_io_uring_setup,
    libc::SYS_fsopen,
    libc::SYS_fsmount,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
];

/// The filter as the bytes of a `struct sock_filter` array (what bwrap reads from its fd).
pub(crate) fn program() -> Result<Vec<u8>, NativeError> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| NativeError::Unavailable(format!("seccomp: {e}")))?;
    let rules = DENIED
        .iter()
        .map(|&s| (s, Vec::new()))
        .collect::<BTreeMap<_, _>>();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| NativeError::Unavailable(format!("seccomp: {e}")))?;
    let program: BpfProgram = filter
        .try_into()
        .map_err(|e| NativeError::Unavailable(format!("seccomp: {e}")))?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for insn in program {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    Ok(bytes)
}
