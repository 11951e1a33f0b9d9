//! `--search-model`: the embedding model `SearchTools` ranks with, loaded
//! at start, and the index that uses it.
//!
//! The model (toolmesh-embed: ndarray and the tokenizers crate) is the registry's `model`
//! feature, on by default. A build without it (the fuzz targets') ranks
//! with BM25 alone and refuses `--search-model` at start, by name.

use std::sync::Arc;

use crate::{catalog::search::ToolSearch, config::Config, metrics::Metrics};

use super::ServeError;

#[cfg(feature = "model")]
pub(super) use with_model::SearchModel;
#[cfg(not(feature = "model"))]
pub(super) use without_model::SearchModel;

#[cfg(feature = "model")]
mod with_model {
    use std::sync::Arc;

    use toolmesh_embed::Model;

    use crate::{
        catalog::search::{
            ToolSearch,
            semantic::{EmbeddingCache, RedisCache, Semantic, SemanticSettings},
        },
        config::Config,
        metrics::Metrics,
        redis_pool::RedisPool,
    };

    use super::ServeError;

    /// The model `SearchTools` ranks with, and where its vectors are shared.
    pub(in crate::serving::server) struct SearchModel {
        model: Arc<Model>,
        cache: Option<Arc<dyn EmbeddingCache>>,
    }

    impl SearchModel {
        /// Loads `--search-model`, if set.
        pub(in crate::serving::server) fn load(
            config: &Config,
        ) -> Result<Option<Self>, ServeError> {
            let Some(dir) = &config.search_model else {
                return Ok(None);
            };
            let started = std::time::Instant::now();
            let model =
                Model::load(dir).map_err(|e| ServeError::Config(format!("--search-model {e}")))?;
            tracing::info!(
                dir = %dir.display(),
                digest = %&model.digest()[..16],
                dimension = model.dimension(),
                took = ?started.elapsed(),
                "search model loaded: SearchTools ranks hybrid once the tools are embedded"
            );
            Ok(Some(Self {
                model: Arc::new(model),
                cache: None,
            }))
        }

        /// The same model, its vectors shared with the other replicas in
        /// Redis under `prefix`.
        pub(in crate::serving::server) fn shared(self, pool: Arc<RedisPool>, prefix: &str) -> Self {
            let cache = RedisCache::new(pool, prefix, self.model.digest(), self.model.dimension());
            Self {
                cache: Some(Arc::new(cache)),
                ..self
            }
        }

        /// `SearchTools`' index, hybrid with this model.
        pub(super) fn index(self, config: &Config, metrics: &Arc<Metrics>) -> ToolSearch {
            let settings = SemanticSettings {
                query_threads: usize::from(config.search_threads),
                ..SemanticSettings::default()
            };
            match Semantic::new(self.model, self.cache, &settings, metrics.clone()) {
                Ok(semantic) => ToolSearch::hybrid(semantic),
                Err(error) => {
                    tracing::error!(%error, "the search model's threads could not start; SearchTools ranks with BM25 alone");
                    ToolSearch::default()
                }
            }
        }
    }
}

#[cfg(not(feature = "model"))]
mod without_model {
    use std::sync::Arc;

    use crate::{
        catalog::search::ToolSearch, config::Config, metrics::Metrics, redis_pool::RedisPool,
    };

    use super::ServeError;

    /// No model can be loaded in this build: the type has no values.
    pub(in crate::serving::server) enum SearchModel {}

    impl SearchModel {
        /// Refuses `--search-model`, if set.
        pub(in crate::serving::server) fn load(
            config: &Config,
        ) -> Result<Option<Self>, ServeError> {
            match &config.search_model {
                None => Ok(None),
                Some(_) => Err(ServeError::Config(
                    "--search-model: this registry was built without the `model` feature (cargo build --features model)".into(),
                )),
            }
        }

        pub(in crate::serving::server) fn shared(
            self,
            _pool: Arc<RedisPool>,
            _prefix: &str,
        ) -> Self {
            match self {}
        }

        pub(super) fn index(self, _config: &Config, _metrics: &Arc<Metrics>) -> ToolSearch {
            match self {}
        }
    }
}

/// `SearchTools`' index: hybrid with a model, BM25 alone without.
pub(super) fn search_index(
    model: Option<SearchModel>,
    config: &Config,
    metrics: &Arc<Metrics>,
) -> ToolSearch {
    match model {
        Some(model) => model.index(config, metrics),
        None => ToolSearch::default(),
    }
}
