//! The soak's plot: RSS, open files and threads, and p99 per route over
//! time, with the faults marked: lines and a 5×7 pixel font drawn on a
//! palette canvas, encoded by the `png` crate (no plotting library, no
//! system fonts).

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

const W: usize = 960;
const H: usize = 760;
const LEFT: usize = 70;
const RIGHT: usize = 20;

// Palette indexes.
const WHITE: u8 = 0;
const BLACK: u8 = 1;
const GREY: u8 = 2;
const RED: u8 = 3;
const BLUE: u8 = 4;
const GREEN: u8 = 5;
const ORANGE: u8 = 6;
const PINK: u8 = 7;
const PALETTE: [[u8; 3]; 8] = [
    [255, 255, 255],
    [0, 0, 0],
    [200, 200, 200],
    [200, 30, 30],
    [30, 80, 200],
    [20, 140, 40],
    [230, 130, 0],
    [250, 185, 185],
];

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

struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    fn new() -> Self {
        Canvas {
            px: vec![WHITE; W * H],
        }
    }

    fn set(&mut self, x: i64, y: i64, c: u8) {
        if x >= 0 && y >= 0 && (x as usize) < W && (y as usize) < H {
            self.px[y as usize * W + x as usize] = c;
        }
    }

    fn line(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: u8) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            self.set(x, y, c);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    fn thick(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: u8) {
        self.line(x0, y0, x1, y1, c);
        self.line(x0, y0 + 1, x1, y1 + 1, c);
    }

    fn text(&mut self, x: i64, y: i64, s: &str, c: u8) {
        for (i, ch) in s.chars().enumerate() {
            let rows = glyph(ch.to_ascii_uppercase());
            for (r, row) in rows.iter().enumerate() {
                for (k, bit) in row.bytes().enumerate() {
                    if bit == b'#' {
                        self.set(x + i as i64 * 6 + k as i64, y + r as i64, c);
                    }
                }
            }
        }
    }
}

/// One panel: a y range and a rectangle.
struct Panel {
    top: usize,
    height: usize,
    max: f64,
    t_max: f64,
}

impl Panel {
    fn x(&self, t: f64) -> i64 {
        (LEFT as f64 + t / self.t_max * (W - LEFT - RIGHT) as f64) as i64
    }

    fn y(&self, v: f64) -> i64 {
        let f = (v / self.max).clamp(0.0, 1.0);
        (self.top as f64 + self.height as f64 * (1.0 - f)) as i64
    }

    fn frame(&self, canvas: &mut Canvas, title: &str) {
        let (x0, x1) = (LEFT as i64, (W - RIGHT) as i64);
        let (y0, y1) = (self.top as i64, (self.top + self.height) as i64);
        for k in 0..=4 {
            let v = self.max * k as f64 / 4.0;
            let y = self.y(v);
            canvas.line(x0, y, x1, y, if k == 0 { BLACK } else { GREY });
            canvas.text(4, y - 3, &short(v), BLACK);
        }
        canvas.line(x0, y0, x0, y1, BLACK);
        canvas.text(x0 + 6, y0 - 12, title, BLACK);
    }

    fn series(&self, canvas: &mut Canvas, points: &[(f64, f64)], c: u8) {
        for pair in points.windows(2) {
            let ((t0, v0), (t1, v1)) = (pair[0], pair[1]);
            // No line across a gap (the daemon down, rebuilding).
            if v0.is_finite() && v1.is_finite() && t1 - t0 <= 90.0 {
                canvas.thick(self.x(t0), self.y(v0), self.x(t1), self.y(v1), c);
            }
        }
    }
}

fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let v = v * 1.1;
    let step = 10f64.powf(v.log10().floor());
    (v / step).ceil() * step
}

