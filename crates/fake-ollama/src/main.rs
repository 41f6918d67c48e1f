//! `fake-ollama --script FILE --port N`: serves a scripted fake Ollama and
//! prints the bound address (`127.0.0.1:PORT`) on stdout once listening.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fake_ollama::{FakeOllama, Script};

#[derive(Debug, Parser)]
#[command(
    name = "fake-ollama",
    about = "A scripted fake Ollama server for tests"
)]
struct Args {
    /// The script (JSON); an empty script when absent.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: IpAddr,
    /// Accept any Host header (overrides the script's `check_host`).
    #[arg(long)]
    no_host_check: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let mut script = match &args.script {
        None => Script::default(),
        Some(path) => {
            // The operator's own script file, read once at start.
            #[allow(
                clippy::disallowed_methods,
                reason = "a test double reading the script it was given"
            )]
            let parsed = std::fs::read_to_string(path)
                .map_err(|err| err.to_string())
                .and_then(|text| {
                    serde_json::from_str::<Script>(&text).map_err(|err| err.to_string())
                });
            match parsed {
                Ok(script) => script,
                Err(err) => {
                    eprintln!("fake-ollama: cannot load {}: {err}", path.display());
                    return ExitCode::from(2);
                }
            }
        }
    };
    if args.no_host_check {
        script.check_host = false;
    }
    let fake = match FakeOllama::bind(SocketAddr::new(args.host, args.port), script).await {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!(
                "fake-ollama: cannot listen on {}:{}: {err}",
                args.host, args.port
            );
            return ExitCode::from(1);
        }
    };
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "{}", fake.addr())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return ExitCode::from(1);
    }
    // SIGTERM ends the process by default; Ctrl-C ends it cleanly.
    let _ = tokio::signal::ctrl_c().await;
    fake.shutdown().await;
    ExitCode::SUCCESS
}
