//! What a sentence-transformers model directory says about itself, in the
//! Hugging Face layout: the encoder's `config.json`, the modules
//! (`modules.json`: which pooling, whether normalised), the pooling's own
//! `config.json`, the longest input (`sentence_bert_config.json`) and the
//! prompts a query or a document is prefixed with
//! (`config_sentence_transformers.json`). Every file but `config.json` is
//! optional, with the defaults sentence-transformers itself uses.

use std::path::Path;

use serde::Deserialize;

use crate::LoadError;

/// The encoder families this build runs.
const ENCODERS: &[&str] = &["bert"];

/// How token vectors become one sentence vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The mean of the tokens' vectors (padding excluded).
    Mean,
    /// The first token's (`[CLS]`) vector.
    Cls,
    /// Each dimension's largest value over the tokens.
    Max,
}

/// The directory's settings, read and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// The encoder's configuration.
    pub encoder: crate::bert::Config,
    /// Its pooling.
    pub pooling: Pooling,
    /// Whether sentence vectors are scaled to length 1.
    pub normalize: bool,
    /// Most tokens read of one text, `[CLS]` and `[SEP]` included.
    pub max_tokens: usize,
    /// Prefix of a query's text (E5's `query: `); empty if none.
    pub query_prompt: String,
    /// Prefix of a document's text; empty if none.
    pub document_prompt: String,
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    word_embedding_dimension: Option<usize>,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

#[derive(Deserialize)]
struct SentenceConfig {
    max_seq_length: Option<usize>,
}

#[derive(Deserialize, Default)]
struct Prompts {
    #[serde(default)]
    prompts: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct ModelType {
    model_type: Option<String>,
}

impl Layout {
    /// Reads the settings of the model in `dir`.
    pub fn read(dir: &Path) -> Result<Self, LoadError> {
        let config = dir.join("config.json");
        let kind: ModelType = read_json(&config)?.ok_or_else(|| missing(&config))?;
        let kind = kind.model_type.unwrap_or_else(|| "bert".to_owned());
        if !ENCODERS.contains(&kind.as_str()) {
            return Err(LoadError::new(
                &config,
                format!(
                    "model_type {kind:?} is not an encoder this build runs (BERT family: MiniLM, BGE, E5, GTE)"
                ),
            ));
        }
        let encoder: crate::bert::Config = read_json(&config)?.ok_or_else(|| missing(&config))?;
        if let Some(problem) = encoder.problem() {
            return Err(LoadError::new(&config, problem));
        }
        let modules: Vec<Module> = read_json(&dir.join("modules.json"))?.unwrap_or_default();
        let pooling_dir = modules
            .iter()
            .find(|m| m.kind.ends_with(".Pooling"))
            .map_or_else(|| "1_Pooling".to_owned(), |m| m.path.clone());
        let normalize = modules.iter().any(|m| m.kind.ends_with(".Normalize"));
        let pooling_file = dir.join(pooling_dir).join("config.json");
        let pooling = match read_json::<PoolingConfig>(&pooling_file)? {
            Some(p) => pooling(&p, encoder.hidden_size, &pooling_file)?,
            None => Pooling::Mean,
        };
        let sentence: Option<SentenceConfig> = read_json(&dir.join("sentence_bert_config.json"))?;
        let max_tokens = sentence
            .and_then(|s| s.max_seq_length)
            .unwrap_or(encoder.max_position_embeddings)
            .min(encoder.max_position_embeddings);
        if max_tokens < 3 {
            return Err(LoadError::new(
                &dir.join("sentence_bert_config.json"),
                format!("max_seq_length {max_tokens} leaves no room for a word"),
            ));
        }
        let prompts: Prompts =
            read_json(&dir.join("config_sentence_transformers.json"))?.unwrap_or_default();
        let prompt = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| prompts.prompts.get(*n))
                .cloned()
                .unwrap_or_default()
        };
        Ok(Self {
            encoder,
            pooling,
            normalize,
            max_tokens,
            query_prompt: prompt(&["query"]),
            document_prompt: prompt(&["document", "passage"]),
        })
    }
}

fn pooling(config: &PoolingConfig, hidden: usize, file: &Path) -> Result<Pooling, LoadError> {
    if let Some(dimension) = config.word_embedding_dimension
        && dimension != hidden
    {
        return Err(LoadError::new(
            file,
            format!(
                "word_embedding_dimension {dimension} is not the encoder's hidden_size {hidden}"
            ),
        ));
    }
    let unsupported = [
        (config.pooling_mode_mean_sqrt_len_tokens, "mean_sqrt_len"),
        (config.pooling_mode_weightedmean_tokens, "weightedmean"),
        (config.pooling_mode_lasttoken, "lasttoken"),
    ];
    if let Some((_, name)) = unsupported.iter().find(|(on, _)| *on) {
        return Err(LoadError::new(
            file,
            format!("pooling mode {name} is not supported (mean, cls or max)"),
        ));
    }
    match (
        config.pooling_mode_mean_tokens,
        config.pooling_mode_cls_token,
        config.pooling_mode_max_tokens,
    ) {
        (true, false, false) => Ok(Pooling::Mean),
        (false, true, false) => Ok(Pooling::Cls),
        (false, false, true) => Ok(Pooling::Max),
        (false, false, false) => Err(LoadError::new(file, "no pooling mode is set")),
        _ => Err(LoadError::new(
            file,
            "several pooling modes at once (their concatenation) are not supported",
        )),
    }
}

