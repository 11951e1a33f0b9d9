//! A BERT encoder (the family of MiniLM, BGE, E5 and GTE's small models)
//! on candle's tensors: the embeddings, then `num_hidden_layers` of
//! self-attention and feed-forward, each with its residual and layer norm,
//! as Hugging Face's `BertModel` computes them (post-norm, absolute
//! positions). Only the encoder: sentence-transformers pools its token
//! vectors itself, so the pooler and the heads are not loaded.

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::{Activation, Embedding, LayerNorm, Linear, VarBuilder};
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
    /// The feed-forward's activation (`gelu`, `gelu_new`, `relu`, ...).
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
    /// The padding token.
    #[serde(default)]
    pub pad_token_id: usize,
    /// Only `absolute` is run.
    #[serde(default = "absolute")]
    pub position_embedding_type: String,
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
        if !matches!(
            self.hidden_act,
            Activation::Gelu | Activation::NewGelu | Activation::GeluPytorchTanh | Activation::Relu
        ) {
            return Some(format!(
                "hidden_act {:?} is not a BERT activation (gelu, gelu_new, gelu_pytorch_tanh, relu)",
                self.hidden_act
            ));
        }
        if self.hidden_size == 0 || self.num_hidden_layers == 0 || self.vocab_size == 0 {
            return Some("hidden_size, num_hidden_layers and vocab_size must not be 0".to_owned());
        }
        None
    }
}

/// The encoder, its weights loaded.
#[derive(Debug)]
pub(crate) struct Bert {
    words: Embedding,
    positions: Embedding,
    segments: Embedding,
    norm: LayerNorm,
    layers: Vec<Layer>,
}

impl Bert {
    /// The encoder of `config` from `vb`, whose names are Hugging Face's
    /// (`embeddings.*`, `encoder.layer.N.*`), at the root or under `bert.`.
    pub(crate) fn load(vb: VarBuilder<'_>, config: &Config) -> Result<Self> {
        let vb = if vb.contains_tensor("embeddings.word_embeddings.weight") {
            vb
        } else {
            vb.pp("bert")
        };
        let hidden = config.hidden_size;
        let embeddings = vb.pp("embeddings");
        let embedding = |name: &str, rows: usize| {
            candle_nn::embedding(rows, hidden, embeddings.pp(name))
                .map_err(|e| e.context(name.to_owned()))
        };
        Ok(Self {
            words: embedding("word_embeddings", config.vocab_size)?,
            positions: embedding("position_embeddings", config.max_position_embeddings)?,
            segments: embedding("token_type_embeddings", config.type_vocab_size)?,
            norm: layer_norm(hidden, config.layer_norm_eps, embeddings.pp("LayerNorm"))?,
            layers: (0..config.num_hidden_layers)
                .map(|i| Layer::load(vb.pp(format!("encoder.layer.{i}")), config))
                .collect::<Result<_>>()?,
        })
    }

    /// Every token's vector, `(batch, tokens, hidden)`, of `ids` and
    /// `segments` (`(batch, tokens)`, u32); `mask` is 1 for a token, 0 for
    /// padding, which no token attends to.
    pub(crate) fn forward(&self, ids: &Tensor, segments: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let tokens = ids.dim(1)?;
        let positions = Tensor::arange(0u32, tokens as u32, ids.device())?.unsqueeze(0)?;
        let embedded = self
            .words
            .forward(ids)?
            .broadcast_add(&self.positions.forward(&positions)?)?
            .add(&self.segments.forward(segments)?)?;
        let mut hidden = self.norm.forward(&embedded)?;
        // 0 where a token may be attended to, very negative on padding:
        // added to the scores before the softmax, `(batch, 1, 1, tokens)`.
        let bias = ((mask.to_dtype(DType::F32)? - 1.0)? * f64::from(f32::MAX))?
            .unsqueeze(1)?
            .unsqueeze(1)?;
        for layer in &self.layers {
            hidden = layer.forward(&hidden, &bias)?;
        }
        Ok(hidden)
    }
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
    fn load(vb: VarBuilder<'_>, config: &Config) -> Result<Self> {
        let (hidden, inner) = (config.hidden_size, config.intermediate_size);
        let eps = config.layer_norm_eps;
        let attention = vb.pp("attention");
        Ok(Self {
            query: candle_nn::linear(hidden, hidden, attention.pp("self.query"))?,
            key: candle_nn::linear(hidden, hidden, attention.pp("self.key"))?,
            value: candle_nn::linear(hidden, hidden, attention.pp("self.value"))?,
            attention_out: candle_nn::linear(hidden, hidden, attention.pp("output.dense"))?,
            attention_norm: layer_norm(hidden, eps, attention.pp("output.LayerNorm"))?,
            inner: candle_nn::linear(hidden, inner, vb.pp("intermediate.dense"))?,
            activation: config.hidden_act,
            out: candle_nn::linear(inner, hidden, vb.pp("output.dense"))?,
            out_norm: layer_norm(hidden, eps, vb.pp("output.LayerNorm"))?,
            heads: config.num_attention_heads,
        })
    }

    fn forward(&self, hidden: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let attended = self.attend(hidden, bias)?;
        let attended = self
            .attention_norm
            .forward(&(self.attention_out.forward(&attended)? + hidden)?)?;
        let inner = self.activation.forward(&self.inner.forward(&attended)?)?;
        self.out_norm
            .forward(&(self.out.forward(&inner)? + attended)?)
    }

    /// Multi-head scaled dot-product attention over the layer's input.
    fn attend(&self, hidden: &Tensor, bias: &Tensor) -> Result<Tensor> {
        let (batch, tokens, width) = hidden.dims3()?;
        let head = width / self.heads;
        // (batch, tokens, width) -> (batch, heads, tokens, head)
        let split = |t: Tensor| {
            t.reshape((batch, tokens, self.heads, head))?
                .transpose(1, 2)?
                .contiguous()
        };
        let query = split(self.query.forward(hidden)?)?;
        let key = split(self.key.forward(hidden)?)?;
        let value = split(self.value.forward(hidden)?)?;
        let scores = (query.matmul(&key.t()?)? / (head as f64).sqrt())?.broadcast_add(bias)?;
        let weights = candle_nn::ops::softmax_last_dim(&scores)?;
        weights
            .matmul(&value)?
            .transpose(1, 2)?
            .reshape((batch, tokens, width))
    }
}

/// A layer norm named `weight`/`bias`, or `gamma`/`beta` as older
/// checkpoints have it.
fn layer_norm(size: usize, eps: f64, vb: VarBuilder<'_>) -> Result<LayerNorm> {
    let (weight, bias) = if vb.contains_tensor("weight") {
        ("weight", "bias")
    } else {
        ("gamma", "beta")
    };
    Ok(LayerNorm::new(
        vb.get(size, weight)?,
        vb.get(size, bias)?,
        eps,
    ))
}
