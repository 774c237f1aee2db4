//! What the server says about itself: `/metrics` read into histograms and plain values, so a
//! scenario can take the difference over its measured calls.

use std::collections::BTreeMap;

/// One histogram's cumulative buckets (upper bound in seconds, count), sum and count.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Histogram {
    pub(crate) buckets: Vec<(f64, u64)>,
    pub(crate) sum: f64,
    pub(crate) count: u64,
}

impl Histogram {
    /// What was observed after `before` was taken.
    pub(crate) fn since(&self, before: &Histogram) -> Histogram {
        let buckets = self
            .buckets
            .iter()
            .map(|(le, n)| {
                let was = before
                    .buckets
                    .iter()
                    .find(|(b, _)| b == le)
                    .map_or(0, |(_, n)| *n);
                (*le, n.saturating_sub(was))
            })
            .collect();
        Histogram {
            buckets,
            sum: self.sum - before.sum,
            count: self.count.saturating_sub(before.count),
        }
    }

    /// The mean in seconds, if anything was observed.
    pub(crate) fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// The smallest bucket bound under which at least `q` of the observations fall: the
    /// quantile as closely as the buckets can tell it (`None` past the last finite bound).
    pub(crate) fn quantile_bound(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let want = (q * self.count as f64).ceil() as u64;
        self.buckets
            .iter()
            .filter(|(le, _)| le.is_finite())
            .find(|(_, n)| *n >= want)
            .map(|(le, _)| *le)
    }
}

/// The histograms and plain values of one `/metrics` read, keyed by name and labels.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    histograms: BTreeMap<(String, String), Histogram>,
    values: BTreeMap<String, f64>,
}

impl Snapshot {
    /// Reads the exposition text; lines it does not understand are skipped.
    pub(crate) fn parse(text: &str) -> Self {
        let mut s = Self::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((key, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match key.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (key, ""),
            };
            let label = |want: &str| {
                labels.split(',').find_map(|kv| {
                    kv.strip_prefix(want)
                        .and_then(|v| v.strip_prefix("=\""))
                        .map(|v| v.trim_end_matches('"').to_owned())
                })
            };
            // Histograms are keyed by route, or by phase for the preparation's steps.
            let route = label("route")
                .or_else(|| label("phase"))
                .unwrap_or_default();
            if let Some(base) = name.strip_suffix("_bucket") {
                let le = match label("le").as_deref() {
                    Some("+Inf") => f64::INFINITY,
                    Some(b) => b.parse().unwrap_or(f64::NAN),
                    None => continue,
                };
                s.histograms
                    .entry((base.to_owned(), route))
                    .or_default()
                    .buckets
                    .push((le, value as u64));
            } else if let Some(base) = name.strip_suffix("_sum") {
                s.histograms
                    .entry((base.to_owned(), route))
                    .or_default()
                    .sum = value;
            } else if let Some(base) = name
                .strip_suffix("_count")
                .filter(|_| !name.ends_with("_total"))
            {
                s.histograms
                    .entry((base.to_owned(), route))
                    .or_default()
                    .count = value as u64;
            } else {
                *s.values.entry(key.to_owned()).or_default() += value;
            }
        }
        s
    }

    /// The histogram `name` of `route`, empty when the server has not observed it yet.
    pub(crate) fn histogram(&self, name: &str, route: &str) -> Histogram {
        self.histograms
            .get(&(name.to_owned(), route.to_owned()))
            .cloned()
            .unwrap_or_default()
    }

    /// The value of the series written exactly `key` (name and labels), or 0.
    pub(crate) fn value(&self, key: &str) -> f64 {
        self.values.get(key).copied().unwrap_or(0.0)
    }
}
