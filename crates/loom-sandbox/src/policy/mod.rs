//! The exec policy (Level 2 of the action space): which shell command lines run unasked, which
//! ask for approval and which never run.
//!
//! A line is split into simple commands (`split`); each is judged by every rule whose token
//! prefix it starts with, and the strictest verdict wins (forbid > prompt > allow), across rules
//! and across the line's commands. A command no rule matches, or a line the splitter cannot judge,
//! is `prompt`: nothing is allowed by default. Rules come from TOML (see `README.md`) on top of
//! the built-in read-only list (`builtin`), and each rule's examples are checked when it loads.

mod builtin;
mod rule;
mod split;

use serde::Deserialize;

use crate::error::{Error, Result};
use rule::{Matched, Rule, TokenPattern};

/// How a command line may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Runs without asking.
    Allow,
    /// Runs only after approval.
    Prompt,
    /// Never runs.
    Forbid,
}

/// The verdict on a command line, with the rule that decided it and why, so an approval prompt
/// or a refusal can tell the user (and the model) what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// The deciding rule: a TOML rule's name, `builtin:<program>`, `shell-syntax` for a line the
    /// splitter cannot judge, or `default` for a command no rule matches.
    pub rule: String,
    /// Why, naming the command (and the flag or construct) concerned.
    pub reason: String,
}

/// An exec policy: rules loaded from TOML over the built-in read-only list. Cheap to clone and to
/// share; [`ExecPolicy::check`] is pure.
#[derive(Debug, Clone)]
pub struct ExecPolicy {
    rules: Vec<Rule>,
}

impl Default for ExecPolicy {
    /// The built-in rules only: common read-only commands allowed, with their writing flags
    /// vetoed; everything else prompts.
    fn default() -> Self {
        Self {
            rules: builtin::rules(),
        }
    }
}

/// The TOML file, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    /// Keep the built-in read-only rules (default true).
    defaults: Option<bool>,
    #[serde(default)]
    rule: Vec<RawRule>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    prefix: Vec<RawToken>,
    decision: Verdict,
    #[serde(default)]
    veto: Vec<String>,
    reason: Option<String>,
    #[serde(default, rename = "match")]
    matches: Vec<String>,
    #[serde(default)]
    not_match: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawToken {
    One(String),
    AnyOf(Vec<String>),
}

impl ExecPolicy {
    /// Loads a policy from TOML. A malformed file, a rule without a usable prefix, or an example
    /// that the rule does not match (under `match`) or does match (under `not_match`) is an error
    /// naming the rule and the example.
    pub fn from_toml(text: &str) -> Result<Self> {
        let raw: RawPolicy = toml::from_str(text).map_err(|err| Error::PolicyParse {
            reason: err.to_string(),
        })?;
        let mut rules = if raw.defaults.unwrap_or(true) {
            builtin::rules()
        } else {
            Vec::new()
        };
        for (i, raw_rule) in raw.rule.into_iter().enumerate() {
            let name = raw_rule.name.unwrap_or_else(|| format!("rule[{i}]"));
            if rules.iter().any(|r| r.name == name) {
                return Err(Error::PolicyRule {
                    rule: name,
                    reason: "the name is used by another rule".into(),
                });
            }
            let prefix = raw_rule
                .prefix
                .into_iter()
                .enumerate()
                .map(|(t, token)| match token {
                    RawToken::One(word) if !word.is_empty() => Ok(TokenPattern::One(word)),
                    RawToken::AnyOf(words)
                        if !words.is_empty() && words.iter().all(|w| !w.is_empty()) =>
                    {
                        Ok(TokenPattern::AnyOf(words))
                    }
                    _ => Err(Error::PolicyRule {
                        rule: name.clone(),
                        reason: format!("`prefix[{t}]` is empty; give a word or a list of words"),
                    }),
                })
                .collect::<Result<Vec<_>>>()?;
            if prefix.is_empty() {
                return Err(Error::PolicyRule {
                    rule: name,
                    reason: "`prefix` is empty; give at least the program's name".into(),
                });
            }
            let rule = Rule {
                name,
                verdict: raw_rule.decision,
                prefix,
                veto: raw_rule.veto,
                check: rule::Check::None,
                reason: raw_rule.reason,
            };
            rule.check_examples(&raw_rule.matches, &raw_rule.not_match)?;
            rules.push(rule);
        }
        Ok(Self { rules })
    }

    /// Judges a command line. Pure and total: any input gets a decision, never an error.
    pub fn check(&self, command: &str) -> Decision {
        let split = split::split(command);
        let mut decision: Option<Decision> = None;
        let mut consider = |candidate: Decision| {
            if decision
                .as_ref()
                .is_none_or(|current| candidate.verdict > current.verdict)
            {
                decision = Some(candidate);
            }
        };
        if let Some(concern) = split.concerns.first() {
            consider(Decision {
                verdict: Verdict::Prompt,
                rule: "shell-syntax".into(),
                reason: format!("the line has {concern}, which the policy cannot judge safely"),
            });
        }
        if split.commands.is_empty() && split.concerns.is_empty() {
            consider(Decision {
                verdict: Verdict::Prompt,
                rule: "default".into(),
                reason: "the line has no command".into(),
            });
        }
        for words in &split.commands {
            consider(self.judge(words));
        }
        decision.unwrap_or_else(|| Decision {
            verdict: Verdict::Prompt,
            rule: "default".into(),
            reason: "the line has no command".into(),
        })
    }

    /// The strictest verdict of the rules matching one simple command.
    fn judge(&self, words: &[split::Word]) -> Decision {
        let shown = words
            .iter()
            .map(|w| w.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let mut best: Option<Decision> = None;
        let mut vetoed: Option<Decision> = None;
        for rule in &self.rules {
            match rule.matches(words) {
                Matched::No => {}
                Matched::Vetoed(why) => {
                    vetoed.get_or_insert_with(|| Decision {
                        verdict: Verdict::Prompt,
                        rule: rule.name.clone(),
                        reason: format!("`{shown}`: {why}"),
                    });
                }
                Matched::Yes => {
                    if best.as_ref().is_none_or(|b| rule.verdict > b.verdict) {
                        best = Some(Decision {
                            verdict: rule.verdict,
                            rule: rule.name.clone(),
                            reason: rule.reason.clone().map_or_else(
                                || format!("`{shown}` matches rule `{}`", rule.name),
                                |reason| format!("`{shown}`: {reason}"),
                            ),
                        });
                    }
                }
            }
        }
        // A veto outranks an allow (the command is not the harmless form the rule allows), but
        // not a prompt or forbid rule that matched outright.
        match (best, vetoed) {
            (Some(best), Some(veto)) if best.verdict == Verdict::Allow => veto,
            (Some(best), _) => best,
            (None, Some(veto)) => veto,
            (None, None) => Decision {
                verdict: Verdict::Prompt,
                rule: "default".into(),
                reason: format!(
                    "`{shown}`: no rule allows `{}`",
                    words.first().map_or("", |w| w.text.as_str())
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests;
