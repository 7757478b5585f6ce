//! The data plane: batches and results up to a slot's size travel through a memory file
//! (memfd) shared with the worker instead of the protocol pipe, which only says where they
//! are. Through a pipe, 128 KiB cost ~30 us each way on this kind of machine (the kernel
//! allocates and frees pipe pages per write); written into and read out of a shared file,
//! a few microseconds: for a cheap function the pipe was most of a call's cost.
//!
//! [`WAYS`] slots carry batches to the worker, as many results back. The host writes
//! with `pwrite` and reads with `pread` (no mapping in this process: the worker may change
//! the file at any moment, so the host copies a result out before it checks and decodes
//! it); the worker maps the file. A slot is reused only once its previous content has been
//! consumed: one call at a time, or at most [`WAYS`] in flight ([`crate::Pipeline`]), the
//! next batch written after the answer [`WAYS`] batches back was read.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, RawFd};
use std::os::unix::fs::FileExt;
use std::time::Instant;

use crate::frame::{self, Kind};

/// Slots each way, and the most batches a pipeline has in flight: enough that the host's
/// side of a batch (read the answer, wake the writer, encode, write) never makes a cheap
/// function's worker wait.
pub(crate) const WAYS: usize = 4;

/// The shared file of one worker.
pub(crate) struct Shared {
    file: File,
    /// Bytes of one slot ([`crate::Limits::shared_slot_bytes`]).
    slot: usize,
}

impl Shared {
    /// A new memory file of `2 * WAYS` slots of `slot` bytes (pages are allocated only as
    /// slots are written), sealed at that size: the worker holds a writable descriptor, and
    /// must not grow the file (memory the host would keep until the worker ends) nor shrink
    /// it under the host's reads.
    pub(crate) fn new(slot: usize) -> io::Result<Shared> {
        // SAFETY: the name is a NUL-terminated literal; close-on-exec, so only the worker this
        // is made for inherits it (`Sandbox::command`'s `keep`).
        let fd = unsafe {
            libc::memfd_create(
                c"lancet-native".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just created and owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len((2 * WAYS * slot) as u64)?;
        let seals = libc::F_SEAL_GROW | libc::F_SEAL_SHRINK | libc::F_SEAL_SEAL;
        // SAFETY: fcntl on a descriptor this process owns; no memory is passed.
        if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Shared { file, slot })
    }

    /// Bytes of one slot.
    pub(crate) fn slot(&self) -> usize {
        self.slot
    }

    /// The descriptor the worker inherits.
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Reads the result a [`Kind::SharedValues`] frame names (`slot`, length: two
    /// little-endian u32), appended to `out`; refused (`InvalidData`) unless it names a
    /// result slot and fits it and `max`.
    pub(crate) fn take(&self, frame: &[u8], out: &mut Vec<u8>, max: usize) -> io::Result<()> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let [s0, s1, s2, s3, l0, l1, l2, l3] = frame else {
            return Err(bad(format!(
                "a shared-memory frame of {} bytes",
                frame.len()
            )));
        };
        let slot = u32::from_le_bytes([*s0, *s1, *s2, *s3]) as usize;
        let len = u32::from_le_bytes([*l0, *l1, *l2, *l3]) as usize;
        if !(WAYS..2 * WAYS).contains(&slot) || len > self.slot || len > max {
            return Err(bad(format!("shared slot {slot} with {len} bytes")));
        }
        let at = out.len();
        out.resize(at + len, 0);
        self.file
            .read_exact_at(&mut out[at..], (slot * self.slot) as u64)
    }
}

/// Sends a batch frame: a bare message that fits a slot goes through `shared` (input slot
/// `slot % WAYS`) and a [`Kind::SharedMessage`] saying where; anything else, and everything
/// without `shared`, through the pipe.
pub(crate) fn send(
    fd: BorrowedFd<'_>,
    shared: Option<&Shared>,
    slot: u32,
    kind: Kind,
    parts: &[&[u8]],
    deadline: Instant,
) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let Some(shared) = shared.filter(|s| kind == Kind::Message && len <= s.slot) else {
        return frame::send(fd, kind, parts, deadline);
    };
    let slot = slot % WAYS as u32;
    let mut at = (slot as usize * shared.slot) as u64;
    for p in parts {
        shared.file.write_all_at(p, at)?;
        at += p.len() as u64;
    }
    let mut payload = [0u8; 8];
    payload[..4].copy_from_slice(&slot.to_le_bytes());
    payload[4..].copy_from_slice(&(len as u32).to_le_bytes());
    frame::send(fd, Kind::SharedMessage, &[&payload], deadline)
}
