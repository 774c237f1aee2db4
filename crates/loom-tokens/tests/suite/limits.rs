//! Budget checks stop early; huge and invalid inputs are counted in linear time, without panics.

use std::time::{Duration, Instant};

use loom_tokens::{Calibration, Encoding};

fn time<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

fn prose(bytes: usize) -> String {
    let unit = "The agent listed the folder, read config.yaml (412 lines) and ran `cargo test`: 3 failures.\n";
    unit.repeat(bytes / unit.len() + 1)
}

#[test]
fn fits_stops_as_soon_as_the_answer_is_known() {
    let text = prose(8 << 20);
    for enc in Encoding::ALL {
        let (n, full) = time(|| enc.count(&text));
        let (fits, early) = time(|| enc.fits(&text, 1000));
        assert!(!fits);
        assert_eq!(enc.count_till_limit(&text, n), Some(n));
        assert!(
            early * 50 < full,
            "{}: fits took {early:?}, a full count {full:?}",
            enc.name()
        );
    }
    let cal = Calibration::default();
    let (_, full) = time(|| cal.count(&text));
    let (none, early) = time(|| cal.count_till_limit(&text, 1000));
    assert_eq!(none, None);
    assert!(early * 50 < full, "estimate: {early:?} vs {full:?}");
}

/// Doubling the input must not much more than double the time, on inputs that make naive BPE
/// or regex splitting quadratic: one endless word, a whitespace run, digits, base64-like noise.
#[test]
fn counting_is_linear_on_pathological_inputs() {
    let size = if cfg!(debug_assertions) {
        1 << 18
    } else {
        1 << 22
    };
    let noise = |n: usize| -> String {
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(alphabet[(x % 64) as usize])
            })
            .collect()
    };
    type Make = Box<dyn Fn(usize) -> String>;
    let inputs: [(&str, Make); 5] = [
        ("one word", Box::new(|n| "a".repeat(n))),
        ("spaces", Box::new(|n| " ".repeat(n))),
        ("newlines and spaces", Box::new(|n| " \n".repeat(n / 2))),
        ("digits", Box::new(|n| "7".repeat(n))),
        ("base64 noise", Box::new(noise)),
    ];
    for enc in Encoding::ALL {
        for (name, make) in &inputs {
            let (small, big) = (make(size), make(size * 4));
            let (a, ts) = time(|| enc.count(&small));
            let (b, tb) = time(|| enc.count(&big));
            assert!(a > 0 && b >= 3 * a, "{name}: {a} then {b}");
            // 4x the input within ~10x the time (generous: the machine is shared).
            assert!(
                tb < ts * 10 + Duration::from_millis(50),
                "{} {name}: {ts:?} for {size} B, {tb:?} for 4x",
                enc.name()
            );
        }
    }
}

#[test]
fn a_100_mb_string_is_counted() {
    // In debug builds a smaller text keeps the suite quick; CI runs the release build.
    let bytes = if cfg!(debug_assertions) {
        8 << 20
    } else {
        100 << 20
    };
    let text = prose(bytes);
    let (n, took) = time(|| Encoding::O200kBase.count(&text));
    let unit = Encoding::O200kBase.count(&prose(1));
    assert!(
        n as f64 > (text.len() as f64 / 96.0) * unit as f64 * 0.9,
        "{n}"
    );
    assert!(
        took < Duration::from_secs(60),
        "{} MB took {took:?}",
        text.len() >> 20
    );
}

#[test]
fn invalid_utf8_never_panics() {
    let mut bytes = prose(4096).into_bytes();
    for i in (0..bytes.len()).step_by(97) {
        bytes[i] = 0xff;
    }
    bytes.extend([0xe2, 0x82]); // a truncated sequence at the end
    for enc in Encoding::ALL {
        let n = enc.count_bytes(&bytes);
        assert_eq!(n, enc.count(&String::from_utf8_lossy(&bytes)));
    }
}
