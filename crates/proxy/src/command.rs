//! Runs the kernel tools the backends drive (`nft`, `iptables`, `iptables-restore`,
//! `iptables-save`): a command line, its input on stdin, its output back; a failure
//! keeps the command, the exit status and stderr for the log.

use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// Errors running a tool.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("running {0}: {1}")]
    Spawn(String, std::io::Error),
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        code: Option<i32>,
        stderr: String,
    },
}

impl CommandError {
    /// The binary is not installed.
    pub fn is_not_installed(&self) -> bool {
        matches!(self, CommandError::Spawn(_, e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// Runs `argv` (the program, then its arguments), with `stdin` if given; returns
/// stdout. The child is killed if the future is dropped.
pub async fn run(argv: &[&str], stdin: Option<&str>) -> Result<String, CommandError> {
    let describe = || argv.join(" ");
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .kill_on_drop(true)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| CommandError::Spawn(describe(), e))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|e| CommandError::Spawn(describe(), e))?;
        drop(pipe);
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| CommandError::Spawn(describe(), e))?;
    if !out.status.success() {
        return Err(CommandError::Failed {
            command: describe(),
            status: out.status.to_string(),
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
