//! Work split over threads: the local model's products and batches, the vector scan.

/// `f(0)`, …, `f(parts - 1)`, each on a thread of its own (none spawned for one part), in
/// order; a panic in one is raised again here.
pub(crate) fn each<T: Send>(parts: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    if parts <= 1 {
        return (0..parts).map(&f).collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..parts)
            .map(|k| {
                let f = &f;
                s.spawn(move || f(k))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parts_come_back_in_order() {
        assert_eq!(super::each(5, |k| k * 10), [0, 10, 20, 30, 40]);
        assert_eq!(super::each(1, |k| k + 1), [1]);
        assert!(super::each(0, |k| k).is_empty());
    }
}
