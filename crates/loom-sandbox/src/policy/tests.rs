//! The exec policy judged on many command lines, both ways, and its load errors.

use super::*;

fn verdict(policy: &ExecPolicy, line: &str) -> Verdict {
    policy.check(line).verdict
}

#[test]
fn read_only_commands_are_allowed() {
    let policy = ExecPolicy::default();
    for line in [
        "ls",
        "ls -la src",
        "cat Cargo.toml",
        "head -n 20 src/lib.rs",
        "tail -5 log.txt",
        "wc -l *.rs",
        "grep -rn 'fn main' src",
        "rg -n TODO crates",
        "find . -name '*.rs' -type f",
        "sed -n '1,20p' src/lib.rs",
        "sed 's/foo/bar/g' input.txt",
        "git status",
        "git log --oneline -5",
        "git diff HEAD~1 -- src",
        "git show HEAD:Cargo.toml",
        "git branch",
        "git branch -a",
        "git stash list",
        "cd src && ls -la",
        "ls 2>/dev/null | wc -l",
        "cat a.txt | sort | uniq -c | sort -rn | head",
        "grep x < input.txt",
        "echo hello; pwd",
        "uniq input.txt",
        "env",
        "jq '.name' package.json",
    ] {
        let decision = policy.check(line);
        assert_eq!(decision.verdict, Verdict::Allow, "{line}: {decision:?}");
    }
}

#[test]
fn writing_forms_of_read_only_commands_prompt() {
    let policy = ExecPolicy::default();
    for (line, rule) in [
        ("find . -name '*.tmp' -delete", "builtin:find"),
        ("find . -exec rm {} ;", "builtin:find"),
        ("find . -execdir cat {} +", "builtin:find"),
        ("find . -fprint out.txt", "builtin:find"),
        ("sed -i 's/a/b/' f.txt", "builtin:sed"),
        ("sed -ni 's/a/b/p' f.txt", "builtin:sed"),
        ("sed --in-place=.bak 's/a/b/' f.txt", "builtin:sed"),
        ("sed 's/a/b/w out.txt' f.txt", "builtin:sed"),
        ("sed -e '1e rm -rf x' f.txt", "builtin:sed"),
        ("sed -f script.sed f.txt", "builtin:sed"),
        ("rg --pre ./evil.sh pattern", "builtin:rg"),
        ("sort -o out.txt in.txt", "builtin:sort"),
        ("git diff --output=patch.diff", "builtin:git"),
        ("git log --ext-diff", "builtin:git"),
        ("git branch -D main", "builtin:git branch"),
        ("git branch new-feature", "builtin:git branch"),
        ("uniq in.txt out.txt", "builtin:uniq"),
        ("env rm -rf /", "builtin:env"),
        ("find . $EXTRA", "shell-syntax"),
        ("find . -name x *", "builtin:find"),
    ] {
        let decision = policy.check(line);
        assert_eq!(decision.verdict, Verdict::Prompt, "{line}: {decision:?}");
        assert_eq!(decision.rule, rule, "{line}: {decision:?}");
    }
}

#[test]
fn unknown_programs_and_unclear_lines_prompt_never_allow() {
    let policy = ExecPolicy::default();
    for line in [
        "rm -rf build",
        "git push origin main",
        "git commit -m x",
        "git -C other status",
        "python3 -c 'print(1)'",
        "curl https://example.com",
        "./ls",
        "/bin/ls",
        "ls > listing.txt",
        "ls >> listing.txt",
        "cat <<EOF\nhi\nEOF",
        "echo $(whoami)",
        "echo `whoami`",
        "(ls)",
        "{ ls; }",
        "FOO=bar ls",
        "ls &",
        "ls && rm x",
        "cat x | sh",
        "ls $(rm -rf x)",
        "",
        "   ",
        "echo 'unterminated",
        "xargs rm < list",
        "awk '{system(\"rm x\")}' f",
    ] {
        let decision = policy.check(line);
        assert_eq!(decision.verdict, Verdict::Prompt, "{line:?}: {decision:?}");
    }
}

const RULES: &str = r#"
[[rule]]
name = "no-push"
prefix = ["git", "push"]
decision = "forbid"
reason = "pushing is for humans"
match = ["git push", "git push origin main --force"]
not_match = ["git pull", "git status"]

[[rule]]
name = "cargo"
prefix = ["cargo", ["build", "test", "check", "clippy"]]
decision = "allow"
veto = ["--config"]
match = ["cargo test -p loom-core", "cargo check"]
not_match = ["cargo publish", "cargo test --config x=1"]

[[rule]]
name = "rm"
prefix = ["rm"]
decision = "prompt"
match = ["rm -rf build"]

[[rule]]
name = "ls-loudly"
prefix = ["ls", "-R"]
decision = "prompt"
"#;

