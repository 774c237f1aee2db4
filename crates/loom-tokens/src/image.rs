//! Image tokens by the providers' published rules, and image sizes read from `data:` URLs.
//!
//! Rules (provider documentation on vision costs):
//! - OpenAI tile (GPT-4o, GPT-4.1, GPT-5, o1/o3): `low` detail costs `base`. Otherwise the image
//!   is scaled to fit 2048×2048, then so that its short side is at most 768, and costs
//!   `base + per_tile × ceil(w/512) × ceil(h/512)`.
//! - OpenAI patch (GPT-4.1-mini/nano, GPT-5-mini/nano, o4-mini): 32×32 patches, capped at 1536
//!   (the image is scaled down to fit), times a model multiplier.
//! - Anthropic: images with a long side over 1568 px or over about 1,600 tokens are scaled
//!   down; then `w × h / 750` tokens.
//! - Gemini (2.0 and later): 258 tokens when both sides are at most 384 px, else 258 per
//!   768×768 tile.
//!
//! A remote image (`https://…`) has no size Loom can read without fetching it: it is counted as
//! a large image (2048×2048), so the estimate errs towards fitting the budget.

use base64::Engine as _;

use crate::registry::TokenizerSpec;

/// Size assumed for an image whose size cannot be read.
pub const UNKNOWN_SIZE: (u32, u32) = (2048, 2048);

/// How a model counts an image.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ImageRule {
    /// OpenAI's tile rule.
    OpenAiTile {
        /// Tokens for any image (and the whole cost at `low` detail).
        base: u64,
        /// Tokens per 512×512 tile.
        per_tile: u64,
    },
    /// OpenAI's 32-pixel patch rule.
    OpenAiPatch {
        /// Tokens per patch.
        multiplier: f64,
    },
    /// Anthropic's pixel-area rule.
    Anthropic,
    /// Gemini's 768-pixel tile rule.
    Gemini,
}

impl ImageRule {
    /// The rule a tokenizer family usually goes with, for registry entries that name none.
    pub fn default_for(tokenizer: &TokenizerSpec) -> Self {
        match tokenizer {
            TokenizerSpec::Bpe(_) => Self::OpenAiTile {
                base: 85,
                per_tile: 170,
            },
            // Estimated models are mostly Claude and Gemini; Anthropic's rule is the larger of
            // the two for common sizes, the safe side.
            TokenizerSpec::Estimate | TokenizerSpec::File(_) => Self::Anthropic,
        }
    }

    /// Tokens for an image of `width`×`height` pixels; `detail` is OpenAI's hint.
    pub fn tokens(&self, width: u32, height: u32, detail: Option<&str>) -> u64 {
        let (w, h) = (f64::from(width.max(1)), f64::from(height.max(1)));
        match *self {
            Self::OpenAiTile { base, per_tile } => {
                if detail == Some("low") {
                    return base;
                }
                let (w, h) = scale_to_fit(w, h, 2048.0, 2048.0);
                let short = w.min(h);
                let (w, h) = if short > 768.0 {
                    (w * 768.0 / short, h * 768.0 / short)
                } else {
                    (w, h)
                };
                let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
                base + per_tile * to_u64(tiles)
            }
            Self::OpenAiPatch { multiplier } => {
                const CAP: f64 = 1536.0;
                let mut patches = (w / 32.0).ceil() * (h / 32.0).ceil();
                if patches > CAP {
                    // OpenAI's published procedure: shrink so the patch grid fits the cap,
                    // then shrink a little more so one side is a whole number of patches.
                    let shrink = (CAP * 32.0 * 32.0 / (w * h)).sqrt();
                    let (sw, sh) = (w * shrink / 32.0, h * shrink / 32.0);
                    let shrink = shrink * (sw.floor() / sw).min(sh.floor() / sh);
                    patches = ((w * shrink) / 32.0).ceil() * ((h * shrink) / 32.0).ceil();
                    patches = patches.min(CAP);
                }
                to_u64((patches * multiplier).ceil())
            }
            Self::Anthropic => {
                let (w, h) = scale_to_fit(w, h, 1568.0, 1568.0);
                // Larger images are scaled down to about 1,600 tokens.
                to_u64(((w * h).min(1600.0 * 750.0) / 750.0).ceil())
            }
            Self::Gemini => {
                if w <= 384.0 && h <= 384.0 {
                    258
                } else {
                    258 * to_u64((w / 768.0).ceil() * (h / 768.0).ceil())
                }
            }
        }
    }

    /// Tokens for an image given by URL: its size is read from a `data:` URL, else assumed
    /// large (see the module docs).
    pub fn tokens_for_url(&self, url: &str, detail: Option<&str>) -> u64 {
        let (w, h) = data_url_size(url).unwrap_or(UNKNOWN_SIZE);
        self.tokens(w, h, detail)
    }
}

fn scale_to_fit(w: f64, h: f64, max_w: f64, max_h: f64) -> (f64, f64) {
    let s = (max_w / w).min(max_h / h).min(1.0);
    (w * s, h * s)
}

