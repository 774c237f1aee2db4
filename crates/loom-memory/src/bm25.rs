//! BM25 as both backends rank full text: one formula, over one scope's statistics.
//!
//! The terms are [`crate::text::stems`] of the items and the query. A term's weight is its
//! inverse document frequency among the items of the searched agent (all agents' when the
//! search names none), from document frequencies each backend keeps as items are written and
//! removed; an item's length is its number of distinct content words, against the same scope's
//! average. So an agent's ranking depends on its own items only, and SQLite and PostgreSQL,
//! holding the same items, give the same scores.

/// Term-frequency saturation.
pub(crate) const K1: f64 = 1.2;
/// Length normalization.
pub(crate) const B: f64 = 0.75;

/// The most matches the ranking terms may have together.
///
/// A frequent term adds little to any item's score (its inverse document frequency is low),
/// and scoring its thousands of matches is most of a search's time; so a query is ranked on its
/// rarest terms, as many as have at most this many matches together (the rarest always,
/// whatever its count), and when even the rarest has more, on its newest matches only. This is
/// Lucene's cutoff frequency made relative to the query: the work is bounded whatever the
/// terms, and a query whose terms are all rare — every query on a memory of a few thousand
/// items — is ranked on all of them.
pub(crate) const SCORED_MATCHES: i64 = 2_000;

/// The query's terms as the index holds them: each term's stem ([`crate::text::stem`]), once,
/// in the query's order.
pub(crate) fn query_stems(terms: &[String]) -> Vec<String> {
    let mut stems: Vec<String> = Vec::with_capacity(terms.len());
    for t in terms {
        let s = crate::text::stem(t);
        if !stems.contains(&s) {
            stems.push(s);
        }
    }
    stems
}

/// BM25's inverse document frequency of a term held by `df` of `n` items.
pub(crate) fn idf(n: i64, df: i64) -> f64 {
    let (n, df) = (n.max(1) as f64, df as f64);
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// One term's part of an item's score: the term's `weight` ([`idf`]) with its frequency `tf` in
/// the item saturated, the item being `len` content words long against an average of `avg`.
pub(crate) fn term_score(weight: f64, tf: f64, len: f64, avg: f64) -> f64 {
    weight * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * len / avg.max(f64::MIN_POSITIVE)))
}

/// The query's terms worth ranking on, from each term's document frequency in the scope (in
/// the query's order): their indexes with their weights, in the query's order, and whether only
/// the newest matches are ranked (see [`SCORED_MATCHES`]). Terms no item holds are dropped.
pub(crate) fn choose(frequencies: &[i64], items: i64) -> (Vec<(usize, f64)>, bool) {
    let mut counted: Vec<(i64, usize)> = frequencies
        .iter()
        .enumerate()
        .filter(|&(_, &df)| df > 0)
        .map(|(i, &df)| (df, i))
        .collect();
    // Rarest first, ties in the query's order.
    counted.sort_unstable();
    let rarest = counted.first().map_or(0, |c| c.0);
    let mut together = 0_i64;
    let mut kept = Vec::new();
    for (df, i) in counted {
        together = together.saturating_add(df);
        if kept.is_empty() || together <= SCORED_MATCHES {
            kept.push((i, idf(items, df)));
        }
    }
    kept.sort_unstable_by_key(|&(i, _)| i);
    (kept, rarest > SCORED_MATCHES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rarest_terms_are_kept_up_to_the_bound_and_the_rarest_always() {
        let (kept, newest) = choose(&[1_500, 3, 0, 400, 900], 10_000);
        let at: Vec<usize> = kept.iter().map(|k| k.0).collect();
        // 3 + 400 + 900 = 1,303 ≤ 2,000; adding 1,500 passes it; the unheld term is dropped.
        assert_eq!(at, [1, 3, 4]);
        assert!(!newest);
        assert!(kept[0].1 > kept[1].1 && kept[1].1 > kept[2].1);

        let (kept, newest) = choose(&[5_000, 9_000], 10_000);
        assert_eq!(kept.iter().map(|k| k.0).collect::<Vec<_>>(), [0]);
        assert!(newest);
    }

    #[test]
    fn a_longer_item_scores_less_for_the_same_frequency() {
        let w = idf(100, 5);
        assert!(term_score(w, 1.0, 5.0, 10.0) > term_score(w, 1.0, 20.0, 10.0));
        assert!(term_score(w, 3.0, 10.0, 10.0) > term_score(w, 1.0, 10.0, 10.0));
        assert!(term_score(w, 1.0, 10.0, 0.0).is_finite());
    }
}
