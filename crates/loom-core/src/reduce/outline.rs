//! The names a piece of source code defines (functions, classes, types), for the observation of
//! a file read.
//!
//! When a file view leaves the context, its observation says which definitions the agent saw,
//! so the agent still knows where `parse_expr` lives and can ask for it again by name instead of
//! re-reading the file to find it. Only definitions are kept: they are what later turns refer
//! to, and there are few of them per window. The scan is line-based and language-agnostic
//! (keywords of the common languages); it never fails, it only finds fewer names.

/// Most lines looked at; a window an agent reads is far shorter, a whole file may not be.
const MAX_LINES: usize = 5_000;

/// Keywords that introduce a definition, in the languages agents edit most.
const DEF_KEYWORDS: &[&str] = &[
    "def",
    "class",
    "fn",
    "func",
    "function",
    "struct",
    "enum",
    "trait",
    "interface",
    "module",
    "record",
];

/// Modifiers that may precede a definition keyword.
const MODIFIERS: &[&str] = &[
    "pub",
    "pub(crate)",
    "pub(super)",
    "async",
    "export",
    "default",
    "static",
    "public",
    "private",
    "protected",
    "internal",
    "abstract",
    "final",
    "sealed",
    "unsafe",
    "extern",
    "const",
    "override",
    "open",
    "data",
];

/// The names defined in `code`, in order of appearance, without repeats.
pub(crate) fn definitions(code: &str) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for line in code.lines().take(MAX_LINES) {
        let code = super::text::line_number(line).map_or(line, |(_, code)| code);
        if let Some(name) = definition(code) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// The qualified names `code` uses (`timezone.is_naive`, `self.settings_dict`), most used first
/// (ties in order of appearance), without repeats: what a later edit of the code calls, which
/// its definitions alone do not say. Names inside comments count too: the scan is line-based.
pub(crate) fn uses(code: &str) -> Vec<&str> {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for line in code.lines().take(MAX_LINES) {
        let code = super::text::line_number(line).map_or(line, |(_, code)| code);
        let bytes = code.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
            if !(bytes[i].is_ascii_alphabetic() || bytes[i] == b'_')
                || (i > 0 && (word(bytes[i - 1]) || bytes[i - 1] == b'.'))
            {
                i += 1;
                continue;
            }
            // A run of words joined by single dots, starting at a word boundary.
            let start = i;
            let mut end = i;
            let mut dots = 0;
            loop {
                while end < bytes.len() && word(bytes[end]) {
                    end += 1;
                }
                let next_starts = bytes
                    .get(end + 1)
                    .is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_');
                if bytes.get(end) == Some(&b'.') && next_starts {
                    dots += 1;
                    end += 1;
                } else {
                    break;
                }
            }
            let name = &code[start..end];
            // `e.g`, `i.e`, `x.y`: one-letter parts are prose or throwaway names.
            if dots > 0 && name.split('.').all(|part| part.len() > 1) {
                match counts.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, c)) => *c += 1,
                    None => counts.push((name, 1)),
                }
            }
            i = end.max(i + 1);
        }
    }
    // Stable: equal counts keep their order of appearance.
    counts.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    counts.into_iter().map(|(n, _)| n).collect()
}

/// The name a line defines, if it starts a definition.
fn definition(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    // Decorators and attributes are not definitions; comments are not code.
    if rest.starts_with(['@', '#', '/', '*']) {
        return None;
    }
    loop {
        let (word, after) = split_word(rest)?;
        if MODIFIERS.contains(&word) {
            rest = after;
            continue;
        }
        if !DEF_KEYWORDS.contains(&word) {
            return None;
        }
        let mut after = after.trim_start();
        // Go methods: `func (r *Reader) Read(`.
        if word == "func" && after.starts_with('(') {
            after = after[after.find(')')? + 1..].trim_start();
        }
        // `function* gen`, `fn &name` do not occur; a name starts with a letter or underscore.
        let after = after.trim_start_matches('*').trim_start();
        let len = after
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'$')
            .count();
        let name = &after[..len];
        let starts_well = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
        return (starts_well && len >= 2).then_some(name);
    }
}

/// The first word of `s` (up to whitespace) and what follows it.
fn split_word(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start();
    if s.is_empty() {
        return None;
    }
    let end = s.find(char::is_whitespace).unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_qualified_names_code_uses() {
        let code = "\
   10\tif timezone.is_naive(value) and settings.USE_TZ:
   11\t    value = timezone.make_aware(value, self.settings_dict['TIME_ZONE'])
   12\t    return timezone.is_naive(value) or x.y
";
        assert_eq!(
            uses(code),
            [
                "timezone.is_naive",
                "settings.USE_TZ",
                "timezone.make_aware",
                "self.settings_dict",
            ]
        );
        assert!(uses("3.14 + a. b").is_empty());
    }

    #[test]
    fn finds_definitions_in_common_languages() {
        let code = "\
   401\tdef _sqlite_datetime_parse(dt, tzname=None):
   402\t    if dt is None:
   403\t        return None
   404\t
   405\tclass DatabaseWrapper(BaseDatabaseWrapper):
   406\t    async def connect(self):
12:pub(crate) fn render_projection(input: &RenderInput) -> Result<()> {
13:pub struct Budget {
export default function App() {}
func (r *Reader) ReadLine() (string, error) {
public static final class Builder {
@property
# def not_this_one():
x = define(y)
";
        assert_eq!(
            definitions(code),
            vec![
                "_sqlite_datetime_parse",
                "DatabaseWrapper",
                "connect",
                "render_projection",
                "Budget",
                "App",
                "ReadLine",
                "Builder",
            ]
        );
    }

    #[test]
    fn prose_and_repeats_give_nothing_new() {
        assert!(definitions("The class of problems we define here.\nfn\n").is_empty());
        assert_eq!(definitions("def a_b():\ndef a_b():\n"), vec!["a_b"]);
    }
}