#[test]
fn toml_rules_apply_and_the_strictest_wins() {
    let policy = ExecPolicy::from_toml(RULES).unwrap();
    let push = policy.check("git push origin main");
    assert_eq!(push.verdict, Verdict::Forbid);
    assert_eq!(push.rule, "no-push");
    assert!(push.reason.contains("pushing is for humans"), "{push:?}");
    assert_eq!(verdict(&policy, "cargo test -p x"), Verdict::Allow);
    assert_eq!(verdict(&policy, "cargo test --config a=b"), Verdict::Prompt);
    assert_eq!(verdict(&policy, "cargo publish"), Verdict::Prompt);
    // A forbidden command anywhere in the line forbids the line, even inside a substitution or
    // after an allowed command.
    assert_eq!(verdict(&policy, "ls && git push"), Verdict::Forbid);
    assert_eq!(verdict(&policy, "echo $(git push)"), Verdict::Forbid);
    assert_eq!(verdict(&policy, "cargo test; git push"), Verdict::Forbid);
    // A prompt rule beats the built-in allow for the same program.
    assert_eq!(verdict(&policy, "ls -R src"), Verdict::Prompt);
    assert_eq!(policy.check("ls -R src").rule, "ls-loudly");
    assert_eq!(verdict(&policy, "ls src"), Verdict::Allow);
}

#[test]
fn defaults_can_be_turned_off() {
    let policy = ExecPolicy::from_toml("defaults = false\n").unwrap();
    assert_eq!(verdict(&policy, "ls"), Verdict::Prompt);
    let policy = ExecPolicy::from_toml("").unwrap();
    assert_eq!(verdict(&policy, "ls"), Verdict::Allow);
}

#[test]
fn a_failing_example_is_a_load_error_naming_rule_and_example() {
    let cases = [
        (
            r#"
            [[rule]]
            name = "push"
            prefix = ["git", "push"]
            decision = "forbid"
            match = ["git pull"]
            "#,
            "push",
            "git pull",
        ),
        (
            r#"
            [[rule]]
            name = "push"
            prefix = ["git", "push"]
            decision = "forbid"
            not_match = ["git push -f"]
            "#,
            "push",
            "git push -f",
        ),
        (
            r#"
            [[rule]]
            prefix = ["cargo"]
            decision = "allow"
            veto = ["--config"]
            match = ["cargo --config x build"]
            "#,
            "rule[0]",
            "cargo --config x build",
        ),
        (
            r#"
            [[rule]]
            name = "two"
            prefix = ["ls"]
            decision = "allow"
            match = ["ls && ls"]
            "#,
            "two",
            "ls && ls",
        ),
    ];
    for (text, rule, example) in cases {
        match ExecPolicy::from_toml(text) {
            Err(Error::PolicyRule { rule: r, reason }) => {
                assert_eq!(r, rule);
                assert!(reason.contains(example), "{reason}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn malformed_policies_are_load_errors() {
    for (text, needle) in [
        (
            "[[rule]]\nprefix = [\"ls\"]\ndecision = \"maybe\"\n",
            "maybe",
        ),
        ("[[rule]]\nprefix = []\ndecision = \"allow\"\n", "prefix"),
        (
            "[[rule]]\nprefix = [\"\"]\ndecision = \"allow\"\n",
            "prefix[0]",
        ),
        (
            "[[rule]]\nprefix = [\"ls\"]\ndecision = \"allow\"\nmatches = [\"ls\"]\n",
            "matches",
        ),
        (
            "[[rule]]\nname = \"builtin:ls\"\nprefix = [\"ls\"]\ndecision = \"allow\"\n",
            "builtin:ls",
        ),
        ("rule = 3", "rule"),
    ] {
        let err = ExecPolicy::from_toml(text).unwrap_err();
        assert!(err.to_string().contains(needle), "{text}: {err}");
    }
}

#[test]
fn every_builtin_rule_allows_something_and_vetoes_are_real() {
    let policy = ExecPolicy::default();
    for rule in &policy.rules {
        let program = match &rule.prefix[0] {
            TokenPattern::One(word) => word.clone(),
            TokenPattern::AnyOf(words) => words[0].clone(),
        };
        assert_eq!(rule.verdict, Verdict::Allow, "{}", rule.name);
        for flag in &rule.veto {
            let mut line = rule
                .prefix
                .iter()
                .map(|t| match t {
                    TokenPattern::One(w) => w.clone(),
                    TokenPattern::AnyOf(ws) => ws[0].clone(),
                })
                .collect::<Vec<_>>();
            line.push(flag.trim_end_matches('*').to_owned());
            let line = line.join(" ");
            assert_ne!(
                verdict(&policy, &line),
                Verdict::Allow,
                "{line} ({program})"
            );
        }
    }
}

#[test]
fn any_input_gets_a_decision_without_panicking() {
    // A small deterministic generator over the characters the splitter treats specially.
    const ALPHABET: &[&str] = &[
        "ls",
        " ",
        "'",
        "\"",
        "\\",
        "$",
        "(",
        ")",
        "`",
        "{",
        "}",
        ";",
        "&",
        "|",
        ">",
        "<",
        "#",
        "\n",
        "*",
        "=",
        "-i",
        "sed",
        "find",
        "-exec",
        "2",
        "/dev/null",
        "é",
        "\t",
        "git",
        "push",
    ];
    let policy = ExecPolicy::from_toml(RULES).unwrap();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..20_000 {
        let mut line = String::new();
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        for _ in 0..(state % 24) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            line.push_str(ALPHABET[(state % ALPHABET.len() as u64) as usize]);
        }
        let first = policy.check(&line);
        assert_eq!(first, policy.check(&line), "not deterministic: {line:?}");
        // Outside quotes and comments, a substitution can never be allowed.
        let unquoted = !line.contains(['\'', '"', '\\', '#']);
        if unquoted && (line.contains('`') || line.contains("$(")) {
            assert_ne!(first.verdict, Verdict::Allow, "{line:?}");
        }
    }
}
