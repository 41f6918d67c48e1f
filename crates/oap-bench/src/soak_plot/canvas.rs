//! The plot's canvas: palette pixels, Bresenham lines, 5×7 text, a panel's
//! axes and series, and the palette PNG they are encoded into.

use super::font::glyph;

pub(super) const W: usize = 960;
pub(super) const H: usize = 760;
pub(super) const LEFT: usize = 70;
pub(super) const RIGHT: usize = 20;

// Palette indexes.
pub(super) const WHITE: u8 = 0;
pub(super) const BLACK: u8 = 1;
pub(super) const GREY: u8 = 2;
pub(super) const RED: u8 = 3;
pub(super) const BLUE: u8 = 4;
pub(super) const GREEN: u8 = 5;
pub(super) const ORANGE: u8 = 6;
pub(super) const PINK: u8 = 7;
pub(super) const PALETTE: [[u8; 3]; 8] = [
    [255, 255, 255],
    [0, 0, 0],
    [200, 200, 200],
    [200, 30, 30],
    [30, 80, 200],
    [20, 140, 40],
    [230, 130, 0],
    [250, 185, 185],
];

pub(super) struct Canvas {
    pub(super) px: Vec<u8>,
}

impl Canvas {
    pub(super) fn new() -> Self {
        Canvas {
            px: vec![WHITE; W * H],
        }
    }

    pub(super) fn set(&mut self, x: i64, y: i64, c: u8) {
        if x >= 0 && y >= 0 && (x as usize) < W && (y as usize) < H {
            self.px[y as usize * W + x as usize] = c;
        }
    }

    pub(super) fn line(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: u8) {
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

    pub(super) fn thick(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: u8) {
        self.line(x0, y0, x1, y1, c);
        self.line(x0, y0 + 1, x1, y1 + 1, c);
    }

    pub(super) fn text(&mut self, x: i64, y: i64, s: &str, c: u8) {
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
pub(super) struct Panel {
    pub(super) top: usize,
    pub(super) height: usize,
    pub(super) max: f64,
    pub(super) t_max: f64,
}

impl Panel {
    pub(super) fn x(&self, t: f64) -> i64 {
        (LEFT as f64 + t / self.t_max * (W - LEFT - RIGHT) as f64) as i64
    }

    pub(super) fn y(&self, v: f64) -> i64 {
        let f = (v / self.max).clamp(0.0, 1.0);
        (self.top as f64 + self.height as f64 * (1.0 - f)) as i64
    }

    pub(super) fn frame(&self, canvas: &mut Canvas, title: &str) {
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

    pub(super) fn series(&self, canvas: &mut Canvas, points: &[(f64, f64)], c: u8) {
        for pair in points.windows(2) {
            let ((t0, v0), (t1, v1)) = (pair[0], pair[1]);
            // No line across a gap (the daemon down, rebuilding).
            if v0.is_finite() && v1.is_finite() && t1 - t0 <= 90.0 {
                canvas.thick(self.x(t0), self.y(v0), self.x(t1), self.y(v1), c);
            }
        }
    }
}

pub(super) fn short(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

pub(super) fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let v = v * 1.1;
    let step = 10f64.powf(v.log10().floor());
    (v / step).ceil() * step
}

/// A palette PNG of the canvas.
pub(super) fn encode(px: &[u8]) -> Result<Vec<u8>, png::EncodingError> {
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
