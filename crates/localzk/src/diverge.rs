//! Offline edits of a stopped server's database, so that it comes back diverged from its
//! quorum: the symptom of ZOOKEEPER-5010 (after a restart a follower keeps ephemeral znodes the
//! quorum no longer has and lacks committed znodes the quorum has), which cannot be caused on
//! purpose otherwise.
//!
//! The edits are made by a small Java program (`java/ZkDiverge.java`, compiled with `javac` on
//! first use) with ZooKeeper's own persistence classes: it loads the server's snapshot and
//! transaction logs, edits the tree and saves a snapshot at the same last processed zxid. On
//! restart the server reports that zxid to its leader, which syncs it with a DIFF of the
//! transactions it missed (if any) instead of a full snapshot, so the edits stay.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{describe, io_err, Install, LocalZkError, ServerSet};

/// The tool's source, compiled where the server set keeps its files.
const TOOL_SOURCE: &str = include_str!("../java/ZkDiverge.java");
const TOOL_CLASS: &str = "ZkDiverge";

/// Edits of a stopped server's database (see [`ServerSet::diverge`]). Deletions are made first.
#[derive(Debug, Clone, Default)]
pub struct Divergence {
    /// Znodes the server loses, each with everything under it: committed znodes it lacks.
    pub delete: Vec<String>,
    /// Ephemeral znodes (path, owner session id) the server gains, empty and world-readable:
    /// ghosts of a session the quorum has closed. The owner must not be 0 (that would be a
    /// persistent znode). A session id the quorum no longer has (or never had) is never
    /// closed again, so the ghost stays until the server is [wiped](ServerSet::wipe); a live
    /// session's closing removes it from the server too. Parents must exist.
    pub ghosts: Vec<(String, i64)>,
}

impl ServerSet {
    /// Rewrites stopped server `i`'s database so that, started again, it lists what its quorum
    /// does not (`edits.ghosts`) and lacks what its quorum has (`edits.delete`), while
    /// following the leader for every later transaction. Deterministic as long as the leader
    /// can sync the server with a DIFF: it can while the transactions committed since the
    /// server stopped are in its in-memory commit log (the last 500) or small next to its
    /// snapshot; otherwise it sends a full snapshot and the edits are gone.
    ///
    /// Only what the server itself serves changes: the leader knows nothing of the ghosts, so
    /// a write that checks one (a `multi` with a `check`) fails with `NoNode`. The server logs
    /// digest mismatches (its tree no longer hashes to the leader's digests) and serves on.
    /// The edits carry the last processed zxid, so a client that reconnects to the server
    /// having seen it gets no event for them on a re-armed child or persistent watch (only on
    /// a watch of an edited path itself): like any change missed while disconnected, they
    /// show in what it reads. The first call compiles the tool (about a second and a half).
    ///
    /// # Errors
    /// [`LocalZkError::NoSuchServer`], [`LocalZkError::AlreadyRunning`] (stop or kill it
    /// first), [`LocalZkError::NoJavac`], and [`LocalZkError::Tool`] with the tool's output if
    /// it cannot be compiled or an edit is impossible (a path to delete is missing, a ghost
    /// exists already or has no parent); the database is then unchanged.
    pub async fn diverge(&mut self, i: usize, edits: &Divergence) -> Result<(), LocalZkError> {
        self.server(i)?;
        if self.is_running(i) {
            return Err(LocalZkError::AlreadyRunning { server: i });
        }
        let install = self.install.clone();
        let cache = self.base.join(".zkdiverge");
        let data_dir = self.servers[i].dir.join("data");
        let log_path = self.servers[i].log_path();
        let mut args: Vec<String> = vec![data_dir.display().to_string()];
        for path in &edits.delete {
            args.extend(["--delete".to_owned(), path.clone()]);
        }
        for (path, owner) in &edits.ghosts {
            args.extend(["--ghost".to_owned(), path.clone(), owner.to_string()]);
        }
        let output = tokio::task::spawn_blocking(move || -> Result<Output, LocalZkError> {
            let classes = compile_tool(&install, &cache)?;
            let mut cmd = Command::new(&install.java);
            cmd.arg("-XX:+UseSerialGC")
                .arg("-XX:TieredStopAtLevel=1")
                .arg("-Dzookeeper.root.logger=INFO,CONSOLE")
                .arg("-cp")
                .arg(format!("{}:{}", classes.display(), install.classpath))
                .arg(TOOL_CLASS)
                .args(&args);
            run(cmd, &format!("{TOOL_CLASS} on {}", data_dir.display()))
        })
        .await
        .map_err(|e| io_err("running ZkDiverge")(std::io::Error::other(e)))??;
        // The server's console log tells whoever reads it why it diverged.
        let mut log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io_err(format!("opening {}", log_path.display())))?;
        log.write_all(&output.stdout)
            .and_then(|()| log.write_all(&output.stderr))
            .map_err(io_err(format!("writing {}", log_path.display())))
    }

    /// Wipes stopped server `i`'s database (its `version-2` directory: snapshots, transaction
    /// logs and epochs), keeping `myid`, so that started again it comes back empty and its
    /// leader syncs it in full: how an operator heals a diverged server.
    ///
    /// # Errors
    /// [`LocalZkError::NoSuchServer`], [`LocalZkError::AlreadyRunning`], [`LocalZkError::Io`].
    pub async fn wipe(&mut self, i: usize) -> Result<(), LocalZkError> {
        self.server(i)?;
        if self.is_running(i) {
            return Err(LocalZkError::AlreadyRunning { server: i });
        }
        let db = self.servers[i].dir.join("data").join("version-2");
        match fs::remove_dir_all(&db) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(io_err(format!("removing {}", db.display()))(e))
            }
            _ => Ok(()),
        }
    }
}

