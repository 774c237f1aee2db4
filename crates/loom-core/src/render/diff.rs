//! A result sent as the lines that changed against an earlier one: a browser page against the
//! page before it, or the output of a call made again against its earlier output.
//!
//! Every page action returns the whole page (an accessibility tree), and consecutive pages of one
//! site mostly repeat each other; a test suite run again after a fix, a reproduction script run
//! again, a file shown again after an edit mostly repeat their earlier output. When the earlier
//! result is still in the request, verbatim, the new one is sent as a line diff against it: the
//! earlier result stays byte-stable in the cached prefix and only the changes are new input.
//! Every line the new result adds or changes is in the diff, so nothing is lost: the others are
//! in the earlier result (for a page, no element the agent may act on).

use similar::{capture_diff_slices, Algorithm, DiffOp};

/// What a diff is of: it names it in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiffOf {
    /// A browser page after an action, against the page before it.
    Page,
    /// The output of a call made again, against the output of its earlier run.
    Output,
}

impl DiffOf {
    /// What a result of this step is diffed as: a page when the step acted on a browser.
    pub(crate) fn of(step: Option<&crate::step::Step>) -> Self {
        match step.map(|s| &s.kind) {
            Some(crate::step::ToolKind::Navigate | crate::step::ToolKind::BrowserAction) => {
                Self::Page
            }
            _ => Self::Output,
        }
    }
}

/// The new page `page` as its changes against `base` (rendered at `base_seq`), or `None` when
/// the diff would not be smaller than the page itself.
#[cfg(test)]
pub(crate) fn page_diff(base: &str, page: &str, base_seq: u64, reference: &str) -> Option<String> {
    diff(DiffOf::Page, base, page, base_seq, reference)
}

/// The new result `page` as its changes against `base` (rendered at `base_seq`), or `None` when
/// the diff would not be smaller than the result itself.
pub(crate) fn diff(
    of: DiffOf,
    base: &str,
    page: &str,
    base_seq: u64,
    reference: &str,
) -> Option<String> {
    let old: Vec<&str> = base.lines().collect();
    let new: Vec<&str> = page.lines().collect();
    let ops = capture_diff_slices(Algorithm::Myers, &old, &new);
    let unchanged: usize = ops
        .iter()
        .map(|op| match op {
            DiffOp::Equal { len, .. } => *len,
            _ => 0,
        })
        .sum();
    let mut out = match of {
        DiffOf::Page => format!(
            "[The page after this action, as its changes to the page shown at seq {base_seq} \
             ({unchanged} of its {} lines unchanged and not repeated; the whole page: \
             {reference}). \"-\" lines are gone, \"+\" lines are new:]\n",
            new.len()
        ),
        DiffOf::Output => format!(
            "[The output of this call, as its changes to the output of the same call at seq \
             {base_seq} ({unchanged} of its {} lines unchanged and not repeated; the whole \
             output: {reference}). \"-\" lines are gone, \"+\" lines are new:]\n",
            new.len()
        ),
    };
    for op in &ops {
        match *op {
            DiffOp::Equal { .. } => {}
            DiffOp::Delete {
                old_index, old_len, ..
            } => {
                hunk(&mut out, old_index, old_len, None);
                for line in &old[old_index..old_index + old_len] {
                    push(&mut out, '-', line);
                }
            }
            DiffOp::Insert {
                old_index,
                new_index,
                new_len,
            } => {
                hunk(&mut out, old_index, 0, Some((new_index, new_len)));
                for line in &new[new_index..new_index + new_len] {
                    push(&mut out, '+', line);
                }
            }
            DiffOp::Replace {
                old_index,
                old_len,
                new_index,
                new_len,
            } => {
                hunk(&mut out, old_index, old_len, Some((new_index, new_len)));
                for line in &old[old_index..old_index + old_len] {
                    push(&mut out, '-', line);
                }
                for line in &new[new_index..new_index + new_len] {
                    push(&mut out, '+', line);
                }
            }
        }
    }
    (out.len() < page.len()).then_some(out)
}

/// A hunk header in the unified form: where the change sits in the earlier page and the new.
fn hunk(out: &mut String, old_index: usize, old_len: usize, new: Option<(usize, usize)>) {
    let (new_index, new_len) = new.unwrap_or((0, 0));
    out.push_str(&format!(
        "@@ -{},{old_len} +{},{new_len} @@\n",
        old_index + 1,
        new_index + 1
    ));
}

fn push(out: &mut String, mark: char, line: &str) {
    out.push(mark);
    out.push_str(line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(value: &str, dialog: bool) -> String {
        let mut lines = vec![
            "RootWebArea 'iPad pro | ServiceNow'".to_owned(),
            "\t[a101] link 'Home'".to_owned(),
            "\t[a102] link 'Catalog'".to_owned(),
        ];
        for i in 0..30 {
            lines.push(format!("\t[a2{i:02}] StaticText 'Option {i}'"));
        }
        lines.push(format!("\t[a271] combobox 'Quantity', value='{value}'"));
        if dialog {
            lines.push("\t[a900] dialog 'Added to cart'".to_owned());
            lines.push("\t\t[a901] button 'Checkout'".to_owned());
        }
        lines.push("\t[a300] button 'Order Now'".to_owned());
        lines.join("\n")
    }

    #[test]
    fn a_changed_page_is_its_changed_lines_with_every_new_element() {
        let base = page("1", false);
        let next = page("2", true);
        let diff = page_diff(&base, &next, 12, "step-4").unwrap();
        insta::assert_snapshot!(diff, @r#"
        [The page after this action, as its changes to the page shown at seq 12 (34 of its 37 lines unchanged and not repeated; the whole page: step-4). "-" lines are gone, "+" lines are new:]
        @@ -34,1 +34,3 @@
        -	[a271] combobox 'Quantity', value='1'
        +	[a271] combobox 'Quantity', value='2'
        +	[a900] dialog 'Added to cart'
        +		[a901] button 'Checkout'
        "#);
        for id in ["[a271]", "[a900]", "[a901]"] {
            assert!(diff.contains(id), "{id}");
        }
        assert!(diff.len() < next.len() / 2);
    }

    #[test]
    fn a_different_page_is_sent_whole() {
        let base = page("1", false);
        let other: String = (0..40)
            .map(|i| format!("[b{i}] row 'record {i}'\n"))
            .collect();
        assert_eq!(page_diff(&base, &other, 3, "seq 3"), None);
        // The same page again is an empty diff, still smaller than the page.
        let same = page_diff(&base, &base, 3, "seq 3").unwrap();
        assert!(!same.contains("@@"));
    }
}