/// `path` parsed, `None` if there is no such file.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, LoadError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LoadError::new(path, e.to_string())),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| LoadError::new(path, e.to_string()))
}

fn missing(path: &Path) -> LoadError {
    LoadError::new(path, "missing: a model directory needs it")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT: &str = r#"{"model_type": "bert", "vocab_size": 100, "hidden_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "max_position_embeddings": 64,
        "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
        "pad_token_id": 0}"#;

    fn dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a directory");
        for (name, text) in files {
            let path = dir.path().join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("mkdir");
            }
            std::fs::write(path, text).expect("write");
        }
        dir
    }

    #[test]
    fn a_sentence_transformers_directory_says_how_it_pools_and_normalises() {
        let dir = dir(&[
            ("config.json", BERT),
            (
                "modules.json",
                r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                    {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                    {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
            ),
            (
                "1_Pooling/config.json",
                r#"{"word_embedding_dimension": 8, "pooling_mode_cls_token": true}"#,
            ),
            ("sentence_bert_config.json", r#"{"max_seq_length": 128}"#),
            (
                "config_sentence_transformers.json",
                r#"{"prompts": {"query": "query: ", "passage": "passage: "}}"#,
            ),
        ]);
        let layout = Layout::read(dir.path()).expect("reads");
        assert_eq!(layout.pooling, Pooling::Cls);
        assert!(layout.normalize);
        assert_eq!(layout.max_tokens, 64, "bounded by the positions");
        assert_eq!(layout.query_prompt, "query: ");
        assert_eq!(layout.document_prompt, "passage: ");
    }

    #[test]
    fn a_plain_encoder_pools_by_the_mean_unnormalised() {
        let dir = dir(&[("config.json", BERT)]);
        let layout = Layout::read(dir.path()).expect("reads");
        assert_eq!(layout.pooling, Pooling::Mean);
        assert!(!layout.normalize);
        assert_eq!(layout.max_tokens, 64);
        assert!(layout.query_prompt.is_empty());
    }

    #[test]
    fn each_bad_file_is_named_with_its_problem() {
        // The directory's files, the file named, the problem said.
        type Case<'a> = (&'a [(&'a str, &'a str)], &'a str, &'a str);
        let heads = BERT.replace(r#""num_attention_heads": 2"#, r#""num_attention_heads": 3"#);
        let activation = BERT.replace(r#""hidden_act": "gelu""#, r#""hidden_act": "swiglu""#);
        let positions = BERT.replace('}', r#", "position_embedding_type": "relative_key"}"#);
        let cases: [Case<'_>; 9] = [
            (&[], "config.json", "missing"),
            (
                &[("config.json", "{not json")],
                "config.json",
                "key must be a string",
            ),
            (
                &[("config.json", r#"{"model_type": "llama"}"#)],
                "config.json",
                "not an encoder",
            ),
            (
                &[
                    ("config.json", BERT),
                    (
                        "1_Pooling/config.json",
                        r#"{"word_embedding_dimension": 9, "pooling_mode_mean_tokens": true}"#,
                    ),
                ],
                "1_Pooling/config.json",
                "hidden_size 8",
            ),
            (
                &[
                    ("config.json", BERT),
                    (
                        "1_Pooling/config.json",
                        r#"{"pooling_mode_mean_tokens": true, "pooling_mode_max_tokens": true}"#,
                    ),
                ],
                "1_Pooling/config.json",
                "several pooling modes",
            ),
            (
                &[
                    ("config.json", BERT),
                    (
                        "1_Pooling/config.json",
                        r#"{"pooling_mode_lasttoken": true}"#,
                    ),
                ],
                "1_Pooling/config.json",
                "lasttoken",
            ),
            (
                &[("config.json", &heads)],
                "config.json",
                "not a multiple of num_attention_heads 3",
            ),
            (&[("config.json", &activation)], "config.json", "swiglu"),
            (
                &[("config.json", &positions)],
                "config.json",
                "relative_key",
            ),
        ];
        for (files, file, problem) in cases {
            let dir = dir(files);
            let error = Layout::read(dir.path()).expect_err("refused").to_string();
            assert!(
                error.contains(file) && error.contains(problem),
                "{file}: {problem}: {error}"
            );
        }
    }
}
