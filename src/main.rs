//! The `corrflow` command line: arguments in `cli`, what each command does in `commands`.

use clap::Parser;

mod cli;
mod commands;

use cli::Cli;

fn main() {
    let cli = Cli::parse();
    // ONNX Runtime logs every arena reservation at info: keep it at warn unless -vv.
    let default_level = match cli.verbose {
        0 => "warn",
        1 => "info,ort=warn",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .init();
    // Fail points exist only in test builds (`--features failpoints`); FAILPOINTS configures them.
    #[cfg(feature = "failpoints")]
    let _fail_points = fail::FailScenario::setup();
    if let Err(e) = commands::run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
