//! A tool's last ten minutes drawn as small SVG charts: calls per second,
//! outcomes, latency. Drawn on the server into the page (no script, no
//! style attribute: presentation attributes only, which the
//! Content-Security-Policy allows).

use maud::{Markup, html};

use crate::calls::tail::{BUCKET, Bucket};

const WIDTH: f64 = 300.0;
const HEIGHT: f64 = 80.0;

/// The three charts of `buckets` (oldest first).
pub(crate) fn charts(buckets: &[Bucket]) -> Markup {
    let seconds = BUCKET.as_secs_f64();
    let rate: Vec<f64> = buckets
        .iter()
        .map(|b| f64::from(b.calls()) / seconds)
        .collect();
    let mean: Vec<f64> = buckets
        .iter()
        .map(|b| b.mean_latency().map_or(0.0, |l| l.as_secs_f64() * 1000.0))
        .collect();
    let max: Vec<f64> = buckets
        .iter()
        .map(|b| f64::from(b.latency_max_us) / 1000.0)
        .collect();
    let totals = buckets.iter().fold([0u64; 5], |mut sum, b| {
        for (s, n) in sum
            .iter_mut()
            .zip([b.ok, b.tool_error, b.limited, b.refused, b.failed])
        {
            *s += u64::from(n);
        }
        sum
    });
    html! {
        div.charts {
            figure.chart {
                figcaption { "Calls/s · peak " (format!("{:.1}", peak(&rate))) }
                (bars(&rate, "#1f5fbf"))
            }
            figure.chart {
                figcaption {
                    "Outcomes · ok " (totals[0]) ", tool error " (totals[1])
                    ", rate limited " (totals[2]) ", refused " (totals[3]) ", failed " (totals[4])
                }
                (stacked(buckets))
            }
            figure.chart {
                figcaption { "Latency ms · mean, max · peak " (format!("{:.1}", peak(&max))) }
                (lines(&[(&mean, "#1f5fbf"), (&max, "#b42318")]))
            }
            p.note { "The last ten minutes on this replica, in " (BUCKET.as_secs()) " s steps." }
        }
    }
}

fn peak(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

fn frame(inner: Markup) -> Markup {
    html! {
        svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) width=(WIDTH) height=(HEIGHT) role="img" xmlns="http://www.w3.org/2000/svg" {
            rect x="0" y="0" width=(WIDTH) height=(HEIGHT) fill="#ffffff" stroke="#dde2ea" {}
            (inner)
        }
    }
}

#[allow(clippy::cast_precision_loss)]
fn step(n: usize) -> f64 {
    WIDTH / n.max(1) as f64
}

fn bars(values: &[f64], colour: &str) -> Markup {
    let top = peak(values).max(f64::MIN_POSITIVE);
    let w = step(values.len());
    frame(html! {
        @for (i, v) in values.iter().enumerate() {
            @let h = v / top * (HEIGHT - 4.0);
            @if h > 0.0 {
                rect x=(fmt(index(i) * w + 0.5)) y=(fmt(HEIGHT - h)) width=(fmt(w - 1.0)) height=(fmt(h)) fill=(colour) {}
            }
        }
    })
}

fn stacked(buckets: &[Bucket]) -> Markup {
    const COLOURS: [&str; 5] = ["#2e7d32", "#b26a00", "#7c3aed", "#6b7280", "#b42318"];
    let top = f64::from(buckets.iter().map(Bucket::calls).max().unwrap_or(0).max(1));
    let w = step(buckets.len());
    frame(html! {
        @for (i, b) in buckets.iter().enumerate() {
            @let parts = [b.ok, b.tool_error, b.limited, b.refused, b.failed];
            @for (k, n) in parts.iter().enumerate() {
                @let below: u32 = parts[..k].iter().sum();
                @let h = f64::from(*n) / top * (HEIGHT - 4.0);
                @let y = HEIGHT - f64::from(below + n) / top * (HEIGHT - 4.0);
                @if h > 0.0 {
                    rect x=(fmt(index(i) * w + 0.5)) y=(fmt(y)) width=(fmt(w - 1.0)) height=(fmt(h)) fill=(COLOURS[k]) {}
                }
            }
        }
    })
}

fn lines(series: &[(&[f64], &str)]) -> Markup {
    let top = series
        .iter()
        .map(|(values, _)| peak(values))
        .fold(f64::MIN_POSITIVE, f64::max);
    frame(html! {
        @for (values, colour) in series {
            @let w = step(values.len());
            @let points: Vec<String> = values
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{},{}", fmt(index(i) * w + w / 2.0), fmt(HEIGHT - 2.0 - v / top * (HEIGHT - 4.0))))
                .collect();
            polyline points=(points.join(" ")) fill="none" stroke=(colour) stroke-width="1.5" {}
        }
    })
}

#[allow(clippy::cast_precision_loss)]
fn index(i: usize) -> f64 {
    i as f64
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::tail::{BUCKETS, CallRecord, CallTail};

    #[test]
    fn charts_draw_what_the_buckets_count() {
        let began = std::time::Instant::now();
        let tail = CallTail::new(began);
        for (outcome, ms) in [("ok", 2), ("ok", 4), ("tool_error", 9)] {
            tail.record(
                CallRecord {
                    at: std::time::SystemTime::now(),
                    tool: "echo".into(),
                    caller: "".into(),
                    outcome,
                    latency: std::time::Duration::from_millis(ms),
                    instance: None,
                    task: None,
                },
                true,
                began,
            );
        }
        let buckets = tail.series("echo", began).unwrap_or_default();
        assert_eq!(buckets.len(), BUCKETS);
        let svg = charts(&buckets).into_string();
        assert_eq!(svg.matches("<svg").count(), 3);
        assert!(svg.contains("ok 2, tool error 1"), "{svg}");
        assert!(svg.contains("peak 9.0"), "{svg}");
        assert!(!svg.contains("style="), "no style attribute under the CSP");
    }
}
