//! How a worker process is started: the bubblewrap command line, rlimits and the uid it drops
//! to, and the seccomp filter handed to bwrap on a pipe.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{Interpreter, NativeError, seccomp};

/// The worker script, written into the sandbox read-only at `/lancet/worker.py`.
const WORKER_PY: &str = include_str!("worker.py");

/// Per-worker limits. Memory, CPU time, processes and file size are rlimits of every process
/// in the sandbox (a worker that passes one is killed by the kernel or gets its error); the
/// timeouts are enforced by the host, which kills the whole sandbox.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Address space of each process (RLIMIT_AS), bytes.
    pub memory_bytes: u64,
    /// CPU time of each process over its whole life (RLIMIT_CPU), seconds: a warm worker is
    /// retired by the pool before it can reach it.
    pub cpu_seconds: u64,
    /// Processes and threads (RLIMIT_NPROC) of the worker's own uid: stops a fork bomb. Only
    /// when the server runs as root (it can then give each worker a uid of its own).
    pub processes: u64,
    /// Largest file a process may write (RLIMIT_FSIZE), bytes.
    pub file_bytes: u64,
    /// Size of the private `/tmp`, bytes.
    pub tmp_bytes: u64,
    /// Largest result one batch may return (its Arrow IPC bytes, and what decoding them
    /// may allocate).
    pub max_output_bytes: usize,
    /// Bytes of each of the four slots of the memory file a worker shares with the host:
    /// batches and results that fit travel through it rather than the pipes, several times
    /// cheaper per byte (see the crate's `shm.rs`). 0: pipes only.
    pub shared_slot_bytes: usize,
    /// Wall clock for one batch.
    pub call_timeout: Duration,
    /// Wall clock for starting a worker and loading its function (imports included).
    pub start_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 2 << 30,
            cpu_seconds: 3600,
            processes: 64,
            file_bytes: 256 << 20,
            tmp_bytes: 256 << 20,
            max_output_bytes: 256 << 20,
            // A 16,384-row batch of a few numeric columns or short strings.
            shared_slot_bytes: 2 << 20,
            call_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(60),
        }
    }
}

/// Starts sandboxed workers: one interpreter, one set of limits.
#[derive(Debug)]
pub struct Sandbox {
    bwrap: PathBuf,
    interpreter: Interpreter,
    limits: Limits,
    seccomp: Vec<u8>,
    /// Holds worker.py; readable by the sandbox's uid.
    scripts: tempfile::TempDir,
    /// Whether the server is root: each worker then runs as a uid of its own (bubblewrap
    /// unprivileged), so the kernel counts RLIMIT_NPROC per worker and a worker owns nothing
    /// on the host.
    as_root: bool,
    next_uid: std::sync::atomic::AtomicU32,
    /// Starts every worker: see [`Sandbox::spawn`].
    spawner: std::sync::Mutex<std::sync::mpsc::Sender<Spawn>>,
}

/// A command to start, and where its child goes.
type Spawn = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);

/// Workers' uids when the server is root: `UID_BASE + n % UID_SPAN`, owning no host file.
const UID_BASE: u32 = 0x4c_0000;
const UID_SPAN: u32 = 1 << 16;

