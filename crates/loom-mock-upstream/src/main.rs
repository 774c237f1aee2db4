//! `loom-mock-upstream [--listen ADDR]`: serves the mock provider until killed, after printing
//! exactly one line, `listening on http://ADDR`, which scripts wait for.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;

use loom_mock_upstream::Mock;

/// Where to listen when `--listen` is not given: a free port on loopback.
const DEFAULT_LISTEN: &str = "127.0.0.1:0";

const USAGE: &str = "usage: loom-mock-upstream [--listen ADDR]  (default 127.0.0.1:0)";

#[tokio::main]
async fn main() -> ExitCode {
    let addr = match parse_args(std::env::args().skip(1)) {
        Ok(addr) => addr,
        Err(message) => {
            #[expect(
                clippy::print_stderr,
                reason = "a binary reports bad arguments on stderr"
            )]
            {
                eprintln!("loom-mock-upstream: {message}\n{USAGE}");
            }
            return ExitCode::from(2);
        }
    };
    match run(addr).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            #[expect(
                clippy::print_stderr,
                reason = "a binary reports its failure on stderr"
            )]
            {
                eprintln!("loom-mock-upstream: {err}");
            }
            ExitCode::FAILURE
        }
    }
}

/// Reads `--listen ADDR` (or `--listen=ADDR`).
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<SocketAddr, String> {
    let mut listen = DEFAULT_LISTEN.to_owned();
    while let Some(arg) = args.next() {
        if arg == "--listen" {
            listen = args.next().ok_or("--listen needs an address")?;
        } else if let Some(value) = arg.strip_prefix("--listen=") {
            listen = value.to_owned();
        } else if arg == "--help" || arg == "-h" {
            return Err("help requested".to_owned());
        } else {
            return Err(format!("unknown argument `{arg}`"));
        }
    }
    listen
        .parse()
        .map_err(|e| format!("--listen: `{listen}` is not an IP address and port: {e}"))
}

/// Binds, announces the address, and serves until SIGINT or SIGTERM.
async fn run(addr: SocketAddr) -> std::io::Result<()> {
    let handle = Mock::new().serve(addr).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on {}", handle.base_url())?;
    stdout.flush()?;
    drop(stdout);
    shutdown_signal().await?;
    drop(handle);
    Ok(())
}

/// Resolves on SIGINT or (on Unix) SIGTERM.
async fn shutdown_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            result = tokio::signal::ctrl_c() => result,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}
