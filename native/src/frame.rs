//! The worker protocol's framing: a kind byte, a little-endian u32 length, the payload. Every
//! read and write waits at most until a deadline (poll(2) on non-blocking pipes), so a worker
//! that hangs or stops reading cannot hold a host thread.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// What a frame holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Host to worker: the function to load (JSON).
    Setup,
    /// Host to worker: a batch to compute (Arrow IPC stream: its schema, then the batch).
    Batch,
    /// Host to worker: a batch of the schema the last `Batch` carried (one encapsulated IPC
    /// record batch message, no schema: the worker does not parse it again per batch).
    Message,
    /// Host to worker: a `Message` written into the shared memory file (slot and length,
    /// two little-endian u32; see `shm.rs`).
    SharedMessage,
    /// Worker to host: loaded (JSON: the interpreter's version).
    Ready,
    /// Worker to host: a result (Arrow IPC stream, one column; its schema metadata counts
    /// the rows nulled and their errors).
    Output,
    /// Worker to host: a result without nulled rows, as one IPC record batch message of the
    /// output schema the host set up.
    Values,
    /// Worker to host: a `Values` result in the shared memory file (slot and length).
    SharedValues,
    /// Worker to host: the function raised (JSON: message, row).
    Error,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Setup => b'S',
            Kind::Batch => b'B',
            Kind::Message => b'b',
            Kind::SharedMessage => b'm',
            Kind::Ready => b'R',
            Kind::Output => b'O',
            Kind::Values => b'o',
            Kind::SharedValues => b'v',
            Kind::Error => b'E',
        }
    }

    fn of(b: u8) -> io::Result<Self> {
        Ok(match b {
            b'S' => Kind::Setup,
            b'B' => Kind::Batch,
            b'b' => Kind::Message,
            b'm' => Kind::SharedMessage,
            b'R' => Kind::Ready,
            b'O' => Kind::Output,
            b'o' => Kind::Values,
            b'v' => Kind::SharedValues,
            b'E' => Kind::Error,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown frame kind {b:#x}"),
                ));
            }
        })
    }
}

pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor this process owns; no memory is passed.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks for a 1 MiB pipe buffer (best effort: the kernel may cap it).
pub(crate) fn grow_pipe(fd: BorrowedFd<'_>) {
    // SAFETY: fcntl on a descriptor this process owns; no memory is passed.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, 1 << 20) };
}

/// Waits until `fd` is ready for `events` or the deadline passes (`TimedOut`).
fn wait(fd: BorrowedFd<'_>, events: libc::c_short, deadline: Instant) -> io::Result<()> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n > 0 {
            return Ok(());
        }
    }
}

/// Runs `op` (one read or write) whenever `fd` is ready for `events`, until it reports
/// progress, the deadline passes or it fails; retries what non-blocking I/O asks to retry.
fn io_once(
    fd: BorrowedFd<'_>,
    events: libc::c_short,
    deadline: Instant,
    mut op: impl FnMut() -> isize,
) -> io::Result<usize> {
    loop {
        wait(fd, events, deadline)?;
        let n = op();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ) {
            return Err(e);
        }
    }
}

/// Writes all of `parts`, in order, with as few system calls as the pipe allows: a frame's
/// head and payload go in one `writev`, so the peer wakes once for the whole frame rather than
/// first for five bytes of head.
fn write_all(fd: BorrowedFd<'_>, parts: &[&[u8]], deadline: Instant) -> io::Result<()> {
    let mut parts: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    while !parts.is_empty() {
        let iov: Vec<libc::iovec> = parts
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: p.len(),
            })
            .collect();
        // SAFETY: every iovec points into a live slice of `parts`, read only by the kernel.
        let mut n = io_once(fd, libc::POLLOUT, deadline, || unsafe {
            libc::writev(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int)
        })?;
        while n > 0 {
            if n >= parts[0].len() {
                n -= parts[0].len();
                parts.remove(0);
            } else {
                parts[0] = &parts[0][n..];
                n = 0;
            }
        }
    }
    Ok(())
}

/// Appends exactly `len` bytes to `out`, growing it only as bytes arrive: a length the peer
/// declared is never allocated before it is really sent.
fn read_into(
    fd: BorrowedFd<'_>,
    out: &mut Vec<u8>,
    len: usize,
    deadline: Instant,
) -> io::Result<()> {
    let end = out.len() + len;
    while out.len() < end {
        // At most 1 MiB beyond what has arrived.
        let at = out.len();
        out.resize(end.min(at + (1 << 20)), 0);
        let room = &mut out[at..];
        // SAFETY: reads into a live, writable slice of `room.len()` bytes.
        let n = io_once(fd, libc::POLLIN, deadline, || unsafe {
            libc::read(fd.as_raw_fd(), room.as_mut_ptr().cast(), room.len())
        });
        out.truncate(at + *n.as_ref().unwrap_or(&0));
        if n? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(())
}

/// Sends one frame whose payload is `parts`, in order (a message's header and its body need
/// not be copied together first).
pub(crate) fn send(
    fd: BorrowedFd<'_>,
    kind: Kind,
    parts: &[&[u8]],
    deadline: Instant,
) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let len = u32::try_from(total)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut head = [0u8; 5];
    head[0] = kind.byte();
    head[1..].copy_from_slice(&len.to_le_bytes());
    let mut all = Vec::with_capacity(parts.len() + 1);
    all.push(&head[..]);
    all.extend_from_slice(parts);
    write_all(fd, &all, deadline)
}

/// The next frame, refused (`InvalidData`) if it declares more than `max` bytes: the peer is
/// an untrusted worker. The payload of a [`Kind::Values`] frame comes after `values_prefix`
/// (the output schema, so the whole decodes as one stream without another copy).
pub(crate) fn receive(
    fd: BorrowedFd<'_>,
    max: usize,
    deadline: Instant,
    values_prefix: &[u8],
) -> io::Result<(Kind, Vec<u8>)> {
    let mut head = Vec::with_capacity(5);
    read_into(fd, &mut head, 5, deadline)?;
    let kind = Kind::of(head[0])?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, over the {max} allowed"),
        ));
    }
    let mut payload = Vec::new();
    if kind == Kind::Values {
        payload.reserve(values_prefix.len() + len.min(1 << 20));
        payload.extend_from_slice(values_prefix);
    }
    read_into(fd, &mut payload, len, deadline)?;
    Ok((kind, payload))
}

/// `now + d`, saturating far in the future.
pub(crate) fn deadline(d: Duration) -> Instant {
    Instant::now()
        .checked_add(d)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365))
}