impl Sandbox {
    /// A sandbox running `interpreter` through the `bwrap` binary. Fails when bwrap is missing
    /// or cannot make namespaces here (checked by starting `true` in one).
    pub fn new(
        bwrap: &Path,
        interpreter: Interpreter,
        limits: Limits,
    ) -> Result<Self, NativeError> {
        let scripts = tempfile::Builder::new()
            .prefix("lancet-native-")
            .tempdir()
            .map_err(|e| NativeError::Unavailable(format!("a directory for the worker: {e}")))?;
        let script = scripts.path().join("worker.py");
        std::fs::write(&script, WORKER_PY)?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644))?;
        std::fs::set_permissions(scripts.path(), std::fs::Permissions::from_mode(0o755))?;
        // SAFETY: geteuid has no preconditions.
        let as_root = unsafe { libc::geteuid() } == 0;
        let sandbox = Sandbox {
            bwrap: bwrap.to_path_buf(),
            interpreter,
            limits,
            seccomp: seccomp::program()?,
            scripts,
            as_root,
            next_uid: Default::default(),
            spawner: std::sync::Mutex::new(spawner()?),
        };
        sandbox.check()?;
        Ok(sandbox)
    }

    /// The interpreter workers run.
    pub fn interpreter(&self) -> &Interpreter {
        &self.interpreter
    }

    /// The limits workers run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Starts `cmd` from the sandbox's own long-lived thread. bwrap's `--die-with-parent`
    /// uses PR_SET_PDEATHSIG, which fires when the *thread* that forked it ends: a warm worker
    /// started from a short-lived thread (a blocking-pool thread, a job's thread) would be
    /// killed when that thread goes.
    pub(crate) fn spawn(&self, cmd: Command) -> std::io::Result<Child> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.spawner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send((cmd, tx))
            .map_err(|_| std::io::Error::other("the sandbox's spawner thread is gone"))?;
        rx.recv()
            .map_err(|_| std::io::Error::other("the sandbox's spawner thread is gone"))?
    }

    fn check(&self) -> Result<(), NativeError> {
        let (mut cmd, _seccomp) = self.command(&[], &["-S", "-E", "-s", "-c", "pass"], &[])?;
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|e| NativeError::Unavailable(format!("{}: {e}", self.bwrap.display())))?;
        if !out.status.success() {
            return Err(NativeError::Unavailable(format!(
                "bubblewrap could not start {} in a sandbox ({}): {}",
                self.interpreter.executable.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// The bwrap command for one worker: `env_dirs` are bound read-only at `/env/0`, `/env/1`,
    /// ...; `args` follow the interpreter; the worker inherits descriptors `keep` (under the
    /// same numbers; every other descriptor of this process is close-on-exec). The descriptor
    /// returned is the seccomp filter's pipe: keep it until the command is spawned.
    pub(crate) fn command(
        &self,
        env_dirs: &[PathBuf],
        args: &[&str],
        keep: &[std::os::fd::RawFd],
    ) -> Result<(Command, OwnedFd), NativeError> {
        let (read, write) = pipe()?;
        {
            // The filter is under 1 KiB: it fits in the pipe's buffer, so this never blocks.
            let mut w = std::fs::File::from(write);
            std::io::Write::write_all(&mut w, &self.seccomp)?;
        }
        let mut a: Vec<OsString> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(OsString::from));
        push(&[
            "--unshare-user",
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--cap-drop",
            "ALL",
            "--hostname",
            "sandbox",
            "--ro-bind",
            "/usr",
            "/usr",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--ro-bind-try",
            "/etc/ld.so.cache",
            "/etc/ld.so.cache",
        ]);
        for top in ["lib", "lib64", "bin", "sbin", "lib32", "libx32"] {
            let host = Path::new("/").join(top);
            match std::fs::read_link(&host) {
                Ok(target) => a.extend([
                    "--symlink".into(),
                    target.into_os_string(),
                    host.into_os_string(),
                ]),
                Err(_) if host.is_dir() => a.extend([
                    "--ro-bind".into(),
                    host.clone().into_os_string(),
                    host.into_os_string(),
                ]),
                Err(_) => {}
            }
        }
        let prefix = &self.interpreter.prefix;
        if !prefix.starts_with("/usr") {
            a.extend([
                "--ro-bind".into(),
                prefix.clone().into(),
                prefix.clone().into(),
            ]);
        }
        a.extend([
            "--ro-bind".into(),
            self.scripts.path().into(),
            "/lancet".into(),
        ]);
        for (i, d) in env_dirs.iter().enumerate() {
            a.extend([
                "--ro-bind".into(),
                d.clone().into(),
                format!("/env/{i}").into(),
            ]);
        }
        let tmp = self.limits.tmp_bytes.to_string();
        let fd = read.as_raw_fd().to_string();
        a.extend(
            [
                "--size",
                &tmp,
                "--tmpfs",
                "/tmp",
                "--remount-ro",
                "/",
                "--chdir",
                "/tmp",
                "--setenv",
                "HOME",
                "/tmp",
                "--setenv",
                "TMPDIR",
                "/tmp",
                "--setenv",
                "PYTHONDONTWRITEBYTECODE",
                "1",
                "--setenv",
                "OMP_NUM_THREADS",
                "1",
                "--setenv",
                "OPENBLAS_NUM_THREADS",
                "1",
                "--setenv",
                "LANG",
                "C.UTF-8",
                "--seccomp",
                &fd,
            ]
            .map(OsString::from),
        );
        a.push(self.interpreter.executable.clone().into());
        a.extend(args.iter().map(OsString::from));
        let mut cmd = Command::new(&self.bwrap);
        cmd.args(a).env_clear();
        let limits = self.limits.clone();
        let run_as = self.as_root.then(|| {
            let n = self
                .next_uid
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            UID_BASE + n % UID_SPAN
        });
        let mut inherited = keep.to_vec();
        inherited.push(read.as_raw_fd());
        // SAFETY: the closure runs in the forked child before exec and only makes
        // async-signal-safe system calls (fcntl, setrlimit, setgroups, setgid, setuid).
        unsafe {
            cmd.pre_exec(move || {
                for &fd in &inherited {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                rlimit(libc::RLIMIT_AS, limits.memory_bytes)?;
                rlimit_soft(libc::RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5)?;
                if run_as.is_some() {
                    // Counted per uid: only meaningful when the worker has a uid of its own.
                    rlimit(libc::RLIMIT_NPROC, limits.processes)?;
                }
                rlimit(libc::RLIMIT_FSIZE, limits.file_bytes)?;
                rlimit(libc::RLIMIT_CORE, 0)?;
                rlimit(libc::RLIMIT_NOFILE, 256)?;
                if let Some(uid) = run_as {
                    let gid = uid;
                    if libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        Ok((cmd, read))
    }
}

/// The thread that forks every worker; it ends when its sandbox is dropped.
fn spawner() -> Result<std::sync::mpsc::Sender<Spawn>, NativeError> {
    let (tx, rx) = std::sync::mpsc::channel::<Spawn>();
    std::thread::Builder::new()
        .name("lancet-native-spawner".into())
        .spawn(move || {
            for (mut cmd, answer) in rx {
                let _ = answer.send(cmd.spawn());
            }
        })?;
    Ok(tx)
}

fn pipe() -> Result<(OwnedFd, OwnedFd), NativeError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors that this process then owns.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn rlimit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    rlimit_soft(resource, value, value)
}

fn rlimit_soft(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> std::io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one valid struct.
    if unsafe { libc::setrlimit(resource, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
