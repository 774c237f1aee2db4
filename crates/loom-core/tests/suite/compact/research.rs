//! Seed 003's "Real-World Example": a 20-step research task whose full history costs about 8,000
//! tokens and whose compacted history must cost at most 1,200. Tokens are counted exactly with
//! `loom-tokens` (o200k_base).

use loom_core::{build_react_prompt, compact, CompactionConfig, Preset, ReactPrompt};
use loom_tokens::Encoding;

use super::research_fixture::{react, reduced};

#[test]
fn twenty_step_research_fits_in_1200_tokens() {
    let r = reduced();
    assert_eq!(r.steps.len(), 20);
    let steps = react(&r);
    let count = |s: &str| Encoding::O200kBase.count(s);
    // Only the history: the fixed parts of the prompt are left empty.
    let prompt = ReactPrompt::default();
    let full = build_react_prompt(&prompt, &steps, None);
    let full_tokens = count(&full);
    assert!(
        (7_500..=9_000).contains(&full_tokens),
        "the fixture should cost about 8,000 tokens uncompacted, got {full_tokens}"
    );

    // The seed's build_react_prompt configuration is the long-research preset.
    let config = CompactionConfig::preset(Preset::LongResearch);
    let react_prompt = build_react_prompt(&prompt, &steps, Some(&config));
    let react_tokens = count(&react_prompt);
    assert!(
        react_tokens <= 1_200,
        "compacted ReAct history costs {react_tokens} tokens:\n{react_prompt}"
    );
    let listing = compact(&r.steps, &config, None).format_for_prompt();
    let listing_tokens = count(&listing);
    assert!(listing_tokens <= 1_200, "{listing_tokens}:\n{listing}");
    // The seed claims an 85% reduction for this example.
    assert!(
        react_tokens * 100 <= full_tokens * 15,
        "{react_tokens} of {full_tokens}"
    );
    insta::assert_snapshot!("research_react", react_prompt);
    insta::assert_snapshot!("research_listing", listing);
}
