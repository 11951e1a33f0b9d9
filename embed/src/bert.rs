//! A BERT encoder (the family of MiniLM, BGE, E5 and GTE's small models):
//! the embeddings, then `num_hidden_layers` of self-attention and
//! feed-forward, each with its residual and layer norm, as Hugging Face's
//! `BertModel` computes them (post-norm, absolute positions). Only the
//! encoder: sentence-transformers pools its token vectors itself, so the
//! pooler and the heads are not loaded.
//!
//! Each text runs at its own length: its tokens attend to its tokens only,
//! so nothing is padded, and a text's vectors are the same alone or in a
//! batch. The matrix products are ndarray's (matrixmultiply's kernels,
//! chosen for the CPU at run time) over every token of a batch at once.

use std::ops::Range;

use ndarray::linalg::general_mat_mul;
use ndarray::{Array1, Array2, ArrayView2, ArrayViewMut2, Axis, Slice};
use safetensors::{Dtype, SafeTensors};
use serde::Deserialize;

/// An encoder's `config.json`: the fields the forward pass reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Config {
    /// Tokens of the vocabulary.
    pub vocab_size: usize,
    /// Width of every token's vector.
    pub hidden_size: usize,
    /// Encoder layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer; divides `hidden_size`.
    pub num_attention_heads: usize,
    /// Width of the feed-forward's inner layer.
    pub intermediate_size: usize,
    /// The feed-forward's activation.
    #[serde(default = "gelu")]
    pub hidden_act: Activation,
    /// Positions the model was trained on: the longest input.
    pub max_position_embeddings: usize,
    /// Segment types (`token_type_ids`).
    #[serde(default = "two")]
    pub type_vocab_size: usize,
    /// The layer norms' epsilon.
    #[serde(default = "epsilon")]
    pub layer_norm_eps: f64,
    /// Only `absolute` is run.
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
}

/// The feed-forward's activation, by its name in `config.json`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub enum Activation {
    /// `gelu`: exact, by the error function.
    Gelu,
    /// `gelu_new` and `gelu_pytorch_tanh`: the tanh approximation.
    GeluTanh,
    /// `relu`.
    Relu,
    /// Any other name, which [`Config::problem`] refuses.
    Unsupported(String),
}

impl From<String> for Activation {
    fn from(name: String) -> Self {
        match name.as_str() {
            "gelu" => Self::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" => Self::GeluTanh,
            "relu" => Self::Relu,
            _ => Self::Unsupported(name),
        }
    }
}

impl Activation {
    fn apply(&self, x: &mut Array2<f32>) {
        match self {
            Self::Gelu => x.mapv_inplace(|v| {
                let v = f64::from(v);
                (0.5 * v * (1.0 + libm::erf(v * std::f64::consts::FRAC_1_SQRT_2))) as f32
            }),
            Self::GeluTanh => x.mapv_inplace(|v| {
                const SQRT_2_OVER_PI: f32 = 0.797_884_6;
                0.5 * v * (1.0 + (SQRT_2_OVER_PI * (v + 0.044_715 * v * v * v)).tanh())
            }),
            Self::Relu => x.mapv_inplace(|v| v.max(0.0)),
            // Refused when the configuration is read.
            Self::Unsupported(_) => {}
        }
    }
}

fn gelu() -> Activation {
    Activation::Gelu
}
fn two() -> usize {
    2
}
fn epsilon() -> f64 {
    1e-12
}
fn absolute() -> String {
    "absolute".to_owned()
}

impl Config {
    /// What keeps this configuration from running, if anything.
    pub fn problem(&self) -> Option<String> {
        if self.position_embedding_type != "absolute" {
            return Some(format!(
                "position_embedding_type {:?} is not supported (absolute)",
                self.position_embedding_type
            ));
        }
        if self.num_attention_heads == 0
            || !self.hidden_size.is_multiple_of(self.num_attention_heads)
        {
            return Some(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            ));
        }
        if let Activation::Unsupported(name) = &self.hidden_act {
            return Some(format!(
                "hidden_act {name:?} is not a BERT activation (gelu, gelu_new, gelu_pytorch_tanh, relu)"
            ));
        }
        if self.hidden_size == 0 || self.num_hidden_layers == 0 || self.vocab_size == 0 {
            return Some("hidden_size, num_hidden_layers and vocab_size must not be 0".to_owned());
        }
        None
    }
}

