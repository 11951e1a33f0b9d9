//! Sentence embeddings for tool search: a sentence-transformers model
//! directory in the Hugging Face layout (`config.json`, `tokenizer.json`,
//! `model.safetensors`, the pooling config), loaded once and run on the
//! CPU (the BERT encoder of `bert.rs`, over ndarray's matrix
//! products), tokenized by the `tokenizers` crate. Pure Rust: nothing is
//! fetched at build or run time.
//!
//! [`Model::load`] checks the directory whole (every file it reads, the
//! tokenizer against the encoder) and names the file and the problem when
//! it refuses. [`Model::digest`] names the weights and settings, so that a
//! vector cached under one model is never read as another's.

use std::path::{Path, PathBuf};

use ndarray::{ArrayView2, Axis};
use sha2::{Digest as _, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

mod bert;
mod layout;

pub use bert::{Activation, Config as EncoderConfig};
pub use layout::{Layout, Pooling};

/// Most bytes of one text read: beyond what any model's token budget
/// reaches, so a huge input costs its tokenizer no more than this.
pub const MAX_TEXT_BYTES: usize = 8 * 1024;
/// Most texts run through the encoder at once.
const BATCH: usize = 32;

/// A model directory the registry cannot use.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", file.display())]
pub struct LoadError {
    /// The file at fault (or the directory).
    pub file: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

impl LoadError {
    fn new(file: &Path, problem: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            problem: problem.into(),
        }
    }
}

/// A text the model could not embed.
#[derive(Debug, thiserror::Error)]
#[error("embedding failed: {0}")]
pub struct EmbedError(String);

/// Which prompt a text is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A search's words.
    Query,
    /// What is searched: a tool's text.
    Document,
}

/// A loaded sentence-embedding model.
pub struct Model {
    encoder: bert::Bert,
    tokenizer: Tokenizer,
    layout: Layout,
    digest: String,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("layout", &self.layout)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl Model {
    /// Loads the model in `dir`.
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        if !dir.is_dir() {
            return Err(LoadError::new(dir, "not a directory"));
        }
        let layout = Layout::read(dir)?;
        let tokenizer_file = dir.join("tokenizer.json");
        let tokenizer_bytes = read(&tokenizer_file)?;
        let tokenizer = tokenizer(&tokenizer_file, &tokenizer_bytes, &layout)?;
        let weights_file = dir.join("model.safetensors");
        let weights = read(&weights_file)?;
        let mut digest = Sha256::new();
        for part in [
            read(&dir.join("config.json"))?.as_slice(),
            tokenizer_bytes.as_slice(),
            weights.as_slice(),
            format!(
                "{:?}",
                (&layout.pooling, layout.normalize, layout.max_tokens)
            )
            .as_bytes(),
            layout.query_prompt.as_bytes(),
            layout.document_prompt.as_bytes(),
        ] {
            digest.update((part.len() as u64).to_be_bytes());
            digest.update(part);
        }
        let digest = hex(&digest.finalize());
        let tensors = safetensors::SafeTensors::deserialize(&weights)
            .map_err(|e| LoadError::new(&weights_file, e.to_string()))?;
        let encoder = bert::Bert::load(&tensors, &layout.encoder).map_err(|e| {
            LoadError::new(&weights_file, format!("not this encoder's weights: {e}"))
        })?;
        Ok(Self {
            encoder,
            tokenizer,
            layout,
            digest,
        })
    }

    /// SHA-256 over the weights, the tokenizer and the settings, hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The length of its vectors.
    pub fn dimension(&self) -> usize {
        self.layout.encoder.hidden_size
    }

    /// Its settings.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// One vector per text, in order, as `role` reads them; each text cut
    /// at [`MAX_TEXT_BYTES`] and the model's token budget.
    pub fn embed(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<f32>>, EmbedError> {
        let prompt = match role {
            Role::Query => &self.layout.query_prompt,
            Role::Document => &self.layout.document_prompt,
        };
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            let inputs: Vec<String> = batch
                .iter()
                .map(|t| format!("{prompt}{}", clip(t, MAX_TEXT_BYTES)))
                .collect();
            out.extend(self.run(inputs).map_err(|e| EmbedError(e.to_string()))?);
        }
        Ok(out)
    }

