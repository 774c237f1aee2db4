//! Prints one generated request: `cargo run -p loom-testkit --example generate -- API SEED
//! [--reuse-ids]`, API one of `chat`, `responses`, `messages`. The conformance suite names the
//! API and seed of any request Loom mishandles; this shows it whole.

#![expect(clippy::print_stdout, reason = "an example prints what it made")]

use loom_testkit::generate::{self, Options};
use loom_testkit::OpenApi;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(api), Some(seed)) = (args.first(), args.get(1)) else {
        return Err("usage: generate chat|responses|messages SEED [--reuse-ids]".into());
    };
    let seed: u64 = seed.parse().map_err(|e| format!("SEED: {e}"))?;
    let options = Options {
        reuse_ids: args.iter().any(|a| a == "--reuse-ids"),
    };
    let generated = match api.as_str() {
        "chat" => generate::chat(&OpenApi::load()?, seed, options),
        "responses" => generate::responses(&OpenApi::load()?, seed, options),
        "messages" => generate::messages(&OpenApi::anthropic()?, seed, options),
        other => return Err(format!("no API `{other}`")),
    };
    let text = serde_json::to_string_pretty(&generated.body).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}