/// Compiles the tool into a directory under `cache` named after a hash of its source and the
/// class path (so a kept base directory never runs a stale tool), unless that is done already.
/// Blocking.
fn compile_tool(install: &Install, cache: &Path) -> Result<PathBuf, LocalZkError> {
    let mut hasher = DefaultHasher::new();
    (TOOL_SOURCE, &install.classpath).hash(&mut hasher);
    let classes = cache.join(format!("{:016x}", hasher.finish()));
    if classes.join(format!("{TOOL_CLASS}.class")).is_file() {
        return Ok(classes);
    }
    let javac = find_javac(&install.java).ok_or_else(|| LocalZkError::NoJavac {
        java: install.java.clone(),
    })?;
    fs::create_dir_all(&classes).map_err(io_err(format!("creating {}", classes.display())))?;
    let source = classes.join(format!("{TOOL_CLASS}.java"));
    fs::write(&source, TOOL_SOURCE).map_err(io_err(format!("writing {}", source.display())))?;
    let mut cmd = Command::new(javac);
    // `-implicit:none`: no class files for the sources some jars on the class path carry.
    cmd.args(["-implicit:none", "-proc:none", "-nowarn", "-cp"])
        .arg(&install.classpath)
        .arg("-d")
        .arg(&classes)
        .arg(&source);
    run(cmd, &format!("compiling {}", source.display()))?;
    Ok(classes)
}

/// `javac` beside `java` (as given, then with links resolved: `/usr/bin/java` is a link into
/// the JDK), or on `PATH`.
fn find_javac(java: &Path) -> Option<PathBuf> {
    let beside = |java: &Path| java.parent().map(|bin| bin.join("javac"));
    beside(java)
        .into_iter()
        .chain(fs::canonicalize(java).ok().as_deref().and_then(beside))
        .chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .map(|dir| dir.join("javac")),
        )
        .find(|javac| javac.is_file())
}

/// Runs `cmd` to completion; [`LocalZkError::Tool`] with its output unless it succeeds.
fn run(mut cmd: Command, what: &str) -> Result<Output, LocalZkError> {
    let output = cmd
        .output()
        .map_err(io_err(format!("{what}: starting {:?}", cmd.get_program())))?;
    if output.status.success() {
        return Ok(output);
    }
    Err(LocalZkError::Tool {
        what: what.to_owned(),
        status: describe(output.status),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    })
}
