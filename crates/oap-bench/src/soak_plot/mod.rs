//! `oap-bench soak-plot`: the soak's records drawn into a PNG: RSS, open
//! files and threads, and p99 per route over time, with the faults
//! marked. Lines and a 5×7 pixel font on a palette canvas, encoded by the
//! `png` crate (no plotting library, no system fonts). `cargo xtask soak`
//! runs it after a run, and for `--replot DIR`.

mod canvas;
mod font;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::Value;

use canvas::{
    encode, nice_max, Canvas, Panel, BLACK, BLUE, GREEN, LEFT, ORANGE, PINK, RED, RIGHT, W,
};

/// Draws a soak's records into a PNG.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The soak's records (`soak.jsonl`: one JSON object a line).
    #[arg(long)]
    jsonl: PathBuf,
    /// The PNG to write.
    #[arg(long)]
    png: PathBuf,
}

/// Letter drawn above a fault's line, and its legend text.
const FAULTS: &[(&str, char, &str)] = &[
    ("ollama_slow", 'S', "OLLAMA SLOW"),
    ("tool_hang", 'T', "TOOL HANGS"),
    ("tool_flood", 'F', "TOOL FLOODS"),
    ("watch_add", 'W', "WATCHED DIR ADD/CHANGE/REMOVE"),
    ("watch_change", 'W', ""),
    ("watch_remove", 'W', ""),
    ("sighup", 'H', "SIGHUP"),
    ("ollama_kill", 'O', "OLLAMA KILLED"),
    ("daemon_sigkill", 'K', "DAEMON SIGKILL"),
    ("index_corrupt_restart", 'C', "INDEX CORRUPTED + SIGKILL"),
];

/// The p99 routes drawn and their colours.
const ROUTES: [(&str, u8); 3] = [
    ("discover", BLUE),
    ("chat", GREEN),
    ("openai_stream", ORANGE),
];

pub fn run(args: Args) -> anyhow::Result<()> {
    plot(&args.jsonl, &args.png)
}

/// Plots `jsonl` (the soak's records) into `png`.
pub fn plot(jsonl: &Path, png: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(jsonl)
        .with_context(|| format!("cannot read {}", jsonl.display()))?;
    let canvas = draw(&Records::read(&text));
    std::fs::write(png, encode(&canvas.px)?)
        .with_context(|| format!("cannot write {}", png.display()))
}

/// A series: (seconds since the start, value), NaN where nothing was read.
type Series = Vec<(f64, f64)>;

/// What the plot shows of the records.
struct Records {
    /// The last time of any record, at least a minute.
    t_max: f64,
    rss: Series,
    fds: Series,
    threads: Series,
    /// Per minute, in [`ROUTES`]' order.
    p99: Vec<Series>,
    /// Time and kind of each marked fault.
    faults: Vec<(f64, String)>,
    /// Fetches of the drip-feeding manifest server (too many to mark).
    drips: usize,
}

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

impl Records {
    /// The `sample` and `minute` lines of `text`; other lines are skipped.
    fn read(text: &str) -> Records {
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let samples: Vec<&Value> = lines.iter().filter(|l| l["type"] == "sample").collect();
        let minutes: Vec<&Value> = lines.iter().filter(|l| l["type"] == "minute").collect();
        let t_max = lines
            .iter()
            .map(|l| num(l, "t_s"))
            .filter(|t| t.is_finite())
            .fold(60.0, f64::max);
        let pick =
            |k: &str| -> Series { samples.iter().map(|s| (num(s, "t_s"), num(s, k))).collect() };
        let p99 = ROUTES
            .iter()
            .map(|(route, _)| {
                minutes
                    .iter()
                    .map(|m| {
                        (
                            num(m, "t_s"),
                            m["routes"][route]["p99_ms"].as_f64().unwrap_or(f64::NAN),
                        )
                    })
                    .collect()
            })
            .collect();
        let mut faults: Vec<(f64, String)> = minutes
            .iter()
            .flat_map(|m| m["faults"].as_array().cloned().unwrap_or_default())
            .map(|f| (num(&f, "t_s"), f["kind"].as_str().unwrap_or("").to_string()))
            .collect();
        let drips = faults
            .iter()
            .filter(|(_, k)| k == "manifest_server_drip")
            .count();
        faults.retain(|(_, k)| k != "manifest_server_drip");
        Records {
            t_max,
            rss: pick("rss_mb"),
            fds: pick("fds"),
            threads: pick("threads"),
            p99,
            faults,
            drips,
        }
    }
}

/// The largest finite value of a series (0 for none).
fn max_of(series: &[(f64, f64)]) -> f64 {
    series
        .iter()
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
}