/// Plots `jsonl` (the soak's records) into `png`.
pub fn plot(jsonl: &Path, png: &Path) -> Result<()> {
    let text = std::fs::read_to_string(jsonl)
        .with_context(|| format!("cannot read {}", jsonl.display()))?;
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let num = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let samples: Vec<&Value> = lines.iter().filter(|l| l["type"] == "sample").collect();
    let minutes: Vec<&Value> = lines.iter().filter(|l| l["type"] == "minute").collect();
    let t_max = lines
        .iter()
        .map(|l| num(l, "t_s"))
        .filter(|t| t.is_finite())
        .fold(60.0, f64::max);
    let pick = |k: &str| -> Vec<(f64, f64)> {
        samples.iter().map(|s| (num(s, "t_s"), num(s, k))).collect()
    };
    let rss = pick("rss_mb");
    let fds = pick("fds");
    let threads = pick("threads");
    let routes = [
        ("discover", BLUE),
        ("chat", GREEN),
        ("openai_stream", ORANGE),
    ];
    let p99: Vec<Vec<(f64, f64)>> = routes
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

    let max_of = |s: &[(f64, f64)]| {
        s.iter()
            .map(|p| p.1)
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max)
    };
    let mut canvas = Canvas::new();
    canvas.text(
        LEFT as i64,
        8,
        "OAPD SOAK: RSS, OPEN FILES, THREADS AND P99 OVER TIME; FAULTS MARKED",
        BLACK,
    );
    let panels = [
        Panel {
            top: 50,
            height: 170,
            max: nice_max(max_of(&rss)),
            t_max,
        },
        Panel {
            top: 260,
            height: 170,
            max: nice_max(max_of(&fds).max(max_of(&threads))),
            t_max,
        },
        Panel {
            top: 470,
            height: 170,
            max: nice_max(p99.iter().map(|s| max_of(s)).fold(0.0, f64::max)),
            t_max,
        },
    ];
    // Fault lines first, under the series.
    for panel in &panels {
        for (t, _) in &faults {
            let x = panel.x(*t);
            canvas.line(
                x,
                panel.top as i64,
                x,
                (panel.top + panel.height) as i64,
                PINK,
            );
        }
    }
    panels[0].frame(&mut canvas, "RSS (MB)");
    panels[0].series(&mut canvas, &rss, BLUE);
    panels[1].frame(&mut canvas, "OPEN FILES (BLUE), THREADS (GREEN)");
    panels[1].series(&mut canvas, &fds, BLUE);
    panels[1].series(&mut canvas, &threads, GREEN);
    panels[2].frame(
        &mut canvas,
        "P99 PER MINUTE (MS): DISCOVER (BLUE), CHAT (GREEN), STREAMED CHAT (ORANGE)",
    );
    for (series, (_, c)) in p99.iter().zip(routes) {
        panels[2].series(&mut canvas, series, c);
    }
    // Letters above the top panel, staggered so close faults stay legible.
    for (i, (t, kind)) in faults.iter().enumerate() {
        let letter = FAULTS.iter().find(|f| f.0 == kind).map_or('?', |f| f.1);
        let x = panels[0].x(*t);
        canvas.text(x - 2, 28 + (i % 2) as i64 * 9, &letter.to_string(), RED);
    }
    // The time axis under the last panel.
    let bottom = (panels[2].top + panels[2].height) as i64;
    let minutes_total = t_max / 60.0;
    let step = [1.0, 2.0, 5.0, 10.0, 15.0, 30.0]
        .into_iter()
        .find(|s| minutes_total / s <= 12.0)
        .unwrap_or(60.0);
    let mut m = 0.0;
    while m <= minutes_total + 1e-9 {
        let x = panels[2].x(m * 60.0);
        canvas.line(x, bottom, x, bottom + 4, BLACK);
        canvas.text(x - 3, bottom + 8, &format!("{m:.0}"), BLACK);
        m += step;
    }
    canvas.text(W as i64 / 2 - 20, bottom + 20, "MINUTES", BLACK);
    // Legend.
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
    std::fs::write(png, encode(&canvas.px)?)
        .with_context(|| format!("cannot write {}", png.display()))
}

/// A palette PNG of the canvas.
fn encode(px: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, W as u32, H as u32);
    encoder.set_color(png::ColorType::Indexed);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_palette(PALETTE.concat());
    let mut writer = encoder.write_header()?;
    writer.write_image_data(px)?;
    writer.finish()?;
    Ok(out)
}