/// One text's tokens, as the tokenizer gives them.
pub(crate) struct Tokens<'a> {
    pub(crate) ids: &'a [u32],
    pub(crate) segments: &'a [u32],
}

/// The encoder, its weights loaded as `f32`.
#[derive(Debug)]
pub(crate) struct Bert {
    words: Array2<f32>,
    positions: Array2<f32>,
    segments: Array2<f32>,
    norm: LayerNorm,
    layers: Vec<Layer>,
}

impl Bert {
    /// The encoder of `config` from `weights`, whose names are Hugging
    /// Face's (`embeddings.*`, `encoder.layer.N.*`), at the root or under
    /// `bert.`; every tensor's shape is checked against `config`.
    pub(crate) fn load(weights: &SafeTensors<'_>, config: &Config) -> Result<Self, String> {
        let weights = Weights::new(weights);
        let hidden = config.hidden_size;
        let eps = config.layer_norm_eps as f32;
        Ok(Self {
            words: weights.matrix(
                "embeddings.word_embeddings.weight",
                config.vocab_size,
                hidden,
            )?,
            positions: weights.matrix(
                "embeddings.position_embeddings.weight",
                config.max_position_embeddings,
                hidden,
            )?,
            segments: weights.matrix(
                "embeddings.token_type_embeddings.weight",
                config.type_vocab_size,
                hidden,
            )?,
            norm: LayerNorm::load(&weights, "embeddings.LayerNorm", hidden, eps)?,
            layers: (0..config.num_hidden_layers)
                .map(|i| Layer::load(&weights, &format!("encoder.layer.{i}"), config))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Every token's vector, one row per token of every text in turn, and
    /// the rows of each text.
    pub(crate) fn forward(
        &self,
        texts: &[Tokens<'_>],
    ) -> Result<(Array2<f32>, Vec<Range<usize>>), String> {
        let mut spans = Vec::with_capacity(texts.len());
        let mut start = 0;
        for text in texts {
            if text.segments.len() != text.ids.len() {
                return Err("a text's segments and tokens differ in number".to_owned());
            }
            spans.push(start..start + text.ids.len());
            start += text.ids.len();
        }
        let mut hidden = Array2::zeros((start, self.words.ncols()));
        for (text, span) in texts.iter().zip(&spans) {
            for (position, (&id, &segment)) in text.ids.iter().zip(text.segments).enumerate() {
                let mut row = hidden.row_mut(span.start + position);
                row += &lookup(&self.words, id as usize, "token")?;
                row += &lookup(&self.positions, position, "position")?;
                row += &lookup(&self.segments, segment as usize, "segment")?;
            }
        }
        self.norm.apply(&mut hidden);
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &spans);
        }
        Ok((hidden, spans))
    }
}

/// Row `index` of an embedding table, or which input was out of its range.
fn lookup<'a>(
    table: &'a Array2<f32>,
    index: usize,
    what: &str,
) -> Result<ndarray::ArrayView1<'a, f32>, String> {
    if index >= table.nrows() {
        return Err(format!(
            "{what} {index} is beyond the model's {}",
            table.nrows()
        ));
    }
    Ok(table.row(index))
}

/// One encoder layer: self-attention, then the feed-forward.
#[derive(Debug)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    inner: Linear,
    activation: Activation,
    out: Linear,
    out_norm: LayerNorm,
    heads: usize,
}

impl Layer {
    fn load(weights: &Weights<'_, '_>, prefix: &str, config: &Config) -> Result<Self, String> {
        let (hidden, inner) = (config.hidden_size, config.intermediate_size);
        let eps = config.layer_norm_eps as f32;
        let linear =
            |name: &str, from, to| Linear::load(weights, &format!("{prefix}.{name}"), from, to);
        let norm = |name: &str| LayerNorm::load(weights, &format!("{prefix}.{name}"), hidden, eps);
        Ok(Self {
            query: linear("attention.self.query", hidden, hidden)?,
            key: linear("attention.self.key", hidden, hidden)?,
            value: linear("attention.self.value", hidden, hidden)?,
            attention_out: linear("attention.output.dense", hidden, hidden)?,
            attention_norm: norm("attention.output.LayerNorm")?,
            inner: linear("intermediate.dense", hidden, inner)?,
            activation: config.hidden_act.clone(),
            out: linear("output.dense", inner, hidden)?,
            out_norm: norm("output.LayerNorm")?,
            heads: config.num_attention_heads,
        })
    }

