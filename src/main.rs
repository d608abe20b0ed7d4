//! The `corrflow` command line: arguments in `cli`, what each command does in `commands`.

mod bars;
mod cli;
mod commands;

use cli::Cli;

fn main() {
    // burn-ndarray turns on matrixmultiply's own thread pool. The trainer's kernels already
    // spread their products over rayon's threads, and a second pool on the same cores left them
    // waiting on each other (a paper-config step was no faster with matrixmultiply's 1.5×
    // faster products, 13% of the time in sched_yield). One thread per call unless the user
    // says otherwise; set here, before any thread exists.
    if std::env::var_os("MATMUL_NUM_THREADS").is_none() {
        std::env::set_var("MATMUL_NUM_THREADS", "1");
    }
    corrflow::register_backends();
    let cli = Cli::parse_args();
    // ONNX Runtime logs every arena reservation at info: keep it at warn unless -vv.
    // Progress lines (`progress` target; written where stderr is not a terminal) show at every
    // level, so a batch job's log says how far a long command is.
    let default_level = match cli.verbose {
        0 => "warn,progress=info",
        1 => "info,ort=warn",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        // Colour codes only on a terminal: a batch job's log file gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    bars::install();
    // Fail points exist only in test builds (`--features failpoints`); FAILPOINTS configures them.
    #[cfg(feature = "failpoints")]
    let _fail_points = fail::FailScenario::setup();
    if let Err(e) = commands::run(cli) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
