//! How flag values are read: negative numbers as values, thread counts and other counts within
//! their documented bounds (docs/configuration.md, "Bounds of numeric flags").

/// `cmd` and all its subcommands with negative numbers accepted as option values.
pub(crate) fn negative_values(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let takes_values = matches!(a.get_action(), clap::ArgAction::Set | clap::ArgAction::Append);
        if takes_values {
            a.allow_negative_numbers(true)
        } else {
            a
        }
    })
    .mut_subcommands(negative_values)
}

/// The most threads a `--threads` or `-w` flag accepts: 16 per core.
pub(crate) fn max_threads() -> usize {
    16 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A thread count: at most [`max_threads`] (0 = one per core where the flag says so).
pub(crate) fn parse_threads(s: &str) -> std::result::Result<usize, String> {
    let n: usize = s.trim().parse().map_err(|e| format!("not a thread count: {e}"))?;
    let max = max_threads();
    if n > max {
        return Err(format!("at most {max} (16 per core; this machine has {} cores)", max / 16));
    }
    Ok(n)
}

/// A count in `MIN..=MAX`: the error names the range (clap adds the flag and the value).
pub(crate) fn bounded<const MIN: usize, const MAX: usize>(s: &str) -> std::result::Result<usize, String> {
    let n: usize = s.trim().parse().map_err(|e| format!("not a whole number in {MIN}..={MAX}: {e}"))?;
    if !(MIN..=MAX).contains(&n) {
        return Err(format!("must be in {MIN}..={MAX}"));
    }
    Ok(n)
}
