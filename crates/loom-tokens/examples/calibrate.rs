//! Measures the estimator's initial calibration against `o200k_base` on ../shared/traces:
//! bytes per token per content class (from pieces that are at least 90% one class), the error
//! of the default calibration, and the margin that covers 95% of under-estimates.
//!
//! Run: `cargo run --release -p loom-tokens --example calibrate`

#![allow(clippy::print_stdout, missing_docs)]

#[path = "../tests/support/traces.rs"]
#[allow(dead_code, unreachable_pub)]
mod traces;

use loom_tokens::{Calibration, ClassUnits, ContentClass, Encoding};

/// A CJK sample written for this measurement (the traces hold almost none).
const CJK: &str =
    "東京は日本の首都であり、世界でも有数の大都市です。多くの人が毎日電車で通勤しています。\
北京是中国的首都，有着悠久的历史和丰富的文化遗产。每年都有大量游客来这里参观故宫和长城。\
서울은 대한민국의 수도이며 한강을 중심으로 발전한 도시입니다. 많은 사람들이 지하철을 이용합니다.\
今日は天気が良いので、公園で散歩をしてから図書館に行く予定です。昨日読んだ本はとても面白かった。\
我们明天上午九点在会议室开会，请大家提前准备好相关的材料和报告。";

fn main() -> anyhow::Result<()> {
    let Some(files) = traces::load(&traces::traces_dir())? else {
        anyhow::bail!("../shared/traces is absent");
    };
    let enc = Encoding::O200kBase;
    let pieces = traces::all_pieces(&files);
    let mut units = [0u64; 4];
    let mut tokens = [0u64; 4];
    for p in &pieces {
        let u = ClassUnits::of(p);
        let all: u64 = u.0.iter().sum();
        if all < 200 {
            continue;
        }
        for (i, c) in ContentClass::ALL.into_iter().enumerate() {
            if u.get(c) * 10 >= all * 9 {
                units[i] += u.get(c);
                tokens[i] += enc.count(p) as u64;
            }
        }
    }
    let cjk_chars = CJK.chars().filter(|c| !c.is_ascii()).count() as u64;
    let cjk_units = ClassUnits::of(CJK).get(ContentClass::Cjk);
    let cjk_tokens = enc.count(CJK) as u64;
    println!("class   units  tokens  units/token");
    for (i, c) in ContentClass::ALL.into_iter().enumerate() {
        let (u, t) = if c == ContentClass::Cjk {
            (cjk_units, cjk_tokens)
        } else {
            (units[i], tokens[i])
        };
        println!(
            "{:6} {u:>9} {t:>8} {:>8.3}",
            c.name(),
            u as f64 / t.max(1) as f64
        );
    }
    println!("(CJK sample: {cjk_chars} non-ASCII chars)");

    let cal = Calibration::default();
    let mut under = Vec::new();
    let mut abs = Vec::new();
    let mut quarter = Vec::new();
    for p in &pieces {
        let actual = enc.count(p) as f64;
        if actual < 50.0 {
            continue;
        }
        let raw = cal.estimate(p).raw;
        under.push((actual / raw - 1.0).max(0.0));
        abs.push((raw - actual).abs() / actual);
        quarter.push(((p.len() as f64 / 4.0) - actual).abs() / actual);
    }
    for v in [&mut under, &mut abs, &mut quarter] {
        v.sort_by(f64::total_cmp);
    }
    let p = |v: &[f64], q: f64| v[((v.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    println!("pieces >= 50 tokens: {}", under.len());
    println!(
        "default calibration: median |err| {:.3}, p95 |err| {:.3}, p95 under-estimate {:.3}",
        p(&abs, 0.5),
        p(&abs, 0.95),
        p(&under, 0.95)
    );
    println!(
        "bytes/4 heuristic:   median |err| {:.3}, p95 |err| {:.3}",
        p(&quarter, 0.5),
        p(&quarter, 0.95)
    );
    Ok(())
}