    fn forward(&self, hidden: &Array2<f32>, spans: &[Range<usize>]) -> Array2<f32> {
        let mut attended = self
            .attention_out
            .forward(&self.attend(hidden, spans).view());
        attended += hidden;
        self.attention_norm.apply(&mut attended);
        let mut inner = self.inner.forward(&attended.view());
        self.activation.apply(&mut inner);
        let mut out = self.out.forward(&inner.view());
        out += &attended;
        self.out_norm.apply(&mut out);
        out
    }

    /// Multi-head scaled dot-product attention over the layer's input,
    /// within each text.
    fn attend(&self, hidden: &Array2<f32>, spans: &[Range<usize>]) -> Array2<f32> {
        let view = hidden.view();
        let (query, key, value) = (
            self.query.forward(&view),
            self.key.forward(&view),
            self.value.forward(&view),
        );
        let head = hidden.ncols() / self.heads;
        let scale = 1.0 / (head as f32).sqrt();
        let mut context = Array2::zeros(hidden.raw_dim());
        for span in spans {
            let tokens = span.len();
            let mut scores = Array2::<f32>::zeros((tokens, tokens));
            for h in 0..self.heads {
                let (rows, cols) = (span.clone(), h * head..(h + 1) * head);
                let q = block(&query, &rows, &cols);
                let k = block(&key, &rows, &cols);
                general_mat_mul(scale, &q, &k.t(), 0.0, &mut scores);
                softmax_rows(&mut scores);
                let mut out = block_mut(&mut context, &rows, &cols);
                general_mat_mul(1.0, &scores, &block(&value, &rows, &cols), 0.0, &mut out);
            }
        }
        context
    }
}

/// The `rows` × `cols` block of `matrix`.
fn block<'a>(
    matrix: &'a Array2<f32>,
    rows: &Range<usize>,
    cols: &Range<usize>,
) -> ArrayView2<'a, f32> {
    matrix
        .slice_axis(Axis(0), Slice::from(rows.clone()))
        .slice_axis_move(Axis(1), Slice::from(cols.clone()))
}

fn block_mut<'a>(
    matrix: &'a mut Array2<f32>,
    rows: &Range<usize>,
    cols: &Range<usize>,
) -> ArrayViewMut2<'a, f32> {
    matrix
        .slice_axis_mut(Axis(0), Slice::from(rows.clone()))
        .slice_axis_move(Axis(1), Slice::from(cols.clone()))
}

/// Each row made a distribution: `exp(x - max)`, summing to 1.
fn softmax_rows(scores: &mut Array2<f32>) {
    for mut row in scores.rows_mut() {
        let max = row.fold(f32::NEG_INFINITY, |m, &v| m.max(v));
        row.mapv_inplace(|v| (v - max).exp());
        let sum = row.sum();
        row /= sum;
    }
}

/// `x · weightᵀ + bias`, `weight` as PyTorch keeps it: `(out, in)`.
#[derive(Debug)]
struct Linear {
    weight: Array2<f32>,
    bias: Array1<f32>,
}

impl Linear {
    fn load(
        weights: &Weights<'_, '_>,
        prefix: &str,
        from: usize,
        to: usize,
    ) -> Result<Self, String> {
        Ok(Self {
            weight: weights.matrix(&format!("{prefix}.weight"), to, from)?,
            bias: weights.vector(&format!("{prefix}.bias"), to)?,
        })
    }

    fn forward(&self, x: &ArrayView2<'_, f32>) -> Array2<f32> {
        let mut y = Array2::zeros((x.nrows(), self.weight.nrows()));
        y += &self.bias;
        general_mat_mul(1.0, x, &self.weight.t(), 1.0, &mut y);
        y
    }
}

/// Normalises each row to mean 0 and variance 1, then scales and shifts it.
#[derive(Debug)]
struct LayerNorm {
    weight: Array1<f32>,
    bias: Array1<f32>,
    eps: f32,
}

impl LayerNorm {
    /// Named `weight`/`bias`, or `gamma`/`beta` as older checkpoints have it.
    fn load(
        weights: &Weights<'_, '_>,
        prefix: &str,
        size: usize,
        eps: f32,
    ) -> Result<Self, String> {
        let (weight, bias) = if weights.contains(&format!("{prefix}.weight")) {
            ("weight", "bias")
        } else {
            ("gamma", "beta")
        };
        Ok(Self {
            weight: weights.vector(&format!("{prefix}.{weight}"), size)?,
            bias: weights.vector(&format!("{prefix}.{bias}"), size)?,
            eps,
        })
    }