/// A 5×7 glyph; unknown characters are blank.
fn glyph(c: char) -> [&'static str; 7] {
    match c {
        'A' => [
            " ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #",
        ],
        'B' => [
            "#### ", "#   #", "#   #", "#### ", "#   #", "#   #", "#### ",
        ],
        'C' => [
            " ### ", "#   #", "#    ", "#    ", "#    ", "#   #", " ### ",
        ],
        'D' => [
            "#### ", "#   #", "#   #", "#   #", "#   #", "#   #", "#### ",
        ],
        'E' => [
            "#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#####",
        ],
        'F' => [
            "#####", "#    ", "#    ", "#### ", "#    ", "#    ", "#    ",
        ],
        'G' => [
            " ### ", "#   #", "#    ", "# ###", "#   #", "#   #", " ####",
        ],
        'H' => [
            "#   #", "#   #", "#   #", "#####", "#   #", "#   #", "#   #",
        ],
        'I' => [
            " ### ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### ",
        ],
        'J' => [
            "  ###", "   # ", "   # ", "   # ", "   # ", "#  # ", " ##  ",
        ],
        'K' => [
            "#   #", "#  # ", "# #  ", "##   ", "# #  ", "#  # ", "#   #",
        ],
        'L' => [
            "#    ", "#    ", "#    ", "#    ", "#    ", "#    ", "#####",
        ],
        'M' => [
            "#   #", "## ##", "# # #", "# # #", "#   #", "#   #", "#   #",
        ],
        'N' => [
            "#   #", "#   #", "##  #", "# # #", "#  ##", "#   #", "#   #",
        ],
        'O' => [
            " ### ", "#   #", "#   #", "#   #", "#   #", "#   #", " ### ",
        ],
        'P' => [
            "#### ", "#   #", "#   #", "#### ", "#    ", "#    ", "#    ",
        ],
        'Q' => [
            " ### ", "#   #", "#   #", "#   #", "# # #", "#  # ", " ## #",
        ],
        'R' => [
            "#### ", "#   #", "#   #", "#### ", "# #  ", "#  # ", "#   #",
        ],
        'S' => [
            " ####", "#    ", "#    ", " ### ", "    #", "    #", "#### ",
        ],
        'T' => [
            "#####", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ", "  #  ",
        ],
        'U' => [
            "#   #", "#   #", "#   #", "#   #", "#   #", "#   #", " ### ",
        ],
        'V' => [
            "#   #", "#   #", "#   #", "#   #", "#   #", " # # ", "  #  ",
        ],
        'W' => [
            "#   #", "#   #", "#   #", "# # #", "# # #", "# # #", " # # ",
        ],
        'X' => [
            "#   #", "#   #", " # # ", "  #  ", " # # ", "#   #", "#   #",
        ],
        'Y' => [
            "#   #", "#   #", " # # ", "  #  ", "  #  ", "  #  ", "  #  ",
        ],
        'Z' => [
            "#####", "    #", "   # ", "  #  ", " #   ", "#    ", "#####",
        ],
        '0' => [
            " ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### ",
        ],
        '1' => [
            "  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### ",
        ],
        '2' => [
            " ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####",
        ],
        '3' => [
            "#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### ",
        ],
        '4' => [
            "   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # ",
        ],
        '5' => [
            "#####", "#    ", "#### ", "    #", "    #", "#   #", " ### ",
        ],
        '6' => [
            "  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### ",
        ],
        '7' => [
            "#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   ",
        ],
        '8' => [
            " ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### ",
        ],
        '9' => [
            " ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  ",
        ],
        '.' => [
            "     ", "     ", "     ", "     ", "     ", " ##  ", " ##  ",
        ],
        ',' => [
            "     ", "     ", "     ", "     ", " ##  ", "  #  ", " #   ",
        ],
        ':' => [
            "     ", " ##  ", " ##  ", "     ", " ##  ", " ##  ", "     ",
        ],
        ';' => [
            "     ", " ##  ", " ##  ", "     ", " ##  ", "  #  ", " #   ",
        ],
        '-' => [
            "     ", "     ", "     ", "#####", "     ", "     ", "     ",
        ],
        '+' => [
            "     ", "  #  ", "  #  ", "#####", "  #  ", "  #  ", "     ",
        ],
        '/' => [
            "     ", "    #", "   # ", "  #  ", " #   ", "#    ", "     ",
        ],
        '(' => [
            "   # ", "  #  ", " #   ", " #   ", " #   ", "  #  ", "   # ",
        ],
        ')' => [
            " #   ", "  #  ", "   # ", "   # ", "   # ", "  #  ", " #   ",
        ],
        '%' => [
            "##   ", "##  #", "   # ", "  #  ", " #   ", "#  ##", "   ##",
        ],
        '?' => [
            " ### ", "#   #", "    #", "   # ", "  #  ", "     ", "  #  ",
        ],
        _ => ["     "; 7],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_png_decodes_to_the_canvas_and_its_palette() {
        let px: Vec<u8> = (0..W * H)
            .map(|i| if i % 700 < 400 { WHITE } else { (i % 7) as u8 })
            .collect();
        let encoded = encode(&px).unwrap();
        assert!(encoded.len() < px.len() / 2, "{} bytes", encoded.len());
        let decoder = png::Decoder::new(std::io::Cursor::new(encoded));
        let mut reader = decoder.read_info().unwrap();
        assert_eq!(
            reader.info().palette.as_deref(),
            Some(PALETTE.concat().as_slice())
        );
        let mut decoded = vec![0; reader.output_buffer_size()];
        reader.next_frame(&mut decoded).unwrap();
        assert_eq!(decoded, px);
    }
}