/// The whole picture: title, three panels, fault marks, axis and legend.
fn draw(r: &Records) -> Canvas {
    let mut canvas = Canvas::new();
    canvas.text(
        LEFT as i64,
        8,
        "OAPD SOAK: RSS, OPEN FILES, THREADS AND P99 OVER TIME; FAULTS MARKED",
        BLACK,
    );
    let panel = |top, max| Panel {
        top,
        height: 170,
        max: nice_max(max),
        t_max: r.t_max,
    };
    let panels = [
        panel(50, max_of(&r.rss)),
        panel(260, max_of(&r.fds).max(max_of(&r.threads))),
        panel(470, r.p99.iter().map(|s| max_of(s)).fold(0.0, f64::max)),
    ];
    // Fault lines first, under the series.
    for panel in &panels {
        for (t, _) in &r.faults {
            let x = panel.x(*t);
            let (top, bottom) = (panel.top as i64, (panel.top + panel.height) as i64);
            canvas.line(x, top, x, bottom, PINK);
        }
    }
    panels[0].frame(&mut canvas, "RSS (MB)");
    panels[0].series(&mut canvas, &r.rss, BLUE);
    panels[1].frame(&mut canvas, "OPEN FILES (BLUE), THREADS (GREEN)");
    panels[1].series(&mut canvas, &r.fds, BLUE);
    panels[1].series(&mut canvas, &r.threads, GREEN);
    panels[2].frame(
        &mut canvas,
        "P99 PER MINUTE (MS): DISCOVER (BLUE), CHAT (GREEN), STREAMED CHAT (ORANGE)",
    );
    for (series, (_, c)) in r.p99.iter().zip(ROUTES) {
        panels[2].series(&mut canvas, series, c);
    }
    // Letters above the top panel, staggered so close faults stay legible.
    for (i, (t, kind)) in r.faults.iter().enumerate() {
        let letter = FAULTS.iter().find(|f| f.0 == kind).map_or('?', |f| f.1);
        let x = panels[0].x(*t);
        canvas.text(x - 2, 28 + (i % 2) as i64 * 9, &letter.to_string(), RED);
    }
    let bottom = time_axis(&mut canvas, &panels[2], r.t_max);
    legend(&mut canvas, bottom, r.drips);
    canvas
}

/// Minutes under `panel` (a tick every 1, 2, 5, ... minutes, at most 12);
/// returns the panel's bottom.
fn time_axis(canvas: &mut Canvas, panel: &Panel, t_max: f64) -> i64 {
    let bottom = (panel.top + panel.height) as i64;
    let minutes_total = t_max / 60.0;
    let step = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0]
        .into_iter()
        .find(|s| minutes_total / s <= 12.0)
        .unwrap_or(60.0);
    let mut m = 0.0;
    while m <= minutes_total + 1e-9 {
        let x = panel.x(m * 60.0);
        canvas.line(x, bottom, x, bottom + 4, BLACK);
        canvas.text(x - 3, bottom + 8, &format!("{m:.0}"), BLACK);
        m += step;
    }
    canvas.text(W as i64 / 2 - 20, bottom + 20, "MINUTES", BLACK);
    bottom
}

/// The faults' letters and names below the axis, wrapped, and the count
/// of the unmarked drip fetches.
fn legend(canvas: &mut Canvas, bottom: i64, drips: usize) {
    let mut y = bottom + 40;
    let mut x = LEFT as i64;
    for (_, letter, label) in FAULTS.iter().filter(|f| !f.2.is_empty()) {
        let item = format!("{letter} {label}");
        if x + item.len() as i64 * 6 > (W - RIGHT) as i64 {
            x = LEFT as i64;
            y += 12;
        }
        canvas.text(x, y, &letter.to_string(), RED);
        canvas.text(x + 12, y, label, BLACK);
        x += item.len() as i64 * 6 + 24;
    }
    canvas.text(
        LEFT as i64,
        y + 14,
        &format!("DRIP-FEEDING MANIFEST SERVER FETCHED {drips} TIMES (NOT MARKED)"),
        BLACK,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_read_faults_marked_and_drips_only_counted() {
        let text = [
            r#"{"type":"sample","t_s":0,"rss_mb":50,"fds":20,"threads":10}"#,
            r#"{"type":"sample","t_s":30,"rss_mb":55,"fds":21,"threads":10}"#,
            "not a record",
            r#"{"type":"minute","t_s":120,"routes":{"chat":{"p99_ms":12.5}},"faults":[{"t_s":100,"kind":"sighup"},{"t_s":101,"kind":"manifest_server_drip"}]}"#,
        ]
        .join("\n");
        let records = Records::read(&text);
        assert_eq!(records.t_max, 120.0);
        assert_eq!(records.rss, vec![(0.0, 50.0), (30.0, 55.0)]);
        assert_eq!(records.faults, vec![(100.0, "sighup".to_string())]);
        assert_eq!(records.drips, 1);
        assert_eq!(records.p99[1], vec![(120.0, 12.5)]);
        assert!(records.p99[0][0].1.is_nan(), "no discover p99 that minute");
        let canvas = draw(&records);
        let fault_x = Panel {
            top: 50,
            height: 170,
            max: 1.0,
            t_max: 120.0,
        }
        .x(100.0);
        let x = usize::try_from(fault_x).unwrap();
        assert_eq!(canvas.px[60 * W + x], PINK, "the fault's line");
    }
}