    fn run(
        &self,
        inputs: Vec<String>,
    ) -> Result<Vec<Vec<f32>>, Box<dyn std::error::Error + Send + Sync>> {
        let encodings = self.tokenizer.encode_batch(inputs, true)?;
        let texts: Vec<bert::Tokens<'_>> = encodings
            .iter()
            .map(|e| bert::Tokens {
                ids: e.get_ids(),
                segments: e.get_type_ids(),
            })
            .collect();
        let (tokens, spans) = self.encoder.forward(&texts)?;
        Ok(spans
            .into_iter()
            .map(|span| {
                let rows = tokens.slice_axis(Axis(0), ndarray::Slice::from(span));
                pool(rows, self.layout.pooling, self.layout.normalize)
            })
            .collect())
    }
}

/// One text's vector from its tokens' (a row each).
fn pool(tokens: ArrayView2<'_, f32>, pooling: Pooling, normalize: bool) -> Vec<f32> {
    if tokens.nrows() == 0 {
        // A tokenizer without special tokens, given an empty text.
        return vec![0.0; tokens.ncols()];
    }
    let mut pooled = match pooling {
        Pooling::Mean => tokens
            .mean_axis(Axis(0))
            .map_or_else(|| vec![0.0; tokens.ncols()], |v| v.to_vec()),
        Pooling::Cls => tokens.row(0).to_vec(),
        Pooling::Max => tokens
            .fold_axis(Axis(0), f32::NEG_INFINITY, |&m, &v| m.max(v))
            .to_vec(),
    };
    if normalize {
        let norm = pooled.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        pooled.iter_mut().for_each(|v| *v /= norm);
    }
    pooled
}

/// The tokenizer in `bytes`, set to truncate at the model's budget and pad
/// a batch to its longest; refused if its vocabulary is not the encoder's.
fn tokenizer(file: &Path, bytes: &[u8], layout: &Layout) -> Result<Tokenizer, LoadError> {
    let mut tokenizer =
        Tokenizer::from_bytes(bytes).map_err(|e| LoadError::new(file, e.to_string()))?;
    let size = tokenizer.get_vocab_size(true);
    if size > layout.encoder.vocab_size {
        return Err(LoadError::new(
            file,
            format!(
                "its vocabulary has {size} tokens, the encoder's config.json {}: not this model's tokenizer",
                layout.encoder.vocab_size
            ),
        ));
    }
    // Each text runs at its own length (bert.rs): nothing is padded.
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length: layout.max_tokens,
            ..TruncationParams::default()
        }))
        .map_err(|e| LoadError::new(file, e.to_string()))?;
    Ok(tokenizer)
}

fn read(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|e| {
        LoadError::new(
            path,
            if e.kind() == std::io::ErrorKind::NotFound {
                "missing: a model directory needs it".to_owned()
            } else {
                e.to_string()
            },
        )
    })
}

/// `text` cut to at most `bytes` bytes, at a character boundary.
fn clip(text: &str, bytes: usize) -> &str {
    if text.len() <= bytes {
        return text;
    }
    let mut end = bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Cosine similarity of two vectors of one model (their dot product when
/// normalised); 0 for vectors of different lengths or of length 0.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut aa, mut bb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        dot / (aa.sqrt() * bb.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_takes_the_mean_the_first_token_or_the_largest() {
        let tokens =
            ndarray::Array2::from_shape_vec((2, 2), vec![3.0f32, -1.0, 1.0, 5.0]).expect("shape");
        let view = tokens.view();
        assert_eq!(pool(view, Pooling::Mean, false), [2.0, 2.0]);
        assert_eq!(pool(view, Pooling::Cls, false), [3.0, -1.0]);
        assert_eq!(pool(view, Pooling::Max, false), [3.0, 5.0]);
        let unit = pool(view, Pooling::Cls, true);
        assert!((unit[0] - 3.0 / 10f32.sqrt()).abs() < 1e-6, "{unit:?}");
        assert!((unit[1] + 1.0 / 10f32.sqrt()).abs() < 1e-6, "{unit:?}");
        let none = ndarray::Array2::<f32>::zeros((0, 2));
        assert_eq!(pool(none.view(), Pooling::Max, true), [0.0, 0.0]);
    }

    #[test]
    fn text_is_clipped_at_a_character_boundary() {
        assert_eq!(clip("héllo", 2), "h");
        assert_eq!(clip("héllo", 3), "hé");
        assert_eq!(clip("hi", 10), "hi");
    }

    #[test]
    fn cosine_is_one_for_the_same_direction_and_zero_for_mismatches() {
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), 0.0);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 2.0]), 0.0);
    }

    #[test]
    fn a_missing_directory_is_named() {
        let error = Model::load(Path::new("/nonexistent/model")).expect_err("refused");
        assert_eq!(error.to_string(), "/nonexistent/model: not a directory");
    }
}
