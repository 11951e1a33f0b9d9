//! A tool as one call uses it: its live state and what is compiled from its
//! descriptor (the input schema's validator, the audit redactor, the output
//! schema's validator, its metric series), found with one lookup and passed
//! down the call.

use std::sync::{Arc, OnceLock};

use toolmesh_proto::pb;

use super::ToolState;
use crate::{
    access::audit::Redactor,
    catalog::validate::{self, ArgumentValidator},
    error::RegistryError,
    metrics::{Metrics, ToolSeries},
};

/// One tool, for one call.
pub struct Entry {
    tool: Arc<ToolState>,
    compiled: Arc<Compiled>,
}

/// What is compiled from one descriptor. `Invoke` recognizes that
/// descriptor by pointer, so the hot path never compares schema texts.
pub(super) struct Compiled {
    pub(super) descriptor: Arc<pb::ToolDescriptor>,
    /// The input schema, or why it does not compile.
    input: Result<Arc<ArgumentValidator>, String>,
    /// Built on the first audited call.
    redactor: OnceLock<Arc<Redactor>>,
    /// The output schema, compiled on the first result to check (`None`:
    /// the tool declares none).
    output: OnceLock<Option<Arc<ArgumentValidator>>>,
    /// The tool's metric series, resolved on its first call.
    series: OnceLock<Arc<ToolSeries>>,
}

impl Compiled {
    /// For `descriptor`, with its input schema compiled (`input`).
    pub(super) fn new(
        descriptor: Arc<pb::ToolDescriptor>,
        input: Result<Arc<ArgumentValidator>, String>,
    ) -> Self {
        Self {
            descriptor,
            input,
            redactor: OnceLock::new(),
            output: OnceLock::new(),
            series: OnceLock::new(),
        }
    }

    /// For `descriptor`, compiling its input schema.
    pub(super) fn compile(descriptor: Arc<pb::ToolDescriptor>) -> Self {
        let input = validate::compile(&descriptor.input_schema_json).map(Arc::new);
        Self::new(descriptor, input)
    }

    /// Its input validator, if the schema compiled: what a descriptor with
    /// the same input schema may reuse.
    pub(super) fn input(&self) -> Option<&Arc<ArgumentValidator>> {
        self.input.as_ref().ok()
    }
}

impl Entry {
    pub(super) fn new(tool: Arc<ToolState>, compiled: Arc<Compiled>) -> Self {
        debug_assert!(Arc::ptr_eq(&tool.descriptor, &compiled.descriptor));
        Self { tool, compiled }
    }

    /// The tool's state when the call found it.
    pub fn tool(&self) -> &Arc<ToolState> {
        &self.tool
    }

    /// The compiled input schema.
    pub fn validator(&self) -> Result<&Arc<ArgumentValidator>, RegistryError> {
        self.compiled
            .input
            .as_ref()
            .map_err(|reason| RegistryError::InvalidSchema {
                tool: self.tool.name().to_owned(),
                field: "input_schema_json".into(),
                reason: reason.clone(),
            })
    }

    /// What hides the sensitive fields of the arguments in the audit log.
    pub fn redactor(&self) -> Arc<Redactor> {
        self.compiled
            .redactor
            .get_or_init(|| {
                Arc::new(Redactor::from_schema_json(
                    &self.compiled.descriptor.input_schema_json,
                ))
            })
            .clone()
    }

    /// The tool's metric series in `metrics`.
    pub(crate) fn series(&self, metrics: &Arc<Metrics>) -> Arc<ToolSeries> {
        let series = self
            .compiled
            .series
            .get_or_init(|| Arc::new(metrics.series(self.tool.name())));
        if series.of(metrics) {
            series.clone()
        } else {
            Arc::new(metrics.series(self.tool.name()))
        }
    }

    /// The compiled output schema, if the tool declares one (the announce
    /// checked that it compiles).
    pub fn output_validator(&self) -> Option<&Arc<ArgumentValidator>> {
        let text = &self.compiled.descriptor.output_schema_json;
        if text.trim().is_empty() {
            return None;
        }
        self.compiled
            .output
            .get_or_init(|| validate::compile(text).ok().map(Arc::new))
            .as_ref()
    }
}