    fn apply(&self, x: &mut Array2<f32>) {
        for mut row in x.rows_mut() {
            let n = row.len() as f32;
            let mean = row.sum() / n;
            let variance = row.fold(0.0, |sum, &v| sum + (v - mean) * (v - mean)) / n;
            let scale = 1.0 / (variance + self.eps).sqrt();
            ndarray::Zip::from(&mut row)
                .and(&self.weight)
                .and(&self.bias)
                .for_each(|v, &w, &b| *v = (*v - mean) * scale * w + b);
        }
    }
}

/// The tensors of a weights file by their names, which may all be under
/// `bert.` (a checkpoint of `BertForMaskedLM` and the like).
struct Weights<'a, 'data> {
    file: &'a SafeTensors<'data>,
    prefix: &'static str,
}

impl<'a, 'data> Weights<'a, 'data> {
    fn new(file: &'a SafeTensors<'data>) -> Self {
        let prefix = if file.tensor("embeddings.word_embeddings.weight").is_ok() {
            ""
        } else {
            "bert."
        };
        Self { file, prefix }
    }

    fn contains(&self, name: &str) -> bool {
        self.file.tensor(&format!("{}{name}", self.prefix)).is_ok()
    }

    fn vector(&self, name: &str, len: usize) -> Result<Array1<f32>, String> {
        Ok(Array1::from_vec(self.values(name, &[len])?))
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Array2<f32>, String> {
        Array2::from_shape_vec((rows, cols), self.values(name, &[rows, cols])?)
            .map_err(|e| format!("{}{name}: {e}", self.prefix))
    }

    /// The tensor `name` of `shape`, its values as `f32` whatever their
    /// floating-point type in the file.
    fn values(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let name = format!("{}{name}", self.prefix);
        let tensor = self
            .file
            .tensor(&name)
            .map_err(|_| format!("cannot find tensor {name}"))?;
        if tensor.shape() != shape {
            return Err(format!(
                "{name} has the shape {:?}, the configuration says {shape:?}",
                tensor.shape()
            ));
        }
        let bytes = tensor.data();
        Ok(match tensor.dtype() {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::F64 => bytes
                .chunks_exact(8)
                .map(|b| {
                    f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32
                })
                .collect(),
            other => return Err(format!("{name} holds {other:?}, not floating point")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_are_read_by_their_hugging_face_names() {
        let read = |name: &str| Activation::from(name.to_owned());
        assert_eq!(read("gelu"), Activation::Gelu);
        assert_eq!(read("gelu_new"), Activation::GeluTanh);
        assert_eq!(read("gelu_pytorch_tanh"), Activation::GeluTanh);
        assert_eq!(read("relu"), Activation::Relu);
        assert_eq!(read("swiglu"), Activation::Unsupported("swiglu".to_owned()));
    }

    #[test]
    fn activations_compute_what_pytorch_does() {
        let inputs = Array2::from_shape_vec((1, 3), vec![-1.0f32, 0.0, 1.0]).expect("shape");
        // torch.nn.functional.gelu(x) and gelu(x, approximate="tanh").
        for (activation, expected) in [
            (Activation::Gelu, [-0.158_655_26, 0.0, 0.841_344_7]),
            (Activation::GeluTanh, [-0.158_808, 0.0, 0.841_192]),
            (Activation::Relu, [0.0, 0.0, 1.0]),
        ] {
            let mut x = inputs.clone();
            activation.apply(&mut x);
            for (got, want) in x.iter().zip(expected) {
                assert!(
                    (got - want).abs() < 1e-5,
                    "{activation:?}: {got} against {want}"
                );
            }
        }
    }

    #[test]
    fn softmax_rows_sum_to_one_and_keep_their_order() {
        let mut scores =
            Array2::from_shape_vec((2, 3), vec![1.0f32, 2.0, 3.0, 1000.0, 0.0, -1000.0])
                .expect("shape");
        softmax_rows(&mut scores);
        for row in scores.rows() {
            assert!((row.sum() - 1.0).abs() < 1e-6);
        }
        assert!(scores[[0, 0]] < scores[[0, 1]] && scores[[0, 1]] < scores[[0, 2]]);
        assert_eq!(scores[[1, 0]], 1.0, "no overflow on large scores");
    }
}