/// Saturating float → integer for token counts (always finite and non-negative here).
fn to_u64(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        // Image token counts are far below 2^53, where the cast is exact.
        x.min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// Width and height of a base64 `data:` URL image (PNG, JPEG, GIF, WebP), if readable.
pub fn data_url_size(url: &str) -> Option<(u32, u32)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, payload) = rest.split_once(',')?;
    if !meta.ends_with(";base64") {
        return None;
    }
    // Headers sit at the start; JPEG's frame header may follow metadata, so decode generously
    // but never the whole of a huge image.
    let take = payload.len().min(256 * 1024) / 4 * 4;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(payload.get(..take)?)
        .ok()?;
    image_size(&bytes)
}

/// Width and height from an image file's header.
pub fn image_size(b: &[u8]) -> Option<(u32, u32)> {
    let be32 = |i: usize| Some(u32::from_be_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let be16 = |i: usize| {
        Some(u32::from(u16::from_be_bytes(
            b.get(i..i + 2)?.try_into().ok()?,
        )))
    };
    let le16 = |i: usize| {
        Some(u32::from(u16::from_le_bytes(
            b.get(i..i + 2)?.try_into().ok()?,
        )))
    };
    let le24 = |i: usize| {
        let s = b.get(i..i + 3)?;
        Some(u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16)
    };
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some((be32(16)?, be32(20)?));
    }
    if b.starts_with(b"GIF8") {
        return Some((le16(6)?, le16(8)?));
    }
    if b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP") {
        return match b.get(12..16)? {
            b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
            b"VP8 " => Some((le16(26)? & 0x3fff, le16(28)? & 0x3fff)),
            b"VP8L" => {
                let bits = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
                Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
            }
            _ => None,
        };
    }
    if b.starts_with(&[0xff, 0xd8]) {
        // Walk the JPEG segments to the first start-of-frame marker.
        let mut i = 2;
        while i + 9 < b.len() {
            if b[i] != 0xff {
                return None;
            }
            let marker = b[i + 1];
            let len = usize::try_from(be16(i + 2)?).ok()?;
            let is_sof = matches!(marker, 0xc0..=0xcf) && !matches!(marker, 0xc4 | 0xc8 | 0xcc);
            if is_sof {
                return Some((be16(i + 7)?, be16(i + 5)?));
            }
            i += 2 + len;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const TILE: ImageRule = ImageRule::OpenAiTile {
        base: 85,
        per_tile: 170,
    };

    #[test]
    fn openai_tile_matches_published_examples() {
        // OpenAI's vision guide: 1024×1024 high → 765; 2048×4096 high → 1105; low → 85.
        assert_eq!(TILE.tokens(1024, 1024, Some("high")), 765);
        assert_eq!(TILE.tokens(2048, 4096, Some("high")), 1105);
        assert_eq!(TILE.tokens(4096, 8192, Some("low")), 85);
        assert_eq!(TILE.tokens(100, 100, None), 85 + 170);
    }

    #[test]
    fn openai_patch_matches_published_examples() {
        // OpenAI's guide: 1024×1024 → 1024 patches; 1800×2400 → capped to 1452 patches.
        let one = ImageRule::OpenAiPatch { multiplier: 1.0 };
        assert_eq!(one.tokens(1024, 1024, None), 1024);
        assert_eq!(one.tokens(1800, 2400, None), 1452);
        let mini = ImageRule::OpenAiPatch { multiplier: 1.62 };
        assert_eq!(mini.tokens(1024, 1024, None), 1659);
    }

    #[test]
    fn anthropic_area_rule() {
        // Anthropic's table: 1092×1092 ≈ 1590 tokens; 200×200 ≈ 54.
        assert_eq!(ImageRule::Anthropic.tokens(1092, 1092, None), 1590);
        assert_eq!(ImageRule::Anthropic.tokens(200, 200, None), 54);
        assert_eq!(ImageRule::Anthropic.tokens(8000, 8000, None), 1600);
    }

    #[test]
    fn gemini_tiles() {
        assert_eq!(ImageRule::Gemini.tokens(384, 300, None), 258);
        assert_eq!(ImageRule::Gemini.tokens(1000, 700, None), 258 * 2);
    }

    #[test]
    fn sizes_from_headers() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend(640u32.to_be_bytes());
        png.extend(480u32.to_be_bytes());
        assert_eq!(image_size(&png), Some((640, 480)));
        let gif = b"GIF89a\x20\x03\x58\x02";
        assert_eq!(image_size(gif), Some((800, 600)));
        let jpeg = [
            0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0x00, 0x00, // APP0, 2 bytes of payload
            0xff, 0xc0, 0x00, 0x11, 0x08, 0x01, 0xe0, 0x02, 0x80, 0x03, 0, 0, 0, 0,
        ];
        assert_eq!(image_size(&jpeg), Some((640, 480)));
        let url = format!(
            "data:image/png;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&png)
        );
        assert_eq!(data_url_size(&url), Some((640, 480)));
        assert_eq!(data_url_size("https://example.com/a.png"), None);
        assert_eq!(image_size(b"not an image"), None);
    }

    #[test]
    fn unknown_size_counts_as_large() {
        assert_eq!(TILE.tokens_for_url("https://example.com/x.png", None), 765);
        assert_eq!(
            TILE.tokens_for_url("https://example.com/x.png", Some("low")),
            85
        );
    }
}
