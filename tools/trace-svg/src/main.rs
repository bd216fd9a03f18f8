//! Command-line front end of `trace-svg`: reads an engine-tasks Chrome trace and writes an
//! SVG timeline of its last frames next to it (or where `-o` says).

use std::error::Error;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use trace_svg::{render, Options};

/// Turns an engine-tasks Chrome trace into an SVG timeline of the last frames.
#[derive(Debug, Parser)]
#[command(name = "trace-svg", version)]
struct Cli {
    /// Chrome trace-event JSON file written by engine-tasks.
    #[arg(value_name = "INPUT.json")]
    input: PathBuf,

    /// Where to write the SVG [default: the input path with extension .svg].
    #[arg(short, long, value_name = "OUTPUT.svg")]
    output: Option<PathBuf>,

    /// Number of most recent frames to draw (0 draws all of them).
    #[arg(long, value_name = "N", default_value_t = Options::default().frames)]
    frames: usize,

    /// Width of the SVG in pixels.
    #[arg(long, value_name = "PX", default_value_t = Options::default().width)]
    width: u32,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("trace-svg: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Renders the input and writes the SVG; returns the summary line to print.
fn run(cli: &Cli) -> Result<String, Box<dyn Error>> {
    let input = &cli.input;
    let output = cli
        .output
        .clone()
        .unwrap_or_else(|| input.with_extension("svg"));
    if output == *input {
        return Err(format!("the output {} would overwrite the input", output.display()).into());
    }
    let json = fs::read_to_string(input)
        .map_err(|err| format!("cannot read {}: {err}", input.display()))?;
    let options = Options {
        frames: cli.frames,
        width: cli.width,
    };
    let (svg, summary) = render(&json, &options)?;
    fs::write(&output, svg).map_err(|err| format!("cannot write {}: {err}", output.display()))?;
    Ok(format!(
        "{}: {} frames drawn, {} task bars, {} threads",
        output.display(),
        summary.frames,
        summary.task_bars,
        summary.threads
    ))
}
